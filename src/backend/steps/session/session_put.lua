-- Session put: attaches the name to the lease with its value, the key's expiry the lease's;
-- a name attached to another lease moves to this one, unless ARGV[5] asks for a free name.
--
-- KEYS[1..4] the space's keys and the lease's key set
-- ARGV[1]  the lease id
-- ARGV[2]  the name
-- ARGV[3]  the value
-- ARGV[4]  the most names a lease may hold
-- ARGV[5]  '1': only if no other live lease holds the name (a claim); '0': whatever holds it
-- ARGV[6]  the server time (ms since the epoch) after which this put changes nothing; 0:
--          none. A put delayed past its sender's answer must not land after a later step
--          of the lease (another put of the name, its delete) and undo it.
--
-- Returns {'put'}, {'taken'} (a claim of a name another live lease holds: nothing written),
--         {'no_lease'} (no live lease under the id: nothing written), {'full'}
--         (the lease holds ARGV[4] names and this is not one: nothing written), {'late'}
--         (past ARGV[6]: nothing written), or {'corrupt', i, what}.
local now, _, refused = first_checks(ARGV[6])
if refused then
    return refused
end
local at = lease_expiry(ARGV[1], now)
if not at then
    return {'no_lease'}
end
if ARGV[5] == '1' then
    local entry = redis.call('HGET', KEYS[3], ARGV[2])
    local expiry = redis.call('ZSCORE', KEYS[2], ARGV[2])
    if entry and split(entry) ~= ARGV[1] then
        -- An entry without an expiry is what eviction of the expiries key leaves: a name
        -- whose holder lives is not free; one whose holder is gone is.
        if not expiry then
            if lease_expiry(split(entry), now) then
                return {'corrupt', 2, LOST_EXPIRY}
            end
        elseif tonumber(expiry) > now then
            return {'taken'}
        end
    end
end
-- The bound counts this lease's own names; a name is one of them when its entry is this
-- lease's (the set may still list a name another lease took since, which is not).
local entry = redis.call('HGET', KEYS[3], ARGV[2])
local own_already = entry and split(entry) == ARGV[1]
if not own_already and redis.call('SCARD', KEYS[4]) >= tonumber(ARGV[4]) then
    if #own_names(ARGV[1]) >= tonumber(ARGV[4]) then
        return {'full'}
    end
end
-- On the leases, whose members are lease ids: no user name can be the guard's.
refuse_when_out_of_memory(KEYS[1])
at = digits(at)
redis.call('HSET', KEYS[3], ARGV[2], ARGV[1] .. ARGV[3])
redis.call('ZADD', KEYS[2], at, ARGV[2])
redis.call('SADD', KEYS[4], ARGV[2])
redis.call('PEXPIREAT', KEYS[4], at)
expire_space(now)
prune(now)
return {'put'}
