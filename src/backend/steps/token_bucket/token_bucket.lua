-- Token bucket: at most ARGV[2] tokens; at the end of every whole period of ARGV[4] ms,
-- counted from the last refill, ARGV[3] tokens come back, capped at the limit. A full bucket
-- has no period under way: its first period starts when a token is taken from it, so a
-- missing key (expired once the bucket was full again) and a full bucket behave alike.
-- A rejected request consumes nothing, and a probe (0 permits) creates and changes nothing.
--
-- KEYS[1]  the bucket: the string "<tokens>:<refilled at, server ms>", expiring when the
--          bucket would be full again; missing means full
-- ARGV[1]  permits asked for (0 ..= limit + 1)
-- ARGV[2]  token limit (1 ..= 2^53 - 1)
-- ARGV[3]  tokens per period (1 ..= limit)
-- ARGV[4]  period in ms (>= 1)
-- Lua numbers are doubles: the caller keeps every integer here below 2^53, and the time to
-- refill an empty bucket (ceil(limit / tokens per period) periods) at most 2^52 ms, so that
-- every time computed here, server clock included, is an exact integer.
--
-- Returns {'granted' or 'denied', tokens left, ms until full, ms until the same request can
-- be granted (-1: granted, or more than the limit)}, or {'corrupt', 1, what} when the stored
-- state is malformed or of another type (nothing changed). A grant is a single integer
-- instead: tokens * 2^32 + ms with fewer than 2^21 tokens left and full again within 2^32
-- ms; else -(tokens * (R + 1) + ms) - 1, where R = ceil(limit / tokens per period) * period
-- bounds the ms until full, when that is below 2^53 in magnitude. Redis spends about as much
-- on a reply table as on a call. Globals are read once into
-- locals (the math library's functions too: each `math.x` is a global and a field looked
-- up), numbers compared rather than passed to `math.min`, strings read as numbers with
-- `+ 0`, and no closure is made, for the same reason.
local call, argv = redis.call, ARGV
local floor, ceil = math.floor, math.ceil
local permits = argv[1] + 0
local limit = argv[2] + 0
local rate = argv[3] + 0
local period = argv[4] + 0

local time = call('TIME')
local now = time[1] * 1000 + floor(time[2] / 1000)

local tokens, refilled = limit, now
-- pcall: a key of another type answers WRONGTYPE, which is corrupt state, not a failure.
local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'table' then
    return {'corrupt', 1, 'the token bucket is not a "<tokens>:<ms>" string'}
end
if raw then
    local t, r = string.match(raw, '^(%d+):(%d+)$')
    if t == nil then
        return {'corrupt', 1, 'the token bucket is not a "<tokens>:<ms>" string'}
    end
    -- The state carries its own refill time, so a key that lost its expiry still refills
    -- correctly (the next take sets an expiry again): no PTTL needed.
    -- More tokens than the limit: the limiter was rebuilt with a smaller one. A refill time
    -- ahead of the clock (a failover to a server whose clock is behind): start the period now
    -- rather than make clients wait for a time that may be far off.
    tokens = t + 0
    if tokens > limit then
        tokens = limit
    end
    refilled = r + 0
    if refilled > now then
        refilled = now
    end
    local periods = floor((now - refilled) / period)
    if periods >= ceil((limit - tokens) / rate) then
        tokens = limit
    else
        -- Whole periods only: the partial period under way is kept.
        tokens = tokens + periods * rate
        refilled = refilled + periods * period
    end
end
if tokens == limit then
    refilled = now
end

-- The ms until the bucket holds n > tokens tokens is
-- ceil((n - tokens) / rate) * period - (now - refilled), written out where it is needed.
local full_in = 0
if permits > tokens then
    local retry = -1
    if permits <= limit then
        retry = ceil((permits - tokens) / rate) * period - (now - refilled)
    end
    if tokens < limit then
        full_in = ceil((limit - tokens) / rate) * period - (now - refilled)
    end
    return {'denied', tokens, full_in, retry}
end
if permits > 0 then
    tokens = tokens - permits
    full_in = ceil((limit - tokens) / rate) * period - (now - refilled)
    -- '%d', not tostring: Lua 5.1 prints numbers with 14 significant digits. PXAT rather
    -- than PX: the server would rewrite a relative expiry into this for replication.
    local format = string.format
    call('SET', KEYS[1], format('%d:%d', tokens, refilled), 'PXAT', format('%d', now + full_in))
elseif tokens < limit then
    full_in = ceil((limit - tokens) / rate) * period - (now - refilled)
end
if tokens < 2097152 and full_in < 4294967296 then
    return tokens * 4294967296 + full_in
end
local packed = tokens * (ceil(limit / rate) * period + 1) + full_in
if packed < 9007199254740992 then
    return -packed - 1
end
return {'granted', tokens, full_in, -1}
