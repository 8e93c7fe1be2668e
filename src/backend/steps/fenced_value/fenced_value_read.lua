-- Fenced value read: the value and the highest token, as one answer. Reads only.
--
-- KEYS[1]  the fenced value
--
-- Returns {'value', token, value}, {'none'}, or {'corrupt', 1, what}.
local token, problem = fenced_token()
if token == nil then
    return {'corrupt', 1, problem}
end
if not token then
    return {'none'}
end
return {'value', token, redis.call('HGET', KEYS[1], 'value') or ''}
