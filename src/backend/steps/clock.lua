-- The server's clock, and the numbers a script writes, for every script that reads the
-- time: written once, and put before a primitive's own helpers by `script!`.

-- Whole numbers as digits: Redis may print a Lua number argument in exponent form.
local function digits(n)
    return string.format('%.0f', n)
end

-- The server's clock in milliseconds since the epoch, and the TIME reply it was read from.
local function now_ms()
    local time = redis.call('TIME')
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000), time
end

-- Whether a step's deadline (milliseconds since the epoch, as ARGV carries it; '0': none) is
-- past at `now`: a command delayed past its client's cleanup then changes nothing.
local function past(deadline, now)
    return deadline ~= '0' and now > tonumber(deadline)
end

