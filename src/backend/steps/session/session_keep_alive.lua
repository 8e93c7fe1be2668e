-- Session keep-alive: the lease and every key attached to it get the same new absolute
-- expiry, if the lease is live. Names moved to another lease (or gone) leave its key set.
--
-- KEYS[1..4] the space's keys and the lease's key set
-- ARGV[1]  the lease id
-- ARGV[2]  the lease in milliseconds (1 ..= 2^40)
--
-- Returns {'renewed'}, {'gone'} (no live lease under the id: nothing renewed), or
--         {'corrupt', i, what}: also when a name this lease holds has lost its expiry (its
--         entry is the lease's, its score gone), which no step leaves behind and eviction
--         of the expiries key does: the holder is told rather than renewed while another
--         session could claim the name.
local now, _, refused = first_checks()
if refused then
    return refused
end
if not lease_expiry(ARGV[1], now) then
    return {'gone'}
end
-- The lease's own names, read before any write: one that lost its expiry is refused whole.
local own, stale = own_names(ARGV[1])
for _, name in ipairs(own) do
    if not redis.call('ZSCORE', KEYS[2], name) then
        return {'corrupt', 2, LOST_EXPIRY}
    end
end
-- A first write the server never refuses out of memory (a removal; the lease is live, so
-- the set stays): the writes after it go through, and a keep-alive, which grows nothing,
-- never costs its holder the lease.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local at = digits(now + tonumber(ARGV[2]))
redis.call('ZADD', KEYS[1], 'XX', at, ARGV[1])
for _, name in ipairs(own) do
    redis.call('ZADD', KEYS[2], 'XX', at, name)
end
redis.call('PEXPIREAT', KEYS[4], at)
if #stale > 0 then
    redis.call('SREM', KEYS[4], unpack(stale))
end
expire_space(now)
prune(now)
return {'renewed'}
