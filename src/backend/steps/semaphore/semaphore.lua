-- Semaphore sets: the helpers every semaphore script starts with (the scripts are this file
-- followed by their own).
--
-- KEYS[i]  one semaphore: a sorted set holding
--          - member 'c', score = -capacity (negative, so that pruning, which removes scores
--            0 ..= now, never touches it, and so that it ranks first);
--          - one member 'p:<owner token>' per permit, score = its expiry in ms since the
--            epoch (server clock), or +inf for a permit without expiry.
--          The key is deleted with its last permit (capacity included) and otherwise expires
--          1 ms after its latest permit, or never while a permit has no expiry.
--
-- Returns nothing: the scripts below state their replies. Every script answers
-- {'corrupt', i, what} when KEYS[i] does not hold such a set, before changing anything.
local MAX_CAPACITY = 4294967295

local function corrupt(i)
    return {'corrupt', i, "the semaphore key does not hold a semaphore's sorted set"}
end

local function is_inf(score)
    return score == 'inf' or score == '+inf' or tonumber(score) == math.huge
end

-- The set's capacity (0 when the key does not exist) and its number of permits, expired ones
-- included; nil when the key is not a semaphore set. Reads only.
local function inspect(key)
    local stored = redis.pcall('ZSCORE', key, 'c')
    if type(stored) == 'table' then
        return nil -- an error reply: another type
    end
    local size = redis.call('ZCARD', key)
    if size == 0 then
        return 0, 0
    end
    if not stored then
        return nil -- permits without a capacity
    end
    local capacity = -tonumber(stored)
    if capacity < 1 or capacity > MAX_CAPACITY or capacity % 1 ~= 0 then
        return nil
    end
    -- Only the capacity may have a negative score: pruning relies on it.
    if redis.call('ZCOUNT', key, '-inf', '(0') ~= 1 then
        return nil
    end
    return capacity, size - 1
end

-- Inspects every key before anything is written: their capacities and sizes (tables in the
-- order of KEYS), or nil and the index of the first key that is not a semaphore set.
local function inspect_all()
    local capacities, sizes = {}, {}
    for i = 1, #KEYS do
        local capacity, size = inspect(KEYS[i])
        if not capacity then
            return nil, i
        end
        capacities[i], sizes[i] = capacity, size
    end
    return capacities, sizes
end

-- For a step on the permit of owner token ARGV[1]: its member and the server's time, once
-- every key is checked; or `nil, nil, {'corrupt', i, what}` when KEYS[i] is not a
-- semaphore set.
local function permit_step()
    local valid, index = inspect_all()
    if not valid then
        return nil, nil, corrupt(index)
    end
    return 'p:' .. ARGV[1], (now_ms())
end

-- The score of a permit that expires `expiry` ms after `now`; 'inf' when `expiry` is 0 (never).
local function expiry_score(now, expiry)
    if expiry > 0 then
        return digits(now + expiry)
    end
    return 'inf'
end

-- Removes the expired permits; returns how many.
local function prune(key, now)
    return redis.call('ZREMRANGEBYSCORE', key, 0, digits(now))
end

-- Makes the key's life follow its permits: deleted without permits, persistent while one
-- has no expiry, else expiring 1 ms after the latest one. Returns whether it deleted it.
local function settle(key)
    local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if #top == 0 then
        return false
    end
    if is_inf(top[2]) then
        redis.call('PERSIST', key)
    elseif tonumber(top[2]) > 0 then
        redis.call('PEXPIREAT', key, digits(tonumber(top[2]) + 1))
    else
        redis.call('DEL', key) -- only the capacity is left
        return true
    end
    return false
end

