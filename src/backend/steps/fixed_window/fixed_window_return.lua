-- Fixed window, hot-key tier: give back reserved permits an instance did not spend, to the
-- window they were reserved in and to no other. A return that arrives after its window
-- ended (late, delayed, sent again) changes nothing: it never creates a counter and never
-- lowers the count of a later window, which would admit more than the limit there.
--
-- KEYS[1]  the window's counter
-- ARGV[1]  permits to give back (>= 1)
-- ARGV[2]  the end of the window they were reserved in, in ms on the server's clock, as
--          fixed_window_reserve.lua reported it (PEXPIRETIME: Redis 7.0+, Valkey 7.2+)
-- ARGV[3]  permits per window
--
-- Returns {'returned', permits given back}: 0 when the window is another one or gone.
local call, key = redis.call, KEYS[1]
-- The same window ends at the same millisecond. A counter that was lost and started again
-- (a failover, an eviction, a DEL) is another window, though it may end moments later.
local window = redis.pcall('PEXPIRETIME', key)
if type(window) ~= 'number' or window ~= tonumber(ARGV[2]) then
    return {'returned', 0}
end
local raw = redis.pcall('GET', key)
if type(raw) ~= 'string' or not (raw == '0' or string.match(raw, '^[1-9]%d*$')) or #raw > 15 then
    return {'corrupt', 1, 'the fixed-window counter is not a non-negative integer'}
end
-- A count beyond the limit is the limit: a rejected request of one permit stays counted (see
-- the fixed window's plain-command step), and giving back from such a count would leave the
-- permits taken by the rejections, which admitted no one.
local count, back, limit = tonumber(raw), tonumber(ARGV[1]), tonumber(ARGV[3])
local held = math.min(count, limit)
-- The window counted the reserved permits: one that holds fewer is another window, started
-- again in the same millisecond (which the end alone cannot tell apart).
if held < back then
    return {'returned', 0}
end
call('DECRBY', key, count - held + back)
return {'returned', back}
