-- Session grant: a new lease with no keys, if the id holds none yet.
--
-- KEYS[1..3] the space's keys
-- ARGV[1]  the lease id (its owner token)
-- ARGV[2]  the lease in milliseconds (1 ..= 2^40)
-- ARGV[3]  the server time (ms since the epoch) after which this step changes nothing; 0: none
--
-- Returns {'late'}     the step arrived after ARGV[3]; nothing changed
--         {'granted'}  also when the id holds a live lease already (this grant delivered
--                      twice): nothing changed
--         {'corrupt', i, what}
local now, _, refused = first_checks(ARGV[3])
if refused then
    return refused
end
if lease_expiry(ARGV[1], now) then
    return {'granted'}
end
refuse_when_out_of_memory(KEYS[1])
redis.call('ZADD', KEYS[1], digits(now + tonumber(ARGV[2])), ARGV[1])
expire_space(now)
prune(now)
return {'granted'}
