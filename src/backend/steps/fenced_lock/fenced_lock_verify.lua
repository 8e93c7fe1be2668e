-- Fenced lock verify: whether the lease is held under the owner token now. Reads only.
--
-- KEYS[1]  the lease key
-- ARGV[1]  the lease's owner token
--
-- Returns {'held'}, {'not_held'}, or {'corrupt', 1, what} when the key is not a lease.
-- Reads only: it goes as EVALSHA_RO where the server has it.
local owner, why = lease_owner(KEYS[1])
if owner == nil then
    return corrupt_lease(why)
end
if owner == ARGV[1] then
    return {'held'}
end
return {'not_held'}
