-- Sliding window with segments: one count per segment, each segment stamped with its END
-- (rounded forward, so permits are never freed early) and freed once that end is a whole
-- window in the past. A rejected request consumes nothing, and a probe (0 permits) creates
-- nothing; neither writes, except to give back a lost expiry.
--
-- KEYS[1]  the window: a hash with one field per segment, field = segment end (ms since the
--          epoch, server clock), value = permits counted in that segment; and, once a grant
--          has written them, two summary fields: 'n', the sum of the segments' counts, and
--          'o', the oldest segment's end. The key expires when its newest segment leaves the
--          window.
-- ARGV[1]  permits asked for (>= 0, at most limit + 1)
-- ARGV[2]  permits per window (1 ..= 2^52 - 1)
-- ARGV[3]  window length in milliseconds (a multiple of ARGV[4], at most 2^40)
-- ARGV[4]  segment length in milliseconds (>= 1)
--
-- Every number stays below 2^53, so Lua's doubles hold it exactly.
-- Returns {'granted' or 'denied', remaining, ms until the quota is whole, ms until the same
-- request can be granted (-1: granted, or never)}, or {'corrupt', 1, what} when the state is
-- not a hash of such integers (nothing changed). A grant is a single integer instead:
-- remaining * 2^32 + ms with fewer than 2^21 permits remaining and the quota whole again
-- within 2^32 ms; else -(remaining * (window + segment + 1) + ms) - 1 when the ms fit below
-- that radix and the whole is below 2^53 in magnitude.
--
-- Cost: Redis charges every Lua step (a call thousands of instructions, a reply table as
-- much, a string read as a number or a global looked up hundreds), so the common steps are
-- kept short. While the oldest segment is still in the window, every segment is live and
-- the summary holds their sum: a grant or a probe reads the two summary fields, not every
-- segment. Any other step (a rejection, which needs the segments for its retry time; a
-- segment leaving the window; no summary, or one that does not read as numbers) reads and
-- checks the whole hash, and a grant there writes the summary anew. Globals are read once
-- into locals, and arguments read as numbers with `+ 0`.
local call, key, tonumber, format, type = redis.call, KEYS[1], tonumber, string.format, type
local permits = ARGV[1] + 0
local limit = ARGV[2] + 0
local window = ARGV[3] + 0
local segment = ARGV[4] + 0
local MAX_COUNT = 4503599627370495 -- 2^52 - 1, the largest limit
local MAX_END = 9007199254740991 -- 2^53 - 1
-- Only the message is made on every call; its table only when returned.
local CORRUPT = 'the sliding window is not a hash of segment ends to counts'

local function granted(remaining, reset)
    if remaining < 2097152 and reset < 4294967296 then
        return remaining * 4294967296 + reset
    end
    -- Else by one more than the longest reset, a window and a segment (a key whose expiry is
    -- further off, after a server clock stepped back, answers the table).
    local radix = window + segment + 1
    if reset < radix then
        local packed = remaining * radix + reset
        if packed < 9007199254740992 then
            return -packed - 1
        end
    end
    return {'granted', remaining, reset, -1}
end

local time = call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)
-- The end of the segment holding now: strictly after now, so never early.
local current = now - now % segment + segment

-- The common steps, on the summary alone.
local summary = redis.pcall('HMGET', key, 'n', 'o')
if summary.err then
    return {'corrupt', 1, CORRUPT}
end
local total, oldest = tonumber(summary[1]), tonumber(summary[2])
if total and oldest and oldest + window > now and total % 1 == 0 and oldest % 1 == 0
    and total >= 0 and total <= MAX_COUNT then
    -- The summary is counted first: HINCRBY refuses a value that only reads as a number
    -- (such as '1e3') without changing it, and the whole-hash step below then writes the
    -- summary anew.
    if permits > 0 and total + permits <= limit
        and type(redis.pcall('HINCRBY', key, 'n', ARGV[1])) ~= 'table' then
        local added = redis.pcall('HINCRBY', key, format('%d', current), ARGV[1])
        if type(added) == 'table' then
            -- A segment count HINCRBY refuses: take the summary's share back, change nothing.
            call('HINCRBY', key, 'n', -permits)
            return {'corrupt', 1, CORRUPT}
        end
        if added == permits then
            -- A new segment: the key lives until it leaves the window, never sooner than a
            -- newer segment already asked for (after a server clock stepped back). PTTL and a
            -- comparison, not PEXPIREAT GT: that is Redis 7.0 syntax.
            local ttl = call('PTTL', key)
            if ttl >= 0 and current + window > now + ttl then
                call('PEXPIREAT', key, format('%d', current + window))
            end
        end
        return granted(limit - total - permits, current + window - now)
    end
    if permits == 0 then
        local ttl = call('PTTL', key)
        if ttl >= 0 then
            return granted(math.max(limit - total, 0), ttl)
        end
        -- No expiry: the whole-hash step below gives it back.
    end
end

local flat = redis.pcall('HGETALL', key)
if flat.err then
    return {'corrupt', 1, CORRUPT}
end

-- One pass, with no tables: most steps only need the live count and the ends.
local count, newest, first, live, stale = 0, 0, nil, 0, 0
for i = 1, #flat, 2 do
    local name = flat[i]
    if name ~= 'n' and name ~= 'o' then
        local finish, counted = tonumber(name), tonumber(flat[i + 1])
        if not (finish and counted) or finish % 1 ~= 0 or counted % 1 ~= 0 or counted < 0
            or finish > MAX_END or counted > MAX_COUNT then
            return {'corrupt', 1, CORRUPT}
        end
        if finish > newest then
            newest = finish
        end
        if finish + window > now then
            live = live + 1
            count = count + counted
            if not first or finish < first then
                first = finish
            end
        else
            stale = stale + 1
        end
    end
end

if permits > 0 and count + permits <= limit then
    -- Counted first: a count HINCRBY refuses fails the step before anything changed.
    local added = redis.pcall('HINCRBY', key, format('%d', current), ARGV[1])
    if type(added) == 'table' then
        return {'corrupt', 1, CORRUPT}
    end
    if stale > 0 then
        for i = 1, #flat, 2 do
            local name = flat[i]
            if name ~= 'n' and name ~= 'o' and tonumber(name) + window <= now then
                call('HDEL', key, name)
            end
        end
    end
    if not first or current < first then
        first = current
    end
    call('HSET', key, 'n', format('%d', count + permits), 'o', format('%d', first))
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
        if finish and finish + window > now then
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
return {'denied', remaining, reset, retry}
