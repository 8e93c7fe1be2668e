-- Latch set: starts a generation, if no latch exists or replacing the one that does.
--
-- KEYS[1]  the latch
-- KEYS[2]  its completions
-- ARGV[1]  the new generation's id
-- ARGV[2]  its count, 0 ..= 2^53 - 1 (0: complete at once, and recorded so)
-- ARGV[3]  its expiry in ms, or 0 for none
-- ARGV[4]  '1' to replace a latch that exists, '0' to leave it
-- ARGV[5]  how long completions are kept, in ms
-- ARGV[6]  how many generations' completions are kept at most
--
-- Returns {'set'}, {'exists'} (a latch exists and ARGV[4] is '0': nothing changed), or
-- {'corrupt', i, what}. Out of memory (OOM under noeviction), a generation is not started:
-- the server refuses the script before it changed anything.
local refused, gen = checked_state()
if refused then
    return refused
end
if gen and ARGV[4] ~= '1' then
    return {'exists'}
end
-- The first write is one the server refuses when out of memory: a removal first would let
-- every later write through.
redis.call('HSET', KEYS[1], 'gen', ARGV[1], 'count', ARGV[2])
if redis.call('HLEN', KEYS[1]) > 2 then
    -- The replaced generation's count-down records go with it, field by field: a key deleted
    -- and written again in one script fails half-way while its Cluster slot moves.
    local fields = redis.call('HKEYS', KEYS[1])
    for i = 1, #fields, 1000 do
        local batch = {}
        for j = i, math.min(i + 999, #fields) do
            if fields[j] ~= 'gen' and fields[j] ~= 'count' then
                batch[#batch + 1] = fields[j]
            end
        end
        if #batch > 0 then
            redis.call('HDEL', KEYS[1], unpack(batch))
        end
    end
end
if ARGV[3] ~= '0' then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
    redis.call('PERSIST', KEYS[1])
end
if ARGV[2] == '0' then
    record_completion(ARGV[1], nil, tonumber(ARGV[5]), tonumber(ARGV[6]))
end
return {'set'}
