-- Semaphore held: the live permits of each set of KEYS (see semaphore.lua for the sets):
-- those whose expiry is still ahead on the server clock. Reads only; nothing is pruned.
--
-- KEYS[1..n]  the sets
--
-- Returns {1, count for KEYS[1], ..., count for KEYS[n]}, or {-2, i} when KEYS[i] is not a
-- semaphore set (corrupt state).
local valid, corrupt = inspect_all()
if not valid then
    return {CORRUPT, corrupt}
end

local now = now_ms()
local counts = {1}
for i = 1, #KEYS do
    counts[i + 1] = redis.call('ZCOUNT', KEYS[i], '(' .. digits(now), '+inf')
end
return counts
