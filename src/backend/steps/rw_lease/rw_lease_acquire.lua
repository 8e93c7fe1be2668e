-- Read-write lease acquire: a read lease while no writer holds or waits, a write lease
-- while nobody holds (see rw_lease.lua for the set).
--
-- KEYS[1]  the lease set
-- KEYS[2]  writers only: their fencing counter (see fencing_counter.lua), in the set's slot
-- ARGV[1]  'r' for a read lease, 'w' for a write lease
-- ARGV[2]  owner token of the new lease
-- ARGV[3]  lease in milliseconds (1 ..= 2^40)
-- ARGV[4]  the server time (ms since the epoch) after which this step changes nothing; 0: none
-- ARGV[5]  writers only: the waiter id under which a refused writer records that it waits
--          (writer preference), '' for none; a writer's grant removes every such record
-- ARGV[6]  writers only: how long that record lasts, in milliseconds (1 ..= 2^40)
--
-- Returns {'late'}      the step arrived after ARGV[4]: a command delayed past its client's
--                       cleanup must not take a lease; nothing changed (not even pruning)
--         {'granted'}   a read lease; also when the token holds a lease already (this
--                       acquisition delivered twice): nothing changed
--         {'granted', token}  a write lease and its fencing token, a decimal string taken
--                       from the counter; a write acquisition delivered twice answers the
--                       counter's value, which no writer can have moved while it held
--         {'busy', ms}  ms = how long until expiries alone could let it in; for a writer
--                       with a waiter id, its waiting record is written, or renewed once
--                       a quarter of it has passed
--         {'corrupt', 1, what}
-- Out of memory (OOM under noeviction) the server refuses every acquisition but a
-- duplicate's, before anything changed. A writer's counter is validated before any write.
local now = now_ms()
if ARGV[4] ~= '0' and now > tonumber(ARGV[4]) then
    return {'late'}
end
local refused = corrupt()
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

-- Decided on the live entries; the new one is added before the expired ones are pruned, so
-- that the set never empties between the two (see `members`).
local writer, reader, waiting = live_latest(now)
local deadline = now + tonumber(ARGV[3])
if ARGV[1] == 'r' then
    -- A writer holding, or one waiting, keeps new readers out.
    if writer > 0 or waiting > 0 then
        prune(now)
        return {'busy', math.max(writer, waiting) - now}
    end
    put(digits(deadline), 'r:' .. ARGV[2])
    prune(now)
else
    if writer > 0 or reader > 0 then
        if ARGV[5] ~= '' then
            -- Written when missing or past a quarter of its life, not at every try: each
            -- write wakes every waiter on the key, the writer itself included, which would
            -- then try again at once, round after round.
            local bound = tonumber(ARGV[6])
            local recorded = redis.call('ZSCORE', KEYS[1], 'q:' .. ARGV[5])
            if not recorded or tonumber(recorded) - PENDING - now < bound * 3 / 4 then
                put(digits(PENDING + now + bound), 'q:' .. ARGV[5])
                prune(now)
                settle()
                return {'busy', math.max(writer, reader) - now}
            end
        end
        prune(now)
        return {'busy', math.max(writer, reader) - now}
    end
    put(digits(-deadline), 'w:' .. ARGV[2])
    -- Every waiting record goes with a writer's grant: a writer that still waits records
    -- itself anew when it next tries, and one that crashed keeps readers out no longer.
    remove_range(PENDING, '+inf')
    prune(now)
    settle()
    return {'granted', take_fencing_token(KEYS[2], counter, redis.call('TIME'))}
end
settle()
return {'granted'}
