-- The fencing counter: helpers shared by the scripts that hand out fencing tokens (the
-- fenced lock's acquisition, a read-write lease's writer, an election's terms, Redlock's
-- write-back), appended to their files.
--
-- A counter is a string of decimal digits, the last token handed out. The next token is the
-- larger of the counter plus one and the server's clock in microseconds since the epoch (the
-- floor): a counter that is gone (expired, or lost to a restart without persistence, a
-- failover that lost the last writes, FLUSHALL, an eviction) starts again above every token
-- handed out before it, as long as this server's clock is not behind the one that handed
-- out the last token by more than the time that has passed since. The floor stays below
-- 2^53, exact as a Lua number, until the year 2255. A token is read back with GET, never
-- taken from INCR's reply (a Lua number is a double, which loses digits above 2^53), and
-- compared with others as a string of digits.
--
-- So a counter need not live for ever, and does not (a name a client chooses must not leave
-- a key for ever): it expires FENCING_KEEP_MS after the later of its lease's end and the
-- moment the floor passes its value. Until then it answers a duplicate of the acquisition
-- that took it; after that, the floor alone hands out a greater token, unless the server's
-- clock steps back by more than FENCING_KEEP_MS.

-- How long a counter outlives what its token can still matter for: the most a server's
-- clock may step back (or a new primary's clock lag the old one's) without a token going
-- back.
local FENCING_KEEP_MS = 3600000
local FENCING_MAX = '9223372036854775807'

-- The counter's value as a digit string (false when absent), or nil and why `key` is
-- corrupt: a counter is a string of decimal digits, as INCR reads them.
local function fencing_counter(key)
    local kind, why = kind_of(key, 'string', 'the counter key', 'counter')
    if kind ~= 'string' then
        return kind and false, why
    end
    local value = redis.call('GET', key)
    if string.sub(value, 1, 1) == '-' then
        return nil, 'the counter is negative'
    end
    -- Digits only, as INCR reads them: no sign, space, point or leading zero.
    if value ~= '0' and not string.find(value, '^[1-9][0-9]*$') then
        return nil, 'the counter is not a decimal integer'
    end
    return value
end

-- Whether the digit string `value` (no leading zero) is below the digit string `limit`.
local function digits_below(value, limit)
    if #value ~= #limit then
        return #value < #limit
    end
    for i = 1, #value do
        local a, b = string.byte(value, i), string.byte(limit, i)
        if a ~= b then
            return a < b
        end
    end
    return false
end

-- Keeps the counter `key`, which holds `token` (a string of digits), until FENCING_KEEP_MS
-- after the later of `lasts_ms` from `time` (TIME's reply) and the moment the floor passes
-- the token; never shortens an expiry it has. PEXPIRE is never refused out of memory.
local function keep_fencing_counter(key, token, time, lasts_ms)
    local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    local passed = math.floor(tonumber(token) / 1000) + 1
    local keep = math.max(now + lasts_ms, passed) + FENCING_KEEP_MS - now
    local left = redis.call('PTTL', key)
    if left < keep then
        redis.call('PEXPIRE', key, string.format('%.0f', keep))
    end
end

-- Takes the next token into the counter `key`, whose value `value` fencing_counter read and
-- found below FENCING_MAX (false: absent), with the floor from `time` (TIME's reply), for a
-- lease of `lasts_ms`; returns the token as a string of digits.
local function take_fencing_token(key, value, time, lasts_ms)
    local floor = string.format('%.0f', time[1] * 1000000 + time[2])
    if value and not digits_below(value, floor) then
        redis.call('INCR', key)
    else
        redis.call('SET', key, floor)
    end
    local token = redis.call('GET', key)
    keep_fencing_counter(key, token, time, lasts_ms)
    return token
end
