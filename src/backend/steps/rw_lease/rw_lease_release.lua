-- Read-write lease release: removes the owner token's lease, read or write, and nothing
-- else; given a waiter id instead, removes its waiting record (a wait that ended without a
-- lease), so that it holds nobody back until it expires.
--
-- KEYS[1]  the lease set
-- ARGV[1]  the lease's owner token, or a waiter id
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
remove('w:' .. ARGV[1], 'r:' .. ARGV[1], 'q:' .. ARGV[1], 'a:' .. ARGV[1], 'p:' .. ARGV[1])
settle(now)
if members < before then
    return {'released'}
end
return {'no_lease'}
