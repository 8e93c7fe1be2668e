-- Hash-field lease acquire: takes the field for the owner token if no live lease holds it.
--
-- KEYS[1]  the lease hash
-- ARGV[1]  the field (the lease's name)
-- ARGV[2]  owner token of the new lease
-- ARGV[3]  lease in milliseconds (1 ..= 2^40)
-- ARGV[4]  the server time (ms since the epoch) after which this step changes nothing; 0: none
--
-- Returns {'late'}         the step arrived after ARGV[4]; nothing changed
--         {'granted'}      also when the token holds the field already (this acquisition
--                          delivered twice): nothing changed
--         {'held', pttl}   another lease holds the field; pttl = its time left in ms (-1: no
--                          expiry, which only something else than this crate can have set)
--         {'corrupt', 1, what}
local now, _, refused = first_checks(ARGV[4])
if refused then
    return refused
end
-- An expired field reads as absent: the server removes it on access.
local owner = redis.call('HGET', KEYS[1], ARGV[1])
if owner == ARGV[2] then
    -- This acquisition delivered twice: the field it holds is its grant.
    return {'granted'}
end
if owner then
    return {'held', redis.call('HPTTL', KEYS[1], 'FIELDS', 1, ARGV[1])[1]}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local refused_expiry = expire_new_field_at(now + tonumber(ARGV[3]))
if refused_expiry then
    return refused_expiry
end
return {'granted'}
