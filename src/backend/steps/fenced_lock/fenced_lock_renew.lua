-- Fenced lock renew: gives the lease a new expiry, counted from now on the server clock, if
-- it is still held under the owner token. The fencing token does not change.
--
-- KEYS[1]  the lease key
-- ARGV[1]  the lease's owner token
-- ARGV[2]  the new lease in milliseconds (1 ..= 2^40)
--
-- Returns {'renewed'}, {'not_owner'} (no lease, or another owner's: left alone), or
--         {'corrupt', 1, what} when the key is not a lease (nothing changed).
local owner, why = lease_owner(KEYS[1])
if owner == nil then
    return corrupt_lease(why)
end
if owner ~= ARGV[1] then
    return {'not_owner'}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {'renewed'}
