-- Fixed window, hot-key tier: give back reserved permits an instance did not spend, to the
-- window they were reserved in and to no other. A return that arrives after its window
-- ended (late, delayed, sent again) changes nothing: it never creates a counter and never
-- lowers the count of a later window, which would admit more than the limit there.
--
-- KEYS[1]  the window's counter
-- ARGV[1]  permits to give back (>= 1)
-- ARGV[2]  the end of the window they were reserved in, in ms on the server's clock, as
--          fixed_window_reserve.lua reported it
--
-- Returns {'returned', permits given back}: 0 when the window is another one or gone.
local call, key = redis.call, KEYS[1]
local ttl = call('PTTL', key)
if ttl < 0 then
    return {'returned', 0}
end
-- The same window ends at the same time. Reading it again as TIME + PTTL may differ from the
-- reservation's reading by the few ms a script runs; a later window ends at least a whole
-- window later, and the tier takes no window shorter than 100 ms.
local time = call('TIME')
local window_end = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) + ttl
if math.abs(window_end - tonumber(ARGV[2])) > 5 then
    return {'returned', 0}
end
local raw = redis.pcall('GET', key)
if type(raw) ~= 'string' or not (raw == '0' or string.match(raw, '^[1-9]%d*$')) or #raw > 15 then
    return {'corrupt', 1, 'the fixed-window counter is not a non-negative integer'}
end
local back = math.min(tonumber(ARGV[1]), tonumber(raw))
if back > 0 then
    call('DECRBY', key, back)
end
return {'returned', back}
