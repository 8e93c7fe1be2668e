-- Hash-field leases: helpers shared by their scripts, which are appended to this file.
--
-- KEYS[1] is one hash. Each field is one named lease: its value the holder's owner token, its
-- expiry the lease's (HPEXPIREAT, server clock), so the server removes it when it runs out.
-- Every write sets the value and then its absolute expiry in the same script: a plain HSET
-- clears a field's expiry, and a field left without one would be held forever. The hash
-- itself must have no key-level expiry, which would end every lease in it at once; the
-- server deletes it with its last field.
--
-- Every script replies with a table whose first element names the outcome;
-- {'corrupt', 1, what} means KEYS[1] holds something else (or has a key-level expiry), and
-- the script changed nothing.

-- {'corrupt', ...} when KEYS[1] is neither absent nor a hash without a key-level expiry.
local function corrupt()
    local kind, why = kind_of(KEYS[1], 'hash', 'the lease hash key', 'hash')
    if kind ~= 'hash' then
        return kind == nil and {'corrupt', 1, why} or nil
    end
    if redis.call('PTTL', KEYS[1]) >= 0 then
        return {'corrupt', 1, 'the lease hash has a key-level expiry, which would end every lease in it at once'}
    end
    return nil
end

-- Gives the field ARGV[1] the absolute expiry `at` (ms since the epoch).
local function expire_at(at)
    redis.call('HPEXPIREAT', KEYS[1], digits(at), 'FIELDS', 1, ARGV[1])
end

-- Gives the field ARGV[1], just written, the absolute expiry `at`; when the server refuses
-- (a server without hash field expiry after a failover, or in a mixed-version cluster; an
-- ACL that denies HPEXPIREAT), removes the field again and returns the refusal to answer:
-- no field may stay without its expiry. nil once the expiry is set.
local function expire_new_field_at(at)
    local set = redis.pcall('HPEXPIREAT', KEYS[1], digits(at), 'FIELDS', 1, ARGV[1])
    if type(set) == 'table' and set.err then
        redis.call('HDEL', KEYS[1], ARGV[1])
        return set
    end
    return nil
end
