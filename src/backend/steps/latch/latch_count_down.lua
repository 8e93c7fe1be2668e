-- Latch count-down: one count-down of a generation, never below zero, counted once however
-- often it is delivered.
--
-- KEYS[1]  the latch
-- KEYS[2]  its completions
-- ARGV[1]  the generation counted down
-- ARGV[2]  the count-down's id
-- ARGV[3]  how long completions are kept, in ms
-- ARGV[4]  how many generations' completions are kept at most
--
-- Returns {'counted', count left} (also when this count-down counted already: the count it
-- left then, and nothing changed), {'completed'} (its count is zero already, or the
-- generation completed and the latch no longer holds it, by another count-down: nothing
-- changed), {'stale'} (no latch, or another generation, which did not complete: nothing
-- changed), or {'corrupt', i, what}. The expiry is left as it is.
--
-- Out of memory (OOM under noeviction), a count-down still counts: it grows the latch by its
-- own record only, and refusing it would leave the generation one short for good.
local refused, gen, count = checked_state()
if refused then
    return refused
end
local record = 'd:' .. ARGV[2]
if not gen or gen ~= ARGV[1] then
    if redis.call('ZSCORE', KEYS[2], ARGV[1] .. '|' .. ARGV[2]) then
        -- This count-down completed it, and its answer was lost.
        return {'counted', 0}
    end
    if completed(ARGV[1]) then
        return {'completed'}
    end
    return {'stale'}
end
local counted = redis.call('HGET', KEYS[1], record)
if counted then
    return {'counted', tonumber(counted)}
end
if count == 0 then
    return {'completed'}
end
-- A write the server lets through when it is out of memory (removing what is not there),
-- before the writes it would refuse: a first write lets the script's later ones through.
redis.call('HDEL', KEYS[1], record)
local left = redis.call('HINCRBY', KEYS[1], 'count', -1)
redis.call('HSET', KEYS[1], record, left)
if left == 0 then
    record_completion(gen, ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
end
return {'counted', left}
