-- The fencing counter: helpers shared by the scripts that hand out fencing tokens (the
-- fenced lock's acquisition, a read-write lease's writer), appended to their files.
--
-- A counter is a string of decimal digits without expiry, the last token handed out. The
-- next token is the larger of the counter plus one and the server's clock in microseconds
-- since the epoch (the floor): a counter that was lost (a restart without persistence, a
-- failover that lost the last writes, FLUSHALL, an eviction) starts again above every token
-- handed out before it, as long as this server's clock is not behind the one that handed
-- out the last token by more than the time that has passed since. The floor stays below
-- 2^53, exact as a Lua number, until the year 2255. A token is read back with GET, never
-- taken from INCR's reply (a Lua number is a double, which loses digits above 2^53), and
-- compared with others as a string of digits.

local FENCING_MAX = '9223372036854775807'

-- The counter's value as a digit string (false when absent), or nil and why `key` is
-- corrupt: a counter is a string of decimal digits, as INCR reads them, without expiry.
local function fencing_counter(key)
    local kind = redis.call('TYPE', key)['ok']
    if kind == 'none' then
        return false
    end
    if kind ~= 'string' then
        return nil, 'the counter key holds a ' .. kind .. ', not a counter'
    end
    local value = redis.call('GET', key)
    if string.sub(value, 1, 1) == '-' then
        return nil, 'the counter is negative'
    end
    -- Digits only, as INCR reads them: no sign, space, point or leading zero.
    if value ~= '0' and not string.find(value, '^[1-9][0-9]*$') then
        return nil, 'the counter is not a decimal integer'
    end
    if redis.call('PTTL', key) ~= -1 then
        return nil, 'the counter has an expiry, so its history could be lost'
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

-- Takes the next token into the counter `key`, whose value `value` fencing_counter read and
-- found below FENCING_MAX (false: absent), with the floor from `time` (TIME's reply); returns
-- the token as a string of digits.
local function take_fencing_token(key, value, time)
    local floor = string.format('%.0f', time[1] * 1000000 + time[2])
    if value and not digits_below(value, floor) then
        redis.call('INCR', key)
    else
        redis.call('SET', key, floor)
    end
    return redis.call('GET', key)
end
