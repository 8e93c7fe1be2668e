-- Fenced lock release: deletes the lease if it is held under the owner token. The counter is
-- never touched.
--
-- KEYS[1]  the lease key
-- ARGV[1]  the lease's owner token
--
-- Returns {'released'}, {'no_key'} (no lease: expired or released before),
--         {'other_owner'} (another owner's lease: left alone), or
--         {'corrupt', 1, what} when the key is not a lease (nothing changed).
local owner, why = lease_owner(KEYS[1])
if owner == nil then
    return corrupt_lease(why)
end
if not owner then
    return {'no_key'}
end
if owner ~= ARGV[1] then
    return {'other_owner'}
end
redis.call('DEL', KEYS[1])
return {'released'}
