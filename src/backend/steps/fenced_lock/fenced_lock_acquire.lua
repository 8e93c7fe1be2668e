-- Fenced lock acquire: if no lease exists, take the next fencing token from the counter and
-- create the lease; otherwise change nothing. The counter is validated before any write.
--
-- The next token is the larger of the counter plus one and the server's clock in
-- microseconds (the floor): a counter that was lost (a restart without persistence, a
-- failover that lost the last writes, FLUSHALL, an eviction) starts again above every token
-- handed out before it, as long as this server's clock is not behind the one that handed out
-- the last token by more than the time that has passed since. The floor stays below 2^53,
-- exact as a Lua number, until the year 2255.
--
-- KEYS[1]  the lease key (string: owner token, PX expiry)
-- KEYS[2]  the counter key (string of decimal digits, no expiry), in the lease key's slot
-- ARGV[1]  owner token of the new lease
-- ARGV[2]  lease in milliseconds (1 ..= 2^40)
-- ARGV[3]  the server time (ms since the epoch) after which this step changes nothing; 0: none
--
-- Returns {'late'}             the step arrived after ARGV[3]: a command delayed past its
--                              client's cleanup must not take the lock; nothing changed
--         {'acquired', token}  token = the counter's new value as a decimal string (the
--                              floor, or the counter plus one when that is larger); also
--                              when the lease is ARGV[1]'s already (this acquisition
--                              delivered twice): token = the counter's value, which no
--                              acquisition can have moved while that lease stood; nothing
--                              changed
--         {'held', pttl}       pttl = the existing lease's PTTL in ms (-1: no expiry)
--         {'corrupt', i, what} KEYS[i] holds something else; nothing changed
--
-- The token is read back with GET, never taken from INCR's reply: a Lua number is a double,
-- which loses digits above 2^53. For the same reason the counter is compared with i64::MAX
-- as a string, by length and then digit by digit.
local I64_MAX = '9223372036854775807'

local time = redis.call('TIME')
if ARGV[3] ~= '0' and time[1] * 1000 + math.floor(time[2] / 1000) > ARGV[3] + 0 then
    return {'late'}
end

-- The counter's value as a digit string (false when absent), or nil and why KEYS[2] is
-- corrupt: a counter is a string of decimal digits, as INCR reads them, without expiry.
local function counter()
    local kind = redis.call('TYPE', KEYS[2])['ok']
    if kind == 'none' then
        return false
    end
    if kind ~= 'string' then
        return nil, 'the counter key holds a ' .. kind .. ', not a counter'
    end
    local value = redis.call('GET', KEYS[2])
    if string.sub(value, 1, 1) == '-' then
        return nil, 'the counter is negative'
    end
    -- Digits only, as INCR reads them: no sign, space, point or leading zero.
    if value ~= '0' and not string.find(value, '^[1-9][0-9]*$') then
        return nil, 'the counter is not a decimal integer'
    end
    if redis.call('PTTL', KEYS[2]) ~= -1 then
        return nil, 'the counter has an expiry, so its history could be lost'
    end
    return value
end

local owner, kind = lease_owner(KEYS[1])
if owner == nil then
    return corrupt_lease(kind)
end
if owner == ARGV[1] then
    local token, problem = counter()
    if token == nil then
        return {'corrupt', 2, problem}
    end
    if not token or token == '0' then
        return {'corrupt', 2, 'the counter of a held lease is gone'}
    end
    return {'acquired', token}
end
if owner then
    return {'held', redis.call('PTTL', KEYS[1])}
end

-- Whether the digit string `value` (no leading zero) is below the digit string `limit`.
local function below(value, limit)
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

local value, problem = counter()
if value == nil then
    return {'corrupt', 2, problem}
end
if value and not below(value, I64_MAX) then
    return {'corrupt', 2, 'the counter has reached the largest fencing token'}
end

-- The floor as a digit string: exact, below 2^53.
local floor = string.format('%.0f', time[1] * 1000000 + time[2])
if value and not below(value, floor) then
    redis.call('INCR', KEYS[2])
else
    redis.call('SET', KEYS[2], floor)
end
local token = redis.call('GET', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {'acquired', token}
