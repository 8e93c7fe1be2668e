-- Fenced value write: stores ARGV[2] if ARGV[1] is at least the highest token the value has
-- seen, and records ARGV[1] as the highest; a lower token changes nothing.
--
-- KEYS[1]  the fenced value
-- ARGV[1]  the writer's fencing token, decimal digits without a leading zero
-- ARGV[2]  the value
-- ARGV[3]  the server time (ms since the epoch) after which this write changes nothing; 0:
--          none. A write delayed past its writer's answer must not land after a later write
--          of the same holder (an equal token passes).
--
-- Returns {'written'}, {'stale', highest} (nothing changed), {'late'} (nothing changed), or
-- {'corrupt', 1, what} (nothing changed).
local time = redis.call('TIME')
if ARGV[3] ~= '0' and time[1] * 1000 + math.floor(time[2] / 1000) > ARGV[3] + 0 then
    return {'late'}
end
local highest, problem = fenced_token()
if highest == nil then
    return {'corrupt', 1, problem}
end
if highest and digits_below(ARGV[1], highest) then
    return {'stale', highest}
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return {'written'}
