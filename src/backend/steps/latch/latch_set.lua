-- Latch set: starts a generation, if no latch exists or replacing the one that does.
--
-- KEYS[1]  the latch
-- ARGV[1]  the new generation's id
-- ARGV[2]  its count, 0 ..= 2^53 - 1 (0: complete at once)
-- ARGV[3]  its expiry in ms, or 0 for none
-- ARGV[4]  '1' to replace a latch that exists, '0' to leave it
--
-- Returns {'set'}, {'exists'} (a latch exists and ARGV[4] is '0': nothing changed), or
-- {'corrupt', 1, what}.
local gen = latch_state(KEYS[1])
if gen == nil then
    return corrupt()
end
if gen and ARGV[4] ~= '1' then
    return {'exists'}
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'gen', ARGV[1], 'count', ARGV[2])
if ARGV[3] ~= '0' then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {'set'}
