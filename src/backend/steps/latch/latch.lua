-- Countdown latch: the helpers every latch script starts with (the scripts are this file
-- followed by their own).
--
-- KEYS[1]  one latch: a hash with exactly two fields,
--          - 'gen'    the current generation's id (random; compared for equality only, so
--                     that a latch deleted and created again never brings an old one back);
--          - 'count'  the count-downs it still waits for, decimal, 0 ..= 2^53 - 1;
--          with the expiry its creator gave it, or none.
--
-- Every script answers {'corrupt', 1, what} when the key holds anything else, before
-- changing anything.
local MAX_COUNT = 9007199254740991

local function corrupt()
    return {'corrupt', 1, 'the latch key does not hold a countdown latch'}
end

-- The latch's generation and count; false when the key does not exist; nil when it holds
-- anything else. Reads only.
local function latch_state(key)
    local kind = redis.call('TYPE', key)
    kind = kind.ok or kind
    if kind == 'none' then
        return false
    end
    if kind ~= 'hash' or redis.call('HLEN', key) ~= 2 then
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
