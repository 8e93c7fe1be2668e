-- Semaphore acquire: one permit in every set of KEYS, or in none (see semaphore.lua for the
-- sets). Expired permits are pruned first; with no live permit left, a set takes the new
-- capacity. A refused acquisition takes nothing.
--
-- KEYS[1..n]  the sets (n = 1 or 2, one slot)
-- ARGV[1]     owner token of the new permit
-- ARGV[2]     its expiry in milliseconds (0: none; at most 2^40)
-- ARGV[3..]   the capacity asked for each key, in the order of KEYS (1 ..= 2^32 - 1)
-- ARGV[3 + n]  the server time (ms since the epoch) after which this step changes nothing;
--              0: none
--
-- Returns {'late'} when the step arrived after ARGV[3 + n]: a command delayed past its
--                  client's cleanup must not take a permit; nothing changed (not even
--                  pruning);
--         {'granted'}, also when the token holds a permit in every set already (this
--                    acquisition delivered twice: nothing changed);
--         an OOM error when the server is out of memory (nothing changed);
--         {'full', ms} when a set is full, ms = how long until expiries alone leave a free
--                      slot in every full set (-1: a full set's permits never expire);
--         {'capacity_mismatch', i, stored} when KEYS[i] has live permits under another
--                                          capacity, stored;
--         {'corrupt', i, what} when KEYS[i] is not a semaphore set (nothing changed).
local member = 'p:' .. ARGV[1]
local expiry = tonumber(ARGV[2])
local n = #KEYS

local now = now_ms()
if past(ARGV[3 + n], now) then
    return {'late'}
end

local stored, sizes = inspect_all()
if not stored then
    return corrupt(sizes)
end

-- This acquisition delivered twice: the permit it holds in every set is its grant.
local holds = true
for i = 1, n do
    local score = redis.call('ZSCORE', KEYS[i], member)
    if not score or not (is_inf(score) or tonumber(score) > now) then
        holds = false
        break
    end
end
if holds then
    return {'granted'}
end

-- Out of memory, no new permit, whatever the prune below would free.
refuse_when_out_of_memory(KEYS[1])

local live = {}
for i = 1, n do
    live[i] = sizes[i]
    if sizes[i] > 0 then
        live[i] = sizes[i] - prune(KEYS[i], now)
        -- A set left with its capacity alone is not deleted here: a grant below writes it
        -- again, and a key deleted and written in one script fails half-way while its
        -- Cluster slot moves. Its expiry (1 ms after its latest permit) has passed or is
        -- about to; a grant rewrites its capacity and expiry.
    end
end

for i = 1, n do
    if live[i] > 0 and stored[i] ~= tonumber(ARGV[2 + i]) then
        return {'capacity_mismatch', i, stored[i]}
    end
end

local full, wait = false, 0
for i = 1, n do
    local capacity = tonumber(ARGV[2 + i])
    if live[i] >= capacity then
        full = true
        if wait >= 0 then
            -- Permits rank by expiry after the capacity (rank 0): a slot frees when the
            -- (live - capacity + 1)-th earliest expires.
            local rank = 1 + live[i] - capacity
            local entry = redis.call('ZRANGE', KEYS[i], rank, rank, 'WITHSCORES')
            if #entry == 0 or is_inf(entry[2]) then
                wait = -1
            else
                wait = math.max(wait, tonumber(entry[2]) - now)
            end
        end
    end
end
if full then
    return {'full', wait}
end

local score = expiry_score(now, expiry)
for i = 1, n do
    redis.call('ZADD', KEYS[i], digits(-tonumber(ARGV[2 + i])), 'c', score, member)
    settle(KEYS[i])
end
return {'granted'}
