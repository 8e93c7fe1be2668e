-- Fixed window: one counter per window; the first counted request fixes the window's end.
-- A rejected request consumes nothing, and a probe (0 permits) creates nothing.
--
-- KEYS[1]  the window's counter (string integer with an expiry)
-- ARGV[1]  permits asked for (>= 0)
-- ARGV[2]  permits per window (>= 1)
-- ARGV[3]  window length in milliseconds (>= 1)
--
-- Returns {granted (1/0), count after the step, ms until the window ends (-2: no window)},
-- or {-1, 0, 0} when the counter is not an integer (corrupt state; nothing changed).
local permits = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local window = tonumber(ARGV[3])

local count = 0
local raw = redis.call('GET', KEYS[1])
if raw then
    count = tonumber(raw)
    if count == nil or count ~= math.floor(count) then
        return {-1, 0, 0}
    end
end

local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then
    -- A counter without expiry would never reset: give it the window it lost.
    redis.call('PEXPIRE', KEYS[1], window)
    ttl = window
end

if count + permits > limit then
    return {0, count, ttl}
end
if permits > 0 then
    count = redis.call('INCRBY', KEYS[1], permits)
    if ttl < 0 then
        redis.call('PEXPIRE', KEYS[1], window)
        ttl = window
    end
end
return {1, count, ttl}
