-- Semaphore renew: gives a held permit a new expiry in every set of KEYS (see semaphore.lua
-- for the sets), counted from now on the server clock. Expired permits are pruned first; a
-- permit missing from any set is lost and is removed from all of them.
--
-- KEYS[1..n]  the permit's sets
-- ARGV[1]     its owner token
-- ARGV[2]     the new expiry in milliseconds (0: none; at most 2^40)
--
-- Returns {'renewed'}, {'lost'} when the permit was lost, or {'corrupt', i, what} when
-- KEYS[i] is not a semaphore set (nothing changed).
local member, now, refused = permit_step()
if refused then
    return refused
end
local expiry = tonumber(ARGV[2])
local n = #KEYS
local held = true
for i = 1, n do
    prune(KEYS[i], now)
    if not redis.call('ZSCORE', KEYS[i], member) then
        held = false
    end
end

if not held then
    for i = 1, n do
        redis.call('ZREM', KEYS[i], member)
        settle(KEYS[i])
    end
    return {'lost'}
end

local score = expiry_score(now, expiry)
for i = 1, n do
    redis.call('ZADD', KEYS[i], 'XX', score, member)
    settle(KEYS[i])
end
return {'renewed'}
