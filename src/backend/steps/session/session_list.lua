-- Session list: the live attached keys of the space, the soonest to expire first, at most
-- ARGV[1] of them. Changes nothing.
--
-- KEYS[1..3] the space's keys
-- ARGV[1]  the most names to return
--
-- Returns {'entries', name, value, name, value, ...}, or {'corrupt', i, what}.
local refused = corrupt()
if refused then
    return refused
end
local names = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. digits(now_ms()), '+inf', 'LIMIT', 0, tonumber(ARGV[1]))
local reply = {'entries'}
for _, name in ipairs(names) do
    local entry = redis.call('HGET', KEYS[3], name)
    if not entry then
        return {'corrupt', 3, 'a live attached key has no entry'}
    end
    local _, value = split(entry)
    reply[#reply + 1] = name
    reply[#reply + 1] = value
end
return reply
