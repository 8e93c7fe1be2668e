-- GCRA: one theoretical arrival time (TAT) per key, in whole microseconds since the epoch on
-- the server's clock. A request of n permits conforms when max(TAT, now) + n*T - b*T <= now,
-- and then moves the TAT to max(TAT, now) + n*T. A rejected request and a probe (0 permits)
-- create nothing and change nothing but a lost expiry, or a TAT further ahead than any grant
-- sets it (b*T), which a clock stepped back left: it is brought back to now + b*T.
--
-- Lua numbers are doubles: the caller keeps b*T <= 2^50 us, so (with now ~ 2^51 us) every
-- value below is an integer under 2^53, exact, and every floor/ceil of a quotient is exact.
--
-- KEYS[1]  the TAT (string integer, us since the epoch), expiring when the TAT passes
-- ARGV[1]  permits asked for (0 ..= burst + 1)
-- ARGV[2]  emission interval T in us (>= 1)
-- ARGV[3]  burst b (>= 1)
--
-- Returns {'granted' or 'denied', remaining permits, us until the TAT passes, us until the
-- same request conforms (-1: granted, or never)}, or {'corrupt', 1, what} when the key holds
-- anything but an integer timestamp (nothing changed). A grant is a single integer instead:
-- remaining * 2^32 + us with fewer than 2^21 permits remaining and the TAT less than 2^32 us
-- ahead; else -(remaining * (b*T + 1) + us) - 1 (a grant's TAT is never more than b*T
-- ahead) when that is below 2^53 in magnitude. Redis spends about as much on a reply table
-- as on a call.
-- Globals are read once into locals, and arguments read as numbers with `+ 0`, for the same
-- reason (each global lookup and each library call costs hundreds of instructions).
local call, argv, tonumber = redis.call, ARGV, tonumber
local permits = argv[1] + 0
local interval = argv[2] + 0
local burst = argv[3] + 0
local tolerance = burst * interval

local time = call('TIME')
local now = time[1] * 1000000 + time[2]

local ahead = 0
local stepped = false
local key = KEYS[1]
-- pcall: another type under the key answers WRONGTYPE as a table instead of aborting.
local raw = redis.pcall('GET', key)
if raw then
    local tat = type(raw) == 'string' and tonumber(raw)
    if not tat or tat % 1 ~= 0 or tat < 0 or tat >= 9007199254740992 then
        return {'corrupt', 1, 'the GCRA key does not hold an integer timestamp'}
    end
    if tat > now then
        ahead = tat - now
        if ahead > tolerance then
            -- No grant sets a TAT more than the tolerance ahead: a clock that has since
            -- stepped back set this one. It counts as a full burst (and is written so),
            -- rather than refusing the key for the length of the step.
            ahead = tolerance
            stepped = true
        end
    end
end

local new_ahead = ahead + permits * interval
local granted = new_ahead <= tolerance
if granted and permits > 0 then
    -- '%d': exact below 2^53, and cheaper for Redis than a number argument (printed '%.17g').
    local format = string.format
    call('SET', key, format('%d', now + new_ahead),
        'PX', format('%d', math.ceil(new_ahead / 1000)))
elseif stepped then
    local format = string.format
    call('SET', key, format('%d', now + ahead), 'PX', format('%d', math.ceil(ahead / 1000)))
elseif raw and call('PTTL', key) == -1 then
    -- A TAT without expiry would outlive its use: let it go when it passes.
    call('PEXPIRE', key, math.max(1, math.ceil(ahead / 1000)))
end

if granted then
    local remaining = math.floor((tolerance - new_ahead) / interval)
    if remaining < 2097152 and new_ahead < 4294967296 then
        return remaining * 4294967296 + new_ahead
    end
    local packed = remaining * (tolerance + 1) + new_ahead
    if packed < 9007199254740992 then
        return -packed - 1
    end
    return {'granted', remaining, new_ahead, -1}
end
local retry = -1
if permits <= burst then
    retry = new_ahead - tolerance
end
return {'denied', math.floor(math.max(tolerance - ahead, 0) / interval), ahead, retry}
