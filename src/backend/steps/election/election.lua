-- Elections: helpers shared by their scripts, which are appended to this file (after the
-- fencing counter's). An election lives in a session space, so that a step can tell which
-- candidates' leases are live:
--
-- KEYS[1]  the space's leases: a sorted set, each lease id scored by its expiry (ms)
-- KEYS[2]  the candidates: a sorted set, each candidate scored by its arrival (server ms),
--          so that the one waiting longest leads next (ties: by candidate). A candidate is
--          its session's lease id (32 characters) and a campaign's own 32 characters, so
--          that a late withdrawal of one campaign never ends another of the same session
-- KEYS[3]  the candidates' values: a hash, candidate to value (and, under '', the sweep's
--          cursor while a pass is under way)
-- KEYS[4]  the leader: a hash {id, term, value}; `id` leads while its lease is live ('':
--          nobody)
-- KEYS[5]  the term counter: the fencing counter
--
-- A leader leads while its lease lives; the next step of any candidate after that promotes
-- the first live candidate, with the next term from the counter (never going back). Only
-- the counter expires: a leader's keys must live as long as its session, which the
-- election's steps do not see kept alive. Dead candidates are removed by the steps that
-- meet them, and each campaign step also sweeps the next 64 candidates from a cursor: a
-- candidate that died behind a live one (a killed process, a withdrawal given up) is gone
-- within a pass of ceil(n / 64) campaign steps, or the next pass, so the candidates and
-- their values stay within the live ones and what died since the last pass. While a
-- cluster slot migrates a script may not touch a key of it that is not there: each key's
-- last access is the write that may empty it, which comes last.

local KINDS = {'zset', 'zset', 'hash', 'hash'}
local ROLES = {'the leases key', 'the candidates key', 'the values key', 'the leader key'}

-- {'corrupt', ...} when a key holds another type than its role's.
local function corrupt()
    return wrong_kind(KINDS, ROLES)
end

-- The expiry of candidate `id`'s lease when it is live at `now` (and `id` is not `gone`);
-- nil otherwise.
local function live(id, now, gone)
    if not id or id == '' or id == gone then
        return nil
    end
    local score = redis.call('ZSCORE', KEYS[1], string.sub(id, 1, 32))
    if score and tonumber(score) > now then
        return tonumber(score)
    end
    return nil
end

-- The leader while its lease lives (and it is not `gone`): {id, term, value, expiry}.
local function current(now, gone)
    local leader = redis.call('HMGET', KEYS[4], 'id', 'term', 'value')
    local at = live(leader[1], now, gone)
    if not at then
        return nil
    end
    return {leader[1], leader[2], leader[3] or '', at}
end

-- The leader, the first live candidate promoted with the next term when there is none
-- (`gone` counts as dead); and the dead candidates seen, to remove last. Reads at most 64
-- candidates; nil and a corrupt reply when the counter is not one.
local function resolve(now, time, gone)
    local leader = current(now, gone)
    if leader then
        return leader, {}
    end
    local dead = {}
    for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, 63)) do
        local at = live(id, now, gone)
        if at then
            local counter, problem = fencing_counter(KEYS[5])
            if counter == nil then
                return nil, dead, {'corrupt', 5, problem}
            end
            if counter and not digits_below(counter, FENCING_MAX) then
                return nil, dead, {'corrupt', 5, 'the counter has reached the largest term'}
            end
            local term = take_fencing_token(KEYS[5], counter, time, at - now)
            local value = redis.call('HGET', KEYS[3], id) or ''
            redis.call('HSET', KEYS[4], 'id', id, 'term', term, 'value', value)
            return {id, term, value, at}, dead
        end
        dead[#dead + 1] = id
    end
    -- Nobody leads: said only where someone did, so that no step creates the key.
    local before = redis.call('HGET', KEYS[4], 'id')
    if before and before ~= '' then
        redis.call('HSET', KEYS[4], 'id', '')
    end
    return nil, dead
end

-- A write the server lets through when it is out of memory (removing a member that is
-- never there, from a key the step reads anyway): a script's first write lets its later
-- ones past the refusal, so a step that must not be stopped by a full server (a resign; a
-- candidate already entered, whose promotion grows memory by a bounded amount at most:
-- the value copied into the leader key, the counter, the sweep's cursor) runs it first.
local function pass_out_of_memory()
    redis.call('ZREM', KEYS[2], 'out-of-memory pass')
end

-- How many candidates one campaign step sweeps.
local SWEEP = 64
-- The values hash's field that keeps the sweep's cursor while a pass is under way: no
-- candidate is empty, and the leader key, which waiters and observers watch, is never
-- written by a sweep (a write there would wake them all, and their steps would write it
-- again).
local CURSOR = ''

-- Adds to `dead` the dead candidates among the next SWEEP from the cursor, and moves the
-- cursor past the live ones (its field goes after the last). Ranks shift as candidates go,
-- so a pass may skip one: the next pass meets it. Writes only the cursor, before the
-- candidates' and values' last access.
local function sweep(now, dead)
    local seen = {}
    for _, id in ipairs(dead) do
        seen[id] = true
    end
    local from = tonumber(redis.call('HGET', KEYS[3], CURSOR) or '0') or 0
    local window = redis.call('ZRANGE', KEYS[2], from, from + SWEEP - 1)
    local kept = 0
    for _, id in ipairs(window) do
        if live(id, now) then
            kept = kept + 1
        elseif not seen[id] then
            seen[id] = true
            dead[#dead + 1] = id
        end
    end
    if #window == SWEEP and kept > 0 then
        redis.call('HSET', KEYS[3], CURSOR, from + kept)
    elseif from ~= 0 and #window < SWEEP then
        redis.call('HDEL', KEYS[3], CURSOR)
    end
end

-- Removes `ids` from the candidates: the last access of KEYS[2] and KEYS[3].
local function remove(ids)
    if #ids > 0 then
        redis.call('ZREM', KEYS[2], unpack(ids))
        redis.call('HDEL', KEYS[3], unpack(ids))
    end
end

-- The reply naming the leader `leader` to candidate `id`.
local function leader_reply(leader, id, now)
    if not leader then
        return {'none'}
    end
    if leader[1] == id then
        return {'leader', leader[2], leader[3], leader[4] - now}
    end
    return {'other', leader[2], leader[3], leader[4] - now}
end
