-- Hash-field lease renew: gives the field a new absolute expiry, counted from now on the
-- server clock, if the owner token holds it. No other field, and no other holder's lease of
-- this field, is touched.
--
-- KEYS[1]  the lease hash
-- ARGV[1]  the field
-- ARGV[2]  the lease's owner token
-- ARGV[3]  the new lease in milliseconds (1 ..= 2^40)
--
-- Returns {'renewed'}, {'not_owner'} (gone, or another holder's), or {'corrupt', 1, what}.
local refused = corrupt()
if refused then
    return refused
end
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
    return {'not_owner'}
end
expire_at(now_ms() + tonumber(ARGV[3]))
return {'renewed'}
