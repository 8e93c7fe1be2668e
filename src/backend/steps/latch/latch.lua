-- Countdown latch: the helpers every latch script starts with (the scripts are this file
-- followed by their own).
--
-- KEYS[1]  one latch: a hash with
--          - 'gen'    the current generation's id (random; compared for equality only, so
--                     that a latch deleted and created again never brings an old one back);
--          - 'count'  the count-downs it still waits for, decimal, 0 ..= 2^53 - 1;
--          - 'd:<id>' for each count-down of the generation, by its id: the count it left,
--                     so that a count-down delivered twice counts once and answers the same;
--          with the expiry its creator gave it, or none.
-- KEYS[2]  the latch's completions, in KEYS[1]'s slot: a sorted set of the generations that
--          completed, each scored by when (microseconds since the epoch, server clock),
--          and beside each '<generation>|<count-down id>', the count-down that completed it
--          (an empty id when it started complete): two members per generation. Kept for a
--          time after the latest completion, and for a number of generations, both given by the
--          scripts that write it; so a waiter that reads after a reset or an expiry still
--          learns that its generation completed.
--
-- Every script answers {'corrupt', i, what} when KEYS[i] holds anything else, before
-- changing anything.
local MAX_COUNT = 9007199254740991

local function corrupt()
    return {'corrupt', 1, 'the latch key does not hold a countdown latch'}
end

-- {'corrupt', 2, what} when KEYS[2] is neither absent nor a sorted set; nil otherwise.
local function completions_corrupt()
    local kind = redis.call('TYPE', KEYS[2])
    kind = kind.ok or kind
    if kind ~= 'none' and kind ~= 'zset' then
        return {'corrupt', 2, "the latch's completions key holds a " .. kind .. ', not a sorted set'}
    end
    return nil
end

-- The latch's generation and count; false when the key does not exist; nil when it holds
-- anything else. Reads only.
local function latch_state(key)
    local kind = redis.call('TYPE', key)
    kind = kind.ok or kind
    if kind == 'none' then
        return false
    end
    if kind ~= 'hash' or redis.call('HLEN', key) < 2 then
        return nil
    end
    local fields = redis.call('HMGET', key, 'gen', 'count')
    local gen, count = fields[1], fields[2]
    if not gen or not count or not string.match(count, '^%d+$') or string.len(count) > 16 then
        return nil
    end
    local n = tonumber(count)
    if n > MAX_COUNT then
        return nil
    end
    return gen, n
end

-- Both keys checked, then the latch's generation and count (false when there is none):
-- `nil, gen, count`, or `{'corrupt', i, what}` first when either key holds anything else.
local function checked_state()
    local gen, count = latch_state(KEYS[1])
    if gen == nil then
        return corrupt()
    end
    return completions_corrupt(), gen, count
end

-- Whether the generation `gen` completed (and is remembered). Reads only.
local function completed(gen)
    return redis.call('ZSCORE', KEYS[2], gen) ~= false
end

-- Records that the generation `gen` completed, by the count-down `id` (nil: it started
-- complete); then forgets the completions older than `keep_ms` and all but the latest
-- `most` generations', and lets the record go `keep_ms` after this one.
local function record_completion(gen, id, keep_ms, most)
    -- In microseconds, exact in a double: completions in the same millisecond are still
    -- told apart by age, so the cap forgets the oldest.
    local time = redis.call('TIME')
    local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
    local at = string.format('%.0f', now)
    -- Two members per generation, side by side in the set's order (same score, and the
    -- generation's fixed-length id first): trimming an even number of the oldest members
    -- forgets whole generations.
    redis.call('ZADD', KEYS[2], at, gen)
    redis.call('ZADD', KEYS[2], at, gen .. '|' .. (id or ''))
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%.0f', now - keep_ms * 1000))
    redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(2 * most) - 1)
    redis.call('PEXPIRE', KEYS[2], keep_ms)
end
