-- Fixed window, hot-key tier: grant a request and reserve a batch beside it, in one step.
-- The batch is counted in the window like any grant, so other instances see it as used;
-- the instance that reserved it spends it locally until the window ends, and may return
-- what it did not spend (fixed_window_return.lua). An instance that never returns its batch
-- has only under-admitted.
--
-- KEYS[1]  the window's counter (string integer with an expiry)
-- ARGV[1]  permits asked for (>= 0: 0 reserves a batch alone, and never starts a window)
-- ARGV[2]  permits per window (1 to 10^15: exact in a Lua number)
-- ARGV[3]  window length in milliseconds (>= 1)
-- ARGV[4]  the largest batch to reserve (>= 1)
-- ARGV[5]  the share of what is left a batch may take, as its denominator (>= 1)
-- ARGV[6]  ms before the window's end the instance stops spending its batch (>= 0)
--
-- Returns {'granted' or 'denied', count after the step, ms until the window ends (-2: no
-- window), permits reserved beside the request, the window's end in ms on the server's
-- clock (0 when denied, or when the server cannot tell it)}, or {'corrupt', 1, what} when the counter is not a non-negative
-- integer. A rejected request consumes and reserves nothing.
local call, key = redis.call, KEYS[1]
local permits, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
-- pcall: a key of another type answers WRONGTYPE as a table instead of aborting.
local raw = redis.pcall('GET', key)
local count = 0
if raw then
    -- A counter as INCRBY reads one (see fixed_window.lua). Sixteen digits and more are
    -- above any limit this tier takes, and read as such rather than as inexact numbers.
    if type(raw) ~= 'string' or not (raw == '0' or string.match(raw, '^[1-9]%d*$')) then
        return {'corrupt', 1, 'the fixed-window counter is not a non-negative integer'}
    end
    if #raw > 15 then
        count = limit + 1
    else
        count = tonumber(raw)
    end
end
local ttl = call('PTTL', key)
if count + permits > limit then
    if ttl == -1 then
        -- A counter without expiry would never reset: give it the window it lost.
        call('PEXPIRE', key, ARGV[3])
        ttl = tonumber(ARGV[3])
    end
    return {'denied', math.min(count, limit), ttl, 0, 0}
end
-- The window's first request (or a counter that lost its expiry): it starts now.
local starts = ttl < 0
if starts then
    ttl = tonumber(ARGV[3])
end
-- The batch: at most the largest asked for; at most a share of what is left after the
-- request, so that instances racing for the last permits of a window take less and less;
-- and at most the window's remainder's part of the largest batch, counted to when the
-- instance stops spending, so that a batch reserved near the end is small, and none in the
-- last moments, where it could only lapse.
local max_batch, length = tonumber(ARGV[4]), tonumber(ARGV[3])
local spendable = ttl - tonumber(ARGV[6])
local batch = 0
if spendable > 0 then
    batch = math.min(
        max_batch,
        math.floor((limit - count - permits) / tonumber(ARGV[5])),
        math.ceil(max_batch * math.min(spendable, length) / length))
end
if starts and permits == 0 then
    batch = 0
end
if permits + batch == 0 then
    -- Nothing to count: nothing written, no window started.
    local window = redis.pcall('PEXPIRETIME', key)
    if type(window) ~= 'number' or window < 0 then
        window = 0
    end
    return {'granted', count, starts and -2 or ttl, 0, window}
end
local after = call('INCRBY', key, permits + batch)
if starts then
    call('PEXPIRE', key, ARGV[3])
end
-- The window's end, to the millisecond, names it: a return gives back only to the window
-- that ends then. PEXPIRETIME is Redis 7.0+ and Valkey 7.2+; elsewhere the answer is 0, and
-- the reservation's unspent permits are never given back (they lapse with their window).
local window = redis.pcall('PEXPIRETIME', key)
if type(window) ~= 'number' then
    window = 0
end
return {'granted', after, ttl, batch, window}
