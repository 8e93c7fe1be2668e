-- Plan set read: every field of the stored plan set, its version among them.
--
-- KEYS[1]  the plan set
--
-- Returns {'none'}, {'set', field, value, ...}, or {'corrupt', 1, what}.
local kind, problem = plan_set()
if kind == nil then
    return problem
end
if kind == 'none' then
    return {'none'}
end
local fields = redis.call('HGETALL', KEYS[1])
table.insert(fields, 1, 'set')
return fields
