-- Read-write lease: helpers shared by its scripts, which are appended to this file.
--
-- KEYS[1] is one sorted set. Each member is one holder or one waiter, named by its kind and
-- its owner token (a holder) or waiter id (a waiter), and scored by its deadline (ms since
-- the epoch, server clock) in a range of its own, so that each kind is found by score alone:
--
--   'w:<token>'   the writer          score = -deadline              (below 0; at most one)
--   'r:<token>'   a reader            score = deadline               (0 < score < RANGE)
--   'q:<waiter>'  a waiting writer    score = WRITER_WAITS + deadline
--   'a:<waiter>'  an admitted reader  score = READER_ADMITTED + deadline: it waited while a
--                                     writer held, and goes in as soon as none holds,
--                                     before every waiting writer
--   'p:<waiter>'  a waiting reader    score = READER_WAITS + deadline: it came while a
--                                     writer waited, and waits for that writer's turn (the
--                                     next writer's grant makes it admitted)
--
-- That is the phase-fair order: the readers that came while a writer held go in together
-- before the next writer; a waiting writer goes before the readers that came after it;
-- waiting writers go in the order of their waiter ids, which start with when each began
-- waiting (ms since the epoch on the server's clock, as the waiter read it, in digits of one
-- width). Only a waiter that waits records itself; one that tries once is let in or refused
-- by the same rules, behind every waiter.
--
-- Deadlines stay below 2^42 ms (now plus at most 2^40 ms), so every score, below 2^50, is
-- an exact double. Every step prunes the entries whose deadline has passed before it reads,
-- and leaves the key expiring 1 ms after its latest deadline: never shorter than a live
-- holder's (each holder has its own expiry; the key lives as long as the longest). Redis
-- deletes the set with its last member.
--
-- Every script replies with a table whose first element names the outcome;
-- {'corrupt', 1, what} means KEYS[1] holds something else, and the script changed nothing.
local RANGE = 281474976710656 -- 2^48: each kind of waiter's scores are its base plus a deadline
local WRITER_WAITS, READER_ADMITTED, READER_WAITS = RANGE, 2 * RANGE, 3 * RANGE
local WAITERS = {WRITER_WAITS, READER_ADMITTED, READER_WAITS}

-- The members KEYS[1] holds, counted by corrupt() and kept by every write below. Redis
-- deletes the set with its last member, and while its Cluster slot moves, a script may touch
-- no key that is not there any more (the node answers 'non local key', after the writes
-- before it): so once this is 0, nothing touches the set again but a write that adds.
local members = 0
-- Whether this script changed the set: only then does settle() touch its expiry, since every
-- write, even one that changes nothing, wakes every waiter watching the key.
local changed = false

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
    changed = true
    if option then
        members = members + redis.call('ZADD', KEYS[1], option, score, member)
    else
        members = members + redis.call('ZADD', KEYS[1], score, member)
    end
end

-- Removes the members given.
local function remove(...)
    if members > 0 then
        local removed = redis.call('ZREM', KEYS[1], ...)
        members = members - removed
        changed = changed or removed > 0
    end
end

-- Removes the entries scored from min to max (Redis range syntax), counted first and removed
-- only when there are some: any write, even one that removes nothing, would let the script's
-- later writes past the server's out-of-memory refusal.
local function remove_range(min, max)
    if members > 0 and redis.call('ZCOUNT', KEYS[1], min, max) > 0 then
        members = members - redis.call('ZREMRANGEBYSCORE', KEYS[1], min, max)
        changed = true
    end
end

-- The ranges of every kind of entry whose deadline is at or before `now`.
local function expired(now)
    local ranges = {{digits(-now), '(0'}, {0, digits(now)}}
    for _, base in ipairs(WAITERS) do
        table.insert(ranges, {base, digits(base + now)})
    end
    return ranges
end

-- Removes every entry whose deadline is at or before `now`.
local function prune(now)
    for _, range in ipairs(expired(now)) do
        remove_range(range[1], range[2])
    end
end

-- Removes every entry whose deadline is at or before `now`, with writes whatever they find:
-- for a step that must pass when the server is out of memory (a renewal grows nothing, and
-- refusing it would cost its holder the lease), since a write lets the script's later ones
-- past the refusal.
local function prune_even_out_of_memory(now)
    for _, range in ipairs(expired(now)) do
        if members > 0 then
            local removed = redis.call('ZREMRANGEBYSCORE', KEYS[1], range[1], range[2])
            members = members - removed
            changed = changed or removed > 0
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

-- The latest deadline among the entries of a kind of waiter (its base) live at `now`; 0 for
-- none.
local function latest_waiter(base, now)
    local found = edge('(' .. digits(base + now), '(' .. digits(base + RANGE), true)
    return found and found - base or 0
end

-- The latest deadline of each kind among the entries live at `now` (0 for none): the
-- writer's, the readers', and each kind of waiter's (in WAITERS' order). Read before a
-- step prunes, so that a step can add its entry first and the set never empties between
-- the two.
local function live_latest(now)
    local writer = edge('-inf', '(' .. digits(-now), false)
    local reader = edge('(' .. digits(now), '(' .. digits(RANGE), true)
    return writer and -writer or 0, reader or 0, latest_waiter(WRITER_WAITS, now),
        latest_waiter(READER_ADMITTED, now), latest_waiter(READER_WAITS, now)
end

-- The key expires 1 ms after its latest deadline (gone with its last member), once the
-- script changed it.
local function settle(now)
    if members == 0 or not changed then
        return
    end
    local last = math.max(live_latest(now))
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

-- For a step on the entry of owner token ARGV[1] that must pass out of memory (a renewal, a
-- downgrade: they grow nothing): prunes with writes, then answers `nil`, the server's time
-- and the holder's member, kind and deadline; or the step's reply first: {'corrupt', 1,
-- what}, or {'not_owner'} when the token holds no live entry.
local function own_entry()
    local refused = corrupt()
    if refused then
        return refused
    end
    local now = now_ms()
    prune_even_out_of_memory(now)
    local member, kind, deadline = holder(ARGV[1], now)
    if not member then
        return {'not_owner'}
    end
    return nil, now, member, kind, deadline
end
