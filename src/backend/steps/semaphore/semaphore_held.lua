-- Semaphore held: the live permits of each set of KEYS (see semaphore.lua for the sets):
-- those whose expiry is still ahead on the server clock. Reads only; nothing is pruned.
--
-- KEYS[1..n]  the sets
--
-- Returns {'live', count for KEYS[1], ..., count for KEYS[n]}, or {'corrupt', i, what} when
-- KEYS[i] is not a semaphore set. Reads only: it goes as EVALSHA_RO where the server has it.
local valid, index = inspect_all()
if not valid then
    return corrupt(index)
end

local now = now_ms()
local counts = {'live'}
for i = 1, #KEYS do
    counts[i + 1] = redis.call('ZCOUNT', KEYS[i], '(' .. digits(now), '+inf')
end
return counts
