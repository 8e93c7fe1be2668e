-- Read-write lease: helpers shared by its scripts, which are appended to this file.
--
-- KEYS[1] is one sorted set. Each member is one holder or one waiting writer, named by its
-- kind and its owner token, and scored by its deadline (ms since the epoch, server clock)
-- in a range of its own, so that each kind is found by score alone:
--
--   'w:<token>'   the writer        score = -deadline            (below 0; at most one)
--   'r:<token>'   a reader          score = deadline             (0 < score < PENDING)
--   'q:<waiter>'  a waiting writer  score = PENDING + deadline   (PENDING and above)
--
-- Deadlines stay below 2^42 ms (now plus at most 2^40 ms), so every score is an exact double.
-- Every step prunes the entries whose deadline has passed before it reads, and leaves the
-- key expiring 1 ms after its latest deadline: never shorter than a live holder's (each
-- holder has its own expiry; the key lives as long as the longest). Redis deletes the set
-- with its last member.
--
-- Every script replies with a table whose first element names the outcome;
-- {'corrupt', 1, what} means KEYS[1] holds something else, and the script changed nothing.
local PENDING = 281474976710656 -- 2^48

local function now_ms()
    local time = redis.call('TIME')
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Whole numbers as digits: Redis may print a Lua number argument in exponent form.
local function digits(n)
    return string.format('%.0f', n)
end

-- The members KEYS[1] holds, counted by corrupt() and kept by every write below. Redis
-- deletes the set with its last member, and while its Cluster slot moves, a script may touch
-- no key that is not there any more (the node answers 'non local key', after the writes
-- before it): so once this is 0, nothing touches the set again but a write that adds.
local members = 0

-- {'corrupt', ...} when KEYS[1] is neither absent nor a sorted set; nil otherwise.
local function corrupt()
    local kind = redis.call('TYPE', KEYS[1])['ok']
    if kind ~= 'none' and kind ~= 'zset' then
        return {'corrupt', 1, 'the read-write lease key holds a ' .. kind .. ', not a lease set'}
    end
    members = redis.call('ZCARD', KEYS[1])
    return nil
end

-- Adds or updates `member` at `score` (ZADD's options first, if any).
local function put(score, member, option)
    if option then
        members = members + redis.call('ZADD', KEYS[1], option, score, member)
    else
        members = members + redis.call('ZADD', KEYS[1], score, member)
    end
end

-- Removes the members given.
local function remove(...)
    if members > 0 then
        members = members - redis.call('ZREM', KEYS[1], ...)
    end
end

-- Removes the entries scored from min to max (Redis range syntax), counted first and removed
-- only when there are some: any write, even one that removes nothing, would let the script's
-- later writes past the server's out-of-memory refusal.
local function remove_range(min, max)
    if members > 0 and redis.call('ZCOUNT', KEYS[1], min, max) > 0 then
        members = members - redis.call('ZREMRANGEBYSCORE', KEYS[1], min, max)
    end
end

-- Removes every entry whose deadline is at or before `now`.
local function prune(now)
    remove_range(digits(-now), '(0')
    remove_range(0, digits(now))
    remove_range(PENDING, digits(PENDING + now))
end

-- Removes every entry whose deadline is at or before `now`, with writes whatever they find:
-- for a step that must pass when the server is out of memory (a renewal grows nothing, and
-- refusing it would cost its holder the lease), since a write lets the script's later ones
-- past the refusal.
local function prune_even_out_of_memory(now)
    for _, range in ipairs({{digits(-now), '(0'}, {0, digits(now)}, {PENDING, digits(PENDING + now)}}) do
        if members > 0 then
            members = members - redis.call('ZREMRANGEBYSCORE', KEYS[1], range[1], range[2])
        end
    end
end

-- The score of the lowest entry with a score from min to max (Redis range syntax), or of the
-- highest when `reverse`; nil when there is none.
local function edge(min, max, reverse)
    if members == 0 then
        return nil
    end
    local found
    if reverse then
        found = redis.call('ZREVRANGEBYSCORE', KEYS[1], max, min, 'WITHSCORES', 'LIMIT', 0, 1)
    else
        found = redis.call('ZRANGEBYSCORE', KEYS[1], min, max, 'WITHSCORES', 'LIMIT', 0, 1)
    end
    if #found == 0 then
        return nil
    end
    return tonumber(found[2])
end

-- The latest deadline of each kind (0 for none): the writer's, the readers', the waiting
-- writers'.
local function latest()
    local writer = edge('-inf', '(0', false)
    local reader = edge('(0', '(' .. digits(PENDING), true)
    local waiting = edge(PENDING, '+inf', true)
    return writer and -writer or 0, reader or 0, waiting and waiting - PENDING or 0
end

-- The latest deadline of each kind among the entries still live at `now` (0 for none), as
-- latest() after a prune, without one: so that a step can add its entry before it prunes,
-- and the set never empties between the two.
local function live_latest(now)
    local writer = edge('-inf', '(' .. digits(-now), false)
    local reader = edge('(' .. digits(now), '(' .. digits(PENDING), true)
    local waiting = edge('(' .. digits(PENDING + now), '+inf', true)
    return writer and -writer or 0, reader or 0, waiting and waiting - PENDING or 0
end

-- The key expires 1 ms after its latest deadline (gone with its last member).
local function settle()
    if members == 0 then
        return
    end
    local writer, reader, waiting = latest()
    local last = math.max(writer, reader, waiting)
    if last > 0 then
        redis.call('PEXPIREAT', KEYS[1], digits(last + 1))
    end
end

-- The member of a holder's token, and its kind ('w' or 'r'), if it holds a live entry.
local function holder(token, now)
    if members == 0 then
        return nil
    end
    local score = redis.call('ZSCORE', KEYS[1], 'w:' .. token)
    if score and -tonumber(score) > now then
        return 'w:' .. token, 'w', -tonumber(score)
    end
    score = redis.call('ZSCORE', KEYS[1], 'r:' .. token)
    if score and tonumber(score) > now then
        return 'r:' .. token, 'r', tonumber(score)
    end
    return nil
end
