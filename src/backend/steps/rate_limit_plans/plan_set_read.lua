-- Plan set read: every field of the stored plan set, its version among them.
--
-- KEYS[1]  the plan set
--
-- Returns {'none'}, {'set', field, value, ...}, or {'corrupt', 1, what}.
local nothing = nothing_to_read()
if nothing then
    return nothing
end
local fields = redis.call('HGETALL', KEYS[1])
table.insert(fields, 1, 'set')
return fields
