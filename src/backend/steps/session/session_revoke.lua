-- Session revoke: removes the lease and every key still attached to it, live or not.
-- Repeat-safe: a revoked lease is simply absent, and a late put or keep-alive finds nothing.
--
-- KEYS[1..4] the space's keys and the lease's key set
-- ARGV[1]  the lease id
--
-- Returns {'released'} (the lease was live), {'none'} (it was not; what it left is
-- removed all the same), or {'corrupt', i, what}.
local now, _, refused = first_checks()
if refused then
    return refused
end
local live = lease_expiry(ARGV[1], now)
local own = own_names(ARGV[1])
-- Each key's last access is the write that may empty it.
if #own > 0 then
    redis.call('HDEL', KEYS[3], unpack(own))
    redis.call('ZREM', KEYS[2], unpack(own))
end
redis.call('DEL', KEYS[4])
redis.call('ZREM', KEYS[1], ARGV[1])
if live then
    return {'released'}
end
return {'none'}
