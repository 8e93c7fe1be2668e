-- Sessions: leases with attached keys, helpers shared by their scripts, which are appended
-- to this file. One space per name, every key of it in one slot:
--
-- KEYS[1]  the leases: a sorted set, each lease id scored by its expiry (ms since the epoch,
--          server clock)
-- KEYS[2]  the attached keys' expiries: a sorted set, each name scored by its own absolute
--          expiry, which is always its lease's (set by the put, re-armed by the keep-alive
--          in the same step as the lease)
-- KEYS[3]  the attached keys: a hash, each name to its lease id (32 characters) and value
-- KEYS[4]  (steps on one lease) the names put with that lease: a set, expiring with it
--
-- A lease or an attached key is live while its score is after now: reads need no cleanup.
-- Writing steps remove what ran out, a bounded number of keys at a time, and the space's
-- keys expire with its latest lease, so an idle space leaves nothing behind. Every script
-- replies with a table whose first element names the outcome; {'corrupt', i, what} means
-- KEYS[i] holds something else, or lacks what the others say it holds (a live holder's
-- name without its expiry), and the script changed nothing.
--
-- While a cluster slot migrates, a script may not touch a key of it that is not there (the
-- server takes it for one already moved, and fails the command): a script runs there only
-- when every key it declares exists, so each one accesses a key for the last time with the
-- write that may empty it, and removes what ran out (`prune`) after everything else.

local KINDS = {'zset', 'zset', 'hash', 'set'}
local ROLES = {'the leases key', 'the expiries key', 'the attached keys key', 'the key set of a lease'}

-- What a step says of a held name whose expiry is gone (see session_keep_alive.lua).
local LOST_EXPIRY = 'a held name has lost its expiry (keys evicted?)'

-- {'corrupt', ...} when a key holds another type than its role's.
local function corrupt()
    return wrong_kind(KINDS, ROLES)
end

-- The expiry of lease `id` when it is live at `now`; nil otherwise.
local function lease_expiry(id, now)
    local score = redis.call('ZSCORE', KEYS[1], id)
    if score and tonumber(score) > now then
        return tonumber(score)
    end
    return nil
end

-- The lease id of an attached key's entry, and its value.
local function split(entry)
    return string.sub(entry, 1, 32), string.sub(entry, 33)
end

-- The names lease `id` put (KEYS[4]) that are still its own, and those the set still lists
-- that another lease took since. Reads only.
local function own_names(id)
    local own, stale = {}, {}
    for _, name in ipairs(redis.call('SMEMBERS', KEYS[4])) do
        local entry = redis.call('HGET', KEYS[3], name)
        if entry and split(entry) == id then
            own[#own + 1] = name
        else
            stale[#stale + 1] = name
        end
    end
    return own, stale
end

-- Removes what ran out by `now`: the leases, and up to 64 attached keys (a step never does
-- unbounded work; a read never counts on it). The last access of the space's keys.
local function prune(now)
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
    local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 64)
    if #dead > 0 then
        redis.call('HDEL', KEYS[3], unpack(dead))
        redis.call('ZREM', KEYS[2], unpack(dead))
    end
end

-- The space's keys go with its latest lease, when that one is live (a past expiry would
-- remove them now; they keep the one an earlier step gave them, which has passed or will).
-- Never removes a key.
local function expire_space(now)
    local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
    if #last == 0 or tonumber(last[2]) <= now then
        return
    end
    -- As digits: a score may print in exponent form, which PEXPIREAT refuses.
    local at = digits(tonumber(last[2]))
    for i = 1, 3 do
        redis.call('PEXPIREAT', KEYS[i], at)
    end
end
