-- Read-write lease acquire, in the phase-fair order (see rw_lease.lua for the set): a read
-- lease while no writer holds, unless a writer waits and this reader is not admitted; a
-- write lease while nobody holds, no admitted reader waits and no writer waits ahead of it.
--
-- KEYS[1]  the lease set
-- KEYS[2]  writers only: their fencing counter (see fencing_counter.lua), in the set's slot
-- ARGV[1]  'r' for a read lease, 'w' for a write lease
-- ARGV[2]  owner token of the new lease
-- ARGV[3]  lease in milliseconds (1 ..= 2^40)
-- ARGV[4]  the server time (ms since the epoch) after which this step changes nothing; 0: none
-- ARGV[5]  the waiter id under which a refused acquisition records that it waits, '' for
--          none (an acquisition that tries once); its grant removes the record
-- ARGV[6]  how long that record lasts, in milliseconds (1 ..= 2^40)
--
-- Returns {'late'}      the step arrived after ARGV[4]: a command delayed past its client's
--                       cleanup must not take a lease; nothing changed (not even pruning)
--         {'granted'}   a read lease; also when the token holds a lease already (this
--                       acquisition delivered twice): nothing changed
--         {'granted', token}  a write lease and its fencing token, a decimal string taken
--                       from the counter; a write acquisition delivered twice answers the
--                       counter's value, which no writer can have moved while it held
--         {'busy', ms}  ms = how long until expiries alone could let it in; with a waiter
--                       id, its record is written, or renewed once a quarter of it has passed
--         {'corrupt', 1, what}
-- Out of memory (OOM under noeviction) the server refuses every acquisition but a
-- duplicate's, before anything changed. A writer's counter is validated before any write.
local now, _, refused = first_checks(ARGV[4])
if refused then
    return refused
end
local write = ARGV[1] == 'w'
local counter, problem
if write then
    counter, problem = fencing_counter(KEYS[2])
    if counter == nil then
        return {'corrupt', 2, problem}
    end
end
-- This acquisition delivered twice: the lease it holds is its grant.
if holder(ARGV[2], now) then
    if not write then
        return {'granted'}
    end
    if not counter or counter == '0' then
        return {'corrupt', 2, 'the counter of a held write lease is gone'}
    end
    return {'granted', counter}
end
if write and counter and not digits_below(counter, FENCING_MAX) then
    return {'corrupt', 2, 'the counter has reached the largest fencing token'}
end
-- Out of memory, no new lease, whatever the prune below would free.
refuse_when_out_of_memory(KEYS[1])

local waiter = ARGV[5]
local bound = tonumber(ARGV[6])

-- The live score of the waiter's record of the kind whose base and prefix are given, or nil.
local function recorded(base, prefix)
    if waiter == '' or members == 0 then
        return nil
    end
    local score = redis.call('ZSCORE', KEYS[1], prefix .. waiter)
    if score and tonumber(score) > base + now then
        return tonumber(score)
    end
    return nil
end

-- Records that the waiter waits, as the kind given, and takes its record of the kind
-- `instead` out: written when missing or past a quarter of its life, not at every try, since
-- each write wakes every waiter on the key, this one included, which would then try again
-- at once, round after round.
local function wait_as(base, prefix, instead)
    if waiter == '' then
        return
    end
    local score = recorded(base, prefix)
    if not score or score - base - now < bound * 3 / 4 then
        put(digits(base + now + bound), prefix .. waiter)
    end
    if instead and recorded(READER_WAITS, instead) then
        remove(instead .. waiter)
    end
end

-- Takes the waiter's records out (its grant).
local function stop_waiting(...)
    for _, prefix in ipairs({...}) do
        if waiter ~= '' and members > 0 and redis.call('ZSCORE', KEYS[1], prefix .. waiter) then
            remove(prefix .. waiter)
        end
    end
end

-- The readers that wait for a writer's turn are admitted: they go in when it ends.
local function admit_waiting_readers()
    if members == 0 then
        return
    end
    local waiting = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. digits(READER_WAITS + now),
        '(' .. digits(READER_WAITS + RANGE), 'WITHSCORES')
    for i = 1, #waiting, 2 do
        local deadline = tonumber(waiting[i + 1]) - READER_WAITS
        put(digits(READER_ADMITTED + deadline), 'a:' .. string.sub(waiting[i], 3))
        remove(waiting[i])
    end
end

-- Decided on the live entries; the new one is added before the expired ones are pruned, so
-- that the set never empties between the two (see `members`).
local writer, reader, writers_waiting, admitted = live_latest(now)
local deadline = now + tonumber(ARGV[3])
if ARGV[1] == 'r' then
    if writer > 0 then
        -- Goes in as soon as this writer is gone, before every waiting writer.
        wait_as(READER_ADMITTED, 'a:', 'p:')
        prune(now)
        settle(now)
        return {'busy', writer - now}
    end
    if writers_waiting > 0 and not recorded(READER_ADMITTED, 'a:') then
        -- A writer waits that came first: this reader waits for its turn.
        wait_as(READER_WAITS, 'p:')
        prune(now)
        settle(now)
        return {'busy', writers_waiting - now}
    end
    put(digits(deadline), 'r:' .. ARGV[2])
    stop_waiting('a:', 'p:')
    prune(now)
    settle(now)
    return {'granted'}
end
-- The latest deadline among the waiting writers ahead of this one (0 for none): those whose
-- waiter ids sort before its own (an id starts with when its wait began, in digits of one
-- width), or all of them when it has no id.
local function writers_ahead()
    if writers_waiting == 0 then
        return 0
    end
    local waiting = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. digits(WRITER_WAITS + now),
        '(' .. digits(WRITER_WAITS + RANGE), 'WITHSCORES')
    local own = 'q:' .. waiter
    local latest = 0
    for i = 1, #waiting, 2 do
        if waiter == '' or waiting[i] < own then
            latest = math.max(latest, tonumber(waiting[i + 1]) - WRITER_WAITS)
        end
    end
    return latest
end

-- A writer waits for the writers ahead of it, for the admitted readers, and for every
-- holder.
local before = writers_ahead()
if writer > 0 or reader > 0 or admitted > 0 or before > 0 then
    wait_as(WRITER_WAITS, 'q:')
    prune(now)
    settle(now)
    return {'busy', math.max(writer, reader, admitted, before) - now}
end
put(digits(-deadline), 'w:' .. ARGV[2])
stop_waiting('q:')
admit_waiting_readers()
prune(now)
settle(now)
return {'granted', take_fencing_token(KEYS[2], counter, redis.call('TIME'), tonumber(ARGV[3]))}
