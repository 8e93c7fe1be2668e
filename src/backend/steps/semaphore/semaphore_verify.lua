-- Semaphore verify: whether a permit is held in every set of KEYS (see semaphore.lua for the
-- sets), after pruning expired permits. A point-in-time answer; it writes only to prune.
--
-- KEYS[1..n]  the permit's sets
-- ARGV[1]     its owner token
--
-- Returns {'held'}, {'not_held'}, or {'corrupt', i, what} when KEYS[i] is not a semaphore
-- set (nothing changed).
local held = 'held'
local member, now, refused = permit_step()
if refused then
    return refused
end
for i = 1, #KEYS do
    -- A set settled away held only its capacity: not this permit. It is not read again once
    -- deleted (a node refuses a script that touches a key it deleted while the slot moves).
    local deleted = prune(KEYS[i], now) > 0 and settle(KEYS[i])
    if deleted or not redis.call('ZSCORE', KEYS[i], member) then
        held = 'not_held'
    end
end
return {held}
