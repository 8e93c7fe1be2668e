-- Session get: the value of a live attached key. Changes nothing.
--
-- KEYS[1..3] the space's keys
-- ARGV[1]  the name
--
-- Returns {'value', value}, {'none'}, or {'corrupt', i, what}.
local refused = corrupt()
if refused then
    return refused
end
local at = redis.call('ZSCORE', KEYS[2], ARGV[1])
local now = now_ms()
if not at then
    -- An entry without an expiry (see session_keep_alive.lua): a live holder's name is not
    -- read as absent; a gone holder's is.
    local orphan = redis.call('HGET', KEYS[3], ARGV[1])
    if orphan and lease_expiry(split(orphan), now) then
        return {'corrupt', 2, LOST_EXPIRY}
    end
    return {'none'}
end
if tonumber(at) <= now then
    return {'none'}
end
local entry = redis.call('HGET', KEYS[3], ARGV[1])
if not entry then
    return {'corrupt', 3, 'a live attached key has no entry'}
end
local _, value = split(entry)
return {'value', value}
