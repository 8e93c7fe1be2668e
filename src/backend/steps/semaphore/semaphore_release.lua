-- Semaphore release: removes one permit from every set of KEYS (see semaphore.lua for the
-- sets), pruning expired permits first, so an expired permit counts as not held.
--
-- KEYS[1..n]  the permit's sets
-- ARGV[1]     its owner token
--
-- Returns {1} when the permit was held (and is now released), {0} when it was not, or
-- {-2, i} when KEYS[i] is not a semaphore set (corrupt state; nothing changed).
local member = 'p:' .. ARGV[1]

local valid, corrupt = inspect_all()
if not valid then
    return {CORRUPT, corrupt}
end

local now = now_ms()
local released = 0
for i = 1, #KEYS do
    local changed = prune(KEYS[i], now)
    if redis.call('ZREM', KEYS[i], member) == 1 then
        released = 1
        changed = changed + 1
    end
    if changed > 0 then
        settle(KEYS[i])
    end
end
return {released}
