-- Session verify: whether the lease is live. Changes nothing.
--
-- KEYS[1]  the leases
-- ARGV[1]  the lease id
--
-- Returns {'held'}, {'none'}, or {'corrupt', 1, what}.
local refused = corrupt()
if refused then
    return refused
end
if lease_expiry(ARGV[1], now_ms()) then
    return {'held'}
end
return {'none'}
