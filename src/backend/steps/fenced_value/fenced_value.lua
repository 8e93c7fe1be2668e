-- Fenced value: a value written only by a holder whose fencing token is at least the
-- highest the value has seen, helpers shared by its scripts, which are appended to this
-- file (after fencing_counter.lua, whose digits_below they use).
--
-- KEYS[1] is one hash without expiry: field 'token', the highest token a write carried (a
-- string of decimal digits, no leading zero), and field 'value', what that write (or a
-- later one with the same token) stored.

-- The value's token (false when there is no value), or nil and why KEYS[1] is corrupt: a
-- fenced value is a hash without expiry (one that expires forgets its highest token, and
-- would let a stale write in), with a token from 1 to FENCING_MAX and a value.
local function fenced_token()
    local kind, why = kind_of(KEYS[1], 'hash', 'the fenced value key', 'fenced value')
    if kind ~= 'hash' then
        return kind and false, why
    end
    if redis.call('PTTL', KEYS[1]) ~= -1 then
        return nil, 'the fenced value has an expiry, so its highest token could be lost'
    end
    local token = redis.call('HGET', KEYS[1], 'token')
    if not token or not string.find(token, '^[1-9][0-9]*$') or digits_below(FENCING_MAX, token) then
        return nil, 'the fenced value has no valid token'
    end
    if redis.call('HEXISTS', KEYS[1], 'value') == 0 then
        return nil, 'the fenced value has a token but no value'
    end
    return token
end
