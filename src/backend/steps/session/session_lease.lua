-- Session lease: a live lease's time to live and the names attached to it. Changes nothing.
--
-- KEYS[1..4] the space's keys and the lease's key set
-- ARGV[1]  the lease id
--
-- Returns {'lease', ttl_ms, name, ...}, {'none'} (no live lease under the id), or
--         {'corrupt', i, what}.
local refused = corrupt()
if refused then
    return refused
end
local now = now_ms()
local at = lease_expiry(ARGV[1], now)
if not at then
    return {'none'}
end
local reply = {'lease', at - now}
for _, name in ipairs(own_names(ARGV[1])) do
    reply[#reply + 1] = name
end
return reply
