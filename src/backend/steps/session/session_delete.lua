-- Session delete: detaches and removes the name, if it is attached to the lease.
--
-- KEYS[1..4] the space's keys and the lease's key set
-- ARGV[1]  the lease id
-- ARGV[2]  the name
-- ARGV[3]  the server time (ms since the epoch) after which this delete changes nothing; 0:
--          none (see session_put.lua)
--
-- Returns {'deleted'} (it was live), {'none'} (not this lease's, or not live: a dead one
-- of this lease's is removed all the same), {'late'} (past ARGV[3]: nothing removed), or
-- {'corrupt', i, what}.
local now, _, refused = first_checks(ARGV[3])
if refused then
    return refused
end
local entry = redis.call('HGET', KEYS[3], ARGV[2])
if not entry or split(entry) ~= ARGV[1] then
    return {'none'}
end
local at = redis.call('ZSCORE', KEYS[2], ARGV[2])
-- Each key's last access is the write that may empty it.
redis.call('HDEL', KEYS[3], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('SREM', KEYS[4], ARGV[2])
if at and tonumber(at) > now then
    return {'deleted'}
end
return {'none'}
