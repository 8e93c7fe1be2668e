-- Fixed window: one counter per window; the first counted request fixes the window's end.
-- A rejected request consumes nothing, and a probe (0 permits) creates nothing.
--
-- KEYS[1]  the window's counter (string integer with an expiry)
-- ARGV[1]  permits asked for (>= 0, in decimal)
-- ARGV[2]  permits per window (>= 1)
-- ARGV[3]  window length in milliseconds (>= 1)
--
-- Returns {granted (1/0), count after the step, ms until the window ends (-2: no window)},
-- or {-1, 0, 0} when the counter is not an integer (corrupt state; nothing changed).
-- A grant whose count is below 2^20 and whose window ends within 2^32 ms is returned as the
-- single integer count * 2^32 + ms instead (exact: below 2^52, which a Lua number holds).
--
-- The grant path is the hot one, so it counts first and asks questions after: two calls
-- (INCRBY, then PTTL or the window's first PEXPIRE). A step that overshoots takes its permits
-- back before it returns, so no other client ever sees the overshoot. Every Lua operation
-- costs Redis thousands of instructions (a reply table more than either call), hence the
-- packed integer, and arguments handed to commands as the strings they arrived as.
local key = KEYS[1]
if ARGV[1] == '0' then
    -- A probe: read only.
    local raw = redis.call('GET', key)
    if not raw then
        return {1, 0, -2}
    end
    local count = tonumber(raw)
    if count == nil or count ~= math.floor(count) then
        return {-1, 0, 0}
    end
    local ttl = redis.call('PTTL', key)
    if ttl == -1 then
        -- A counter without expiry would never reset: give it the window it lost.
        redis.call('PEXPIRE', key, ARGV[3])
        ttl = tonumber(ARGV[3])
    end
    return {1, count, ttl}
end
-- INCRBY refuses a non-integer or wrongly typed value without changing it.
local count = redis.pcall('INCRBY', key, ARGV[1])
if type(count) ~= 'number' then
    return {-1, 0, 0}
end
local permits = tonumber(ARGV[1])
if count > tonumber(ARGV[2]) then
    local before = redis.call('DECRBY', key, ARGV[1])
    local ttl = redis.call('PTTL', key)
    if ttl == -1 then
        if before == 0 then
            -- This step created the counter (or found a bare 0): leave nothing behind.
            redis.call('DEL', key)
            ttl = -2
        else
            redis.call('PEXPIRE', key, ARGV[3])
            ttl = tonumber(ARGV[3])
        end
    end
    return {0, before, ttl}
end
-- NX sets the end only on a counter that has none: the window's first request.
local ttl
if count == permits and redis.call('PEXPIRE', key, ARGV[3], 'NX') == 1 then
    ttl = tonumber(ARGV[3])
else
    ttl = redis.call('PTTL', key)
    if ttl == -1 then
        redis.call('PEXPIRE', key, ARGV[3])
        ttl = tonumber(ARGV[3])
    end
end
if count < 1048576 and ttl >= 0 and ttl < 4294967296 then
    return count * 4294967296 + ttl
end
return {1, count, ttl}
