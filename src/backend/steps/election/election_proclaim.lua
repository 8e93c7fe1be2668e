-- Election proclaim: the leader of term ARGV[2] gives the election a new value, while it
-- leads.
--
-- KEYS[1..4] as election.lua says
-- ARGV[1]  the leader (its lease id and its campaign's own 32 characters)
-- ARGV[2]  its term
-- ARGV[3]  the new value
--
-- Returns {'proclaimed'}, {'not_leader'} (nothing changed), or {'corrupt', i, what}.
local now, _, refused = first_checks()
if refused then
    return refused
end
local leader = current(now, nil)
if not leader or leader[1] ~= ARGV[1] or leader[2] ~= ARGV[2] then
    return {'not_leader'}
end
redis.call('HSET', KEYS[4], 'value', ARGV[3])
-- Only a candidate's entry that is there: no step creates one for a leader that left.
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
    redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
end
return {'proclaimed'}
