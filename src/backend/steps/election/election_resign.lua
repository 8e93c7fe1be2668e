-- Election resign: the candidate leaves the election; if it led, the first live candidate
-- leads at once, with the next term (or nobody). Repeat-safe.
--
-- KEYS[1..5] as election.lua says
-- ARGV[1]  the candidate (its lease id and its campaign's own 32 characters)
--
-- Returns {'resigned'} (it led: the leader key names it and its lease lives), {'left'} (it
--         waited, was not a candidate, or its lease is gone), or {'corrupt', i, what}.
local now, time, refused = first_checks()
if refused then
    return refused
end
local led = redis.call('HGET', KEYS[4], 'id') == ARGV[1] and live(ARGV[1], now) ~= nil
-- A resign grows nothing: it passes when the server is out of memory.
pass_out_of_memory()
local leader, dead, problem = resolve(now, time, ARGV[1])
if problem then
    return problem
end
dead[#dead + 1] = ARGV[1]
remove(dead)
if led then
    return {'resigned'}
end
return {'left'}
