-- Hash-field lease release: deletes the field if the owner token holds it; never another
-- holder's lease, never another field.
--
-- KEYS[1]  the lease hash
-- ARGV[1]  the field
-- ARGV[2]  the lease's owner token
--
-- Returns {'released'}, {'no_lease'} (expired, or released before), {'other_owner'} (another
-- holder's lease: left alone), or {'corrupt', 1, what}.
local refused = corrupt()
if refused then
    return refused
end
local owner = redis.call('HGET', KEYS[1], ARGV[1])
if not owner then
    return {'no_lease'}
end
if owner ~= ARGV[2] then
    return {'other_owner'}
end
redis.call('HDEL', KEYS[1], ARGV[1])
return {'released'}
