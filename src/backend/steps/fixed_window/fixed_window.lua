-- Fixed window: one counter per window; the first counted request fixes the window's end.
-- A rejected request consumes nothing, and a probe (0 permits) creates nothing. A step of one
-- permit goes as plain commands where the server takes them (see redis.rs): this script
-- counts the others, and probes.
--
-- KEYS[1]  the window's counter (string integer with an expiry)
-- ARGV[1]  permits asked for (>= 0, in decimal)
-- ARGV[2]  permits per window (>= 1)
-- ARGV[3]  window length in milliseconds (>= 1)
--
-- Returns {'granted' or 'denied', count after the step, ms until the window ends (-2: no
-- window)}, or {'corrupt', 1, what} when a probe finds a counter that is not an integer.
-- A grant whose count is below 2^21 and whose window ends within 2^32 ms is returned as the
-- single integer count * 2^32 + ms instead (exact: below 2^53, which a Lua number holds).
-- A counting step on such a counter fails with INCRBY's error (nothing changed); the caller
-- then asks a probe, which names what is wrong.
--
-- The grant path is the hot one, so it counts first and asks questions after: INCRBY, then
-- PTTL (and the window's first PEXPIRE). A step that overshoots takes its permits back before
-- it returns, so no other client ever sees the overshoot. In Redis's Lua every operation
-- costs hundreds to thousands of instructions: a reply table about as much as a call, a
-- string read as a number or a global looked up hundreds. Hence the packed integer, the
-- globals read once into locals, arguments handed to commands as the strings they arrived
-- as, and INCRBY's own error instead of a pcall and a type check.
local call, key, argv = redis.call, KEYS[1], ARGV
local permits = argv[1]
if permits == '0' then
    -- A probe: it reads, and writes only to give a counter its lost expiry.
    -- pcall: a key of another type answers WRONGTYPE as a table instead of aborting.
    local raw = redis.pcall('GET', key)
    if not raw then
        return {'granted', 0, -2}
    end
    -- A counter as INCRBY reads one, and never negative (no step writes one): plain decimal
    -- digits, no sign, no leading zero, no space, at most i64::MAX. So a probe and a counting
    -- step agree on what is corrupt.
    local digits = type(raw) == 'string' and (raw == '0' or string.match(raw, '^[1-9]%d*$'))
    if digits and digits ~= true and #digits >= 19
        and (#digits > 19 or digits > '9223372036854775807') then
        digits = nil
    end
    if not digits then
        return {'corrupt', 1, 'the fixed-window counter is not a non-negative integer'}
    end
    local count = tonumber(raw)
    local ttl = redis.call('PTTL', key)
    if ttl == -1 then
        -- A counter without expiry would never reset: give it the window it lost.
        redis.call('PEXPIRE', key, ARGV[3])
        ttl = tonumber(ARGV[3])
    end
    return {'granted', count, ttl}
end
-- INCRBY refuses a non-integer, wrongly typed or overflowing value without changing it: the
-- error ends the script, and the caller asks a probe whether the counter is corrupt.
local count = call('INCRBY', key, permits)
if count > argv[2] + 0 then
    local before = call('DECRBY', key, permits)
    local ttl = call('PTTL', key)
    if ttl == -1 then
        if before == 0 then
            -- This step created the counter (or found a bare 0): leave nothing behind.
            call('DEL', key)
            ttl = -2
        else
            call('PEXPIRE', key, argv[3])
            ttl = argv[3] + 0
        end
    end
    return {'denied', before, ttl}
end
local ttl = call('PTTL', key)
if ttl == -1 then
    -- The window's first request (or a counter that lost its expiry): the window starts now.
    call('PEXPIRE', key, argv[3])
    ttl = argv[3] + 0
end
if count < 2097152 and ttl < 4294967296 then
    return count * 4294967296 + ttl
end
return {'granted', count, ttl}
