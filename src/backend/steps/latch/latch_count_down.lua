-- Latch count-down: one count-down of a generation, never below zero.
--
-- KEYS[1]  the latch
-- ARGV[1]  the generation counted down
--
-- Returns {'counted', count left}, {'completed'} (its count is zero already: nothing
-- changed), {'stale'} (no latch, or another generation: nothing changed), or
-- {'corrupt', 1, what}. The expiry is left as it is.
local gen, count = latch_state(KEYS[1])
if gen == nil then
    return corrupt()
end
if not gen or gen ~= ARGV[1] then
    return {'stale'}
end
if count == 0 then
    return {'completed'}
end
return {'counted', redis.call('HINCRBY', KEYS[1], 'count', -1)}
