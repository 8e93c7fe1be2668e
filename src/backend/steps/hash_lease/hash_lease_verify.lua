-- Hash-field lease verify: whether the owner token holds the field now. Reads only: it goes
-- as EVALSHA_RO where the server has it.
--
-- KEYS[1]  the lease hash
-- ARGV[1]  the field
-- ARGV[2]  the lease's owner token
--
-- Returns {'held'}, {'not_held'}, or {'corrupt', 1, what}.
local refused = corrupt()
if refused then
    return refused
end
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
    return {'held'}
end
return {'not_held'}
