-- Election campaign: enters the candidate (once: a campaign delivered twice keeps its
-- arrival) with its value, and answers who leads, promoting the first live candidate when
-- nobody does; sweeps the next candidates for dead ones (election.lua says how).
--
-- KEYS[1..5] as election.lua says
-- ARGV[1]  the candidate (its lease id and the campaign's own 32 characters)
-- ARGV[2]  its value
-- ARGV[3]  the server time (ms since the epoch) after which this step changes nothing; 0: none
--
-- Returns {'leader', term, value, ttl_ms}  the candidate leads (its lease's time left)
--         {'other', term, value, ttl_ms}   another leads, for at most ttl_ms more
--         {'no_lease'}  the candidate's lease is not live: nothing changed
--         {'late'}      the step arrived after ARGV[3]: nothing changed
--         {'corrupt', i, what}
local now, time, refused = first_checks(ARGV[3])
if refused then
    return refused
end
if not live(ARGV[1], now) then
    return {'no_lease'}
end
-- A counter that is not one is refused before anything is written.
local counter, problem = fencing_counter(KEYS[5])
if counter == nil then
    return {'corrupt', 5, problem}
end
-- Out of memory, a new candidate is refused; one already entered may still be promoted.
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
    pass_out_of_memory()
else
    refuse_when_out_of_memory(KEYS[2])
    redis.call('ZADD', KEYS[2], now, ARGV[1])
end
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 0 then
    redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
end
local leader, dead, problem = resolve(now, time, nil)
if problem then
    return problem
end
sweep(now, dead)
remove(dead)
return leader_reply(leader, ARGV[1], now)
