-- Semaphore release: removes one permit from every set of KEYS (see semaphore.lua for the
-- sets), pruning expired permits first, so an expired permit counts as not held.
--
-- KEYS[1..n]  the permit's sets
-- ARGV[1]     its owner token
--
-- Returns {'released'} when the permit was held (and is now released), {'not_held'} when it
-- was not, or {'corrupt', i, what} when KEYS[i] is not a semaphore set (nothing changed).
local member, now, refused = permit_step()
if refused then
    return refused
end
local released = 'not_held'
for i = 1, #KEYS do
    local changed = prune(KEYS[i], now)
    if redis.call('ZREM', KEYS[i], member) == 1 then
        released = 'released'
        changed = changed + 1
    end
    if changed > 0 then
        settle(KEYS[i])
    end
end
return {released}
