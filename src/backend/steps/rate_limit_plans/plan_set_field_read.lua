-- Plan set field read: one field of a stored set (a customer's override).
--
-- KEYS[1]  the set
-- ARGV[1]  the field
--
-- Returns {'none'} (no set, or no such field), {'field', value}, or {'corrupt', 1, what}.
local nothing = nothing_to_read()
if nothing then
    return nothing
end
local value = redis.call('HGET', KEYS[1], ARGV[1])
if not value then
    return {'none'}
end
return {'field', value}
