-- Sliding window with segments: one count per segment, each segment stamped with its END
-- (rounded forward, so permits are never freed early) and freed once that end is a whole
-- window in the past. A rejected request consumes nothing, and a probe (0 permits) creates
-- nothing; neither writes, except to give back a lost expiry.
--
-- KEYS[1]  the window's segments: a hash, field = segment end (ms since the epoch, server
--          clock), value = permits counted in that segment
-- ARGV[1]  permits asked for (>= 0, at most limit + 1)
-- ARGV[2]  permits per window (1 ..= 2^52 - 1)
-- ARGV[3]  window length in milliseconds (a multiple of ARGV[4], at most 2^40)
-- ARGV[4]  segment length in milliseconds (>= 1)
--
-- Every number stays below 2^53, so Lua's doubles hold it exactly.
-- Returns {granted (1/0), remaining, ms until the quota is whole, ms until the same request
-- can be granted (-1: granted, or never)}, or {-1, 0, 0, -1} when the state is not a hash
-- of such integers (corrupt state; nothing changed). A grant leaving fewer than 2^20 permits
-- with its quota whole again within 2^32 ms is the single integer remaining * 2^32 + ms
-- instead: Redis spends about as much on a reply table as on a call. Globals are read once
-- into locals, and arguments read as numbers with `+ 0`, for the same reason.
local call, key, tonumber, format = redis.call, KEYS[1], tonumber, string.format
local permits = ARGV[1] + 0
local limit = ARGV[2] + 0
local window = ARGV[3] + 0
local segment = ARGV[4] + 0
local MAX_COUNT = 4503599627370495 -- 2^52 - 1, the largest limit
local MAX_END = 9007199254740991 -- 2^53 - 1

local function granted(remaining, reset)
    if remaining < 1048576 and reset < 4294967296 then
        return remaining * 4294967296 + reset
    end
    return {1, remaining, reset, -1}
end

local time = call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)

local flat = redis.pcall('HGETALL', key)
if flat.err then
    return {-1, 0, 0, -1}
end

-- One pass, with no tables: most steps only need the live count and the newest end.
local count, newest, live, stale = 0, 0, 0, 0
for i = 1, #flat, 2 do
    local finish, counted = tonumber(flat[i]), tonumber(flat[i + 1])
    if not (finish and counted) or finish % 1 ~= 0 or counted % 1 ~= 0 or counted < 0
        or finish > MAX_END or counted > MAX_COUNT then
        return {-1, 0, 0, -1}
    end
    if finish > newest then
        newest = finish
    end
    if finish + window > now then
        live = live + 1
        count = count + counted
    else
        stale = stale + 1
    end
end

if permits > 0 and count + permits <= limit then
    -- The end of the segment holding now: strictly after now, so never early. Counted
    -- first: a count HINCRBY refuses fails the step before anything changed.
    local current = now - now % segment + segment
    local added = redis.pcall('HINCRBY', key, format('%d', current), ARGV[1])
    if type(added) == 'table' then
        return {-1, 0, 0, -1}
    end
    if stale > 0 then
        for i = 1, #flat, 2 do
            if tonumber(flat[i]) + window <= now then
                call('HDEL', key, flat[i])
            end
        end
    end
    -- The key lives until its newest segment leaves the window.
    if current > newest then
        newest = current
        call('PEXPIREAT', key, format('%d', newest + window))
    end
    return granted(limit - count - permits, newest + window - now)
end

if #flat > 0 and call('PTTL', key) == -1 then
    -- Segments without expiry would outlive the window: give it back (a time in the past
    -- deletes a key that holds only stale segments).
    call('PEXPIREAT', key, format('%d', newest + window))
end

local reset = 0
if live > 0 then
    reset = newest + window - now
end
local remaining = math.max(limit - count, 0)
if count + permits <= limit then
    return granted(remaining, reset)
end

-- Free the oldest segments until the request fits; a request above the limit never does.
local retry = -1
if permits <= limit then
    local ends, counts = {}, {}
    for i = 1, #flat, 2 do
        local finish = tonumber(flat[i])
        if finish + window > now then
            ends[#ends + 1] = finish
            counts[finish] = tonumber(flat[i + 1])
        end
    end
    table.sort(ends)
    local needed = count + permits - limit
    for _, finish in ipairs(ends) do
        needed = needed - counts[finish]
        if needed <= 0 then
            retry = finish + window - now
            break
        end
    end
end
return {0, remaining, reset, retry}
