-- Redlock raise: the group's fencing token written back to one node's counter, which only
-- moves up (see fencing_counter.lua for the counter): a counter already at or above it is
-- left as it is.
--
-- KEYS[1]  the node's fencing counter
-- ARGV[1]  the group's token, a string of decimal digits (no leading zero)
--
-- Returns {'raised'} (the counter is at least the token now), or {'corrupt', 1, what}
-- (nothing changed).
local counter, problem = fencing_counter(KEYS[1])
if counter == nil then
    return {'corrupt', 1, problem}
end
if not counter or digits_below(counter, ARGV[1]) then
    redis.call('SET', KEYS[1], ARGV[1])
    keep_fencing_counter(KEYS[1], ARGV[1], redis.call('TIME'), 0)
end
return {'raised'}
