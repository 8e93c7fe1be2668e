-- Read-write lease verify: whether the owner token holds a live lease now, and which.
-- Reads only: it goes as EVALSHA_RO where the server has it, and prunes nothing.
--
-- KEYS[1]  the lease set
-- ARGV[1]  the lease's owner token
--
-- Returns {'held', 'r' | 'w'}, {'not_held'}, or {'corrupt', 1, what}.
local refused = corrupt()
if refused then
    return refused
end
local member, kind = holder(ARGV[1], now_ms())
if not member then
    return {'not_held'}
end
return {'held', kind}
