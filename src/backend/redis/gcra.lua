-- GCRA: one theoretical arrival time (TAT) per key, in whole microseconds since the epoch on
-- the server's clock. A request of n permits conforms when max(TAT, now) + n*T - b*T <= now,
-- and then moves the TAT to max(TAT, now) + n*T. A rejected request and a probe (0 permits)
-- create nothing and change nothing but a lost expiry.
--
-- Lua numbers are doubles: the caller keeps b*T <= 2^50 us, so (with now ~ 2^51 us) every
-- value below is an integer under 2^53, exact, and every floor/ceil of a quotient is exact.
--
-- KEYS[1]  the TAT (string integer, us since the epoch), expiring when the TAT passes
-- ARGV[1]  permits asked for (0 ..= burst + 1)
-- ARGV[2]  emission interval T in us (>= 1)
-- ARGV[3]  burst b (>= 1)
--
-- Returns {granted (1/0), remaining permits, us until the TAT passes, us until the same
-- request conforms (-1: granted, or never)}, or {-1, 0, 0, 0} when the key holds anything
-- but an integer timestamp (corrupt state; nothing changed).
local permits = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local tolerance = burst * interval

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

local ahead = 0
-- pcall: another type under the key answers WRONGTYPE as a table instead of aborting.
local raw = redis.pcall('GET', KEYS[1])
if raw then
    local tat = type(raw) == 'string' and tonumber(raw)
    if not tat or tat ~= math.floor(tat) or tat < 0 or tat >= 9007199254740992 then
        return {-1, 0, 0, 0}
    end
    if tat > now then
        ahead = tat - now
    end
end

local new_ahead = ahead + permits * interval
local granted = new_ahead <= tolerance
if granted and permits > 0 then
    -- Redis passes a number argument with 17 significant digits: exact below 2^53.
    redis.call('SET', KEYS[1], now + new_ahead, 'PX', math.ceil(new_ahead / 1000))
elseif raw and redis.call('PTTL', KEYS[1]) == -1 then
    -- A TAT without expiry would outlive its use: let it go when it passes.
    redis.call('PEXPIRE', KEYS[1], math.max(1, math.ceil(ahead / 1000)))
end

if granted then
    return {1, math.floor((tolerance - new_ahead) / interval), new_ahead, -1}
end
local retry = -1
if permits <= burst then
    retry = new_ahead - tolerance
end
return {0, math.floor(math.max(tolerance - ahead, 0) / interval), ahead, retry}
