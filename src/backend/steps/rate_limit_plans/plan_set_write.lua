-- Plan set write: a new version of the stored plan set.
--
-- KEYS[1]  the plan set
-- ARGV[1]  '1' to seed: write only where there is no plan set (then every field is given)
-- ARGV[2..] triples: 'set' or 'del', a field, its value ('' for 'del')
--
-- Returns {'written', version}, {'exists', version} (a seed that found a plan set: nothing
-- written), {'gone'} (a change to a plan set there is not: nothing written, since a change
-- alone would make a set of one field; the caller seeds it whole), or {'corrupt', 1, what}.
-- Out of memory (OOM under noeviction), nothing is written: the version's count is the
-- first write.
local kind, version = plan_set()
if kind == nil then
    return version
end
if ARGV[1] == '1' and kind == 'hash' then
    return {'exists', version}
end
if ARGV[1] ~= '1' and kind == 'none' then
    return {'gone'}
end
version = redis.call('HINCRBY', KEYS[1], 'version', 1)
for i = 2, #ARGV, 3 do
    if ARGV[i] == 'set' then
        redis.call('HSET', KEYS[1], ARGV[i + 1], ARGV[i + 2])
    else
        redis.call('HDEL', KEYS[1], ARGV[i + 1])
    end
end
return {'written', version}
