-- Read-write lease release: removes the owner token's lease, read or write, and nothing
-- else.
--
-- KEYS[1]  the lease set
-- ARGV[1]  the lease's owner token
--
-- Returns {'released'}, {'no_lease'} (expired, or released before), or
--         {'corrupt', 1, what} (nothing changed).
local refused = corrupt()
if refused then
    return refused
end
local now = now_ms()
prune(now)
local before = members
remove('w:' .. ARGV[1], 'r:' .. ARGV[1])
settle()
if members < before then
    return {'released'}
end
return {'no_lease'}
