-- Fenced lock acquire: if no lease exists, take the next fencing token from the counter and
-- create the lease; otherwise change nothing. The counter is validated before any write;
-- the next token is taken as fencing_counter.lua says, never below the server's clock.
--
-- KEYS[1]  the lease key (string: owner token, PX expiry)
-- KEYS[2]  the counter key (string of decimal digits, expiring as fencing_counter.lua says),
--          in the lease key's slot
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

local now, time = now_ms()
if past(ARGV[3], now) then
    return {'late'}
end

local owner, why = lease_owner(KEYS[1])
if owner == nil then
    return corrupt_lease(why)
end
if owner == ARGV[1] then
    local token, problem = fencing_counter(KEYS[2])
    if token == nil then
        return {'corrupt', 2, problem}
    end
    if not token or token == '0' then
        return {'corrupt', 2, 'the counter of a held lease is gone'}
    end
    -- A write that changes nothing (the expiry it has, within a millisecond, never earlier),
    -- so that a WAIT sent after this delivery, on whatever connection, waits for the lease
    -- to reach the replicas: the first delivery's writes were another connection's, or
    -- unconfirmed. Not refused out of memory, as EXPIRE never is.
    local left = redis.call('PTTL', KEYS[1])
    if left > 0 then
        redis.call('PEXPIRE', KEYS[1], left + 1)
    end
    return {'acquired', token}
end
if owner then
    return {'held', redis.call('PTTL', KEYS[1])}
end

local value, problem = fencing_counter(KEYS[2])
if value == nil then
    return {'corrupt', 2, problem}
end
if value and not digits_below(value, FENCING_MAX) then
    return {'corrupt', 2, 'the counter has reached the largest fencing token'}
end

local token = take_fencing_token(KEYS[2], value, time, tonumber(ARGV[2]))
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {'acquired', token}
