-- Stacked fixed windows: one fixed window per policy on one client key, all in one hash,
-- checked together and counted all or nothing. Each window's first counted request fixes its
-- end; a window whose end has passed is empty. A rejected request consumes nothing, and a
-- probe (0 permits) creates nothing; neither writes, except to give back a lost expiry.
-- A shadow policy never rejects: a request it alone would reject is granted, counted by the
-- others and not by it (it counts only what it would admit), and the reply says so.
--
-- KEYS[1]  the windows: a hash, field = policy index ("0", "1", ...), value =
--          "<count>:<window end, ms since the epoch on the server's clock>"
-- ARGV[1]  permits asked for (>= 0, at most the smallest enforced limit + 1; the largest
--          limit + 1 when every policy is a shadow)
-- ARGV[2]  the shadow policies: bit k - 1 set for policy k - 1 (0 ..= 2^16 - 1)
-- ARGV[2k + 1], ARGV[2k + 2]  policy k - 1's permits per window (1 ..= 2^52 - 1) and
--          window length in milliseconds (1 ..= 2^40), for k = 1 ..= 16
--
-- Every number stays below 2^53, so Lua's doubles hold it exactly.
-- Returns {'granted' or 'denied', then per policy: its count after the step, ms until its
-- window ends (-1: no window under way); then the shadow policies that would have rejected
-- the request, as bits}, or {'corrupt', 1, what} when the state is not a hash of such values
-- (nothing changed).
--
-- Every global lookup, library call and number printed or parsed costs Redis hundreds of
-- instructions: globals are read once into locals, arguments read as numbers with `+ 0`,
-- and the field names come from a table rather than being printed.
local call, argv, tonumber, format = redis.call, ARGV, tonumber, string.format
local floor, match, unpack = math.floor, string.match, unpack
local permits = argv[1] + 0
local shadows = argv[2] + 0
local n = (#argv - 2) / 2
local MAX_COUNT = 4503599627370495 -- 2^52 - 1, the largest limit
local MAX_END = 9007199254740991 -- 2^53 - 1
local NAMES = {'0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13',
    '14', '15'}

local time = call('TIME')
local now = time[1] * 1000 + floor(time[2] / 1000)

local names, limits, shadow = {}, {}, {}
local bit = 1
for i = 1, n do
    names[i] = NAMES[i]
    limits[i] = argv[2 * i + 1] + 0
    -- Most limiters have no shadow policy: no bit to read.
    shadow[i] = shadows > 0 and floor(shadows / bit) % 2 == 1
    bit = bit * 2
end
local raw = redis.pcall('HMGET', KEYS[1], unpack(names))
local CORRUPT = 'the stacked windows are not a hash of policy indexes to "<count>:<window end>"'
if raw.err then
    return {'corrupt', 1, CORRUPT}
end

-- Validate everything before any write.
local counts, ends, refuses = {}, {}, {}
local present, newest, fits, shadow_rejected = false, 0, true, 0
for i = 1, n do
    local count, finish = 0, 0
    if raw[i] then
        present = true
        local c, f = match(raw[i], '^(%d+):(%d+)$')
        count, finish = tonumber(c), tonumber(f)
        if not (count and finish) or count > MAX_COUNT or finish > MAX_END then
            return {'corrupt', 1, CORRUPT}
        end
        if finish > newest then
            newest = finish
        end
        if finish <= now then
            -- The window ended: it counts nothing, and the next grant starts a new one.
            count, finish = 0, 0
        end
    end
    counts[i], ends[i] = count, finish
    refuses[i] = count + permits > limits[i]
    if refuses[i] and shadow[i] then
        shadow_rejected = shadow_rejected + 2 ^ (i - 1)
    elseif refuses[i] then
        fits = false
    end
end

if fits and permits > 0 then
    local fields, latest = {}, 0
    local k = 0
    for i = 1, n do
        -- A shadow policy that would reject counts nothing, and keeps its window as it is.
        if not refuses[i] then
            if ends[i] == 0 then
                ends[i] = now + argv[2 * i + 2]
            end
            counts[i] = counts[i] + permits
            fields[k + 1] = names[i]
            fields[k + 2] = format('%d:%d', counts[i], ends[i])
            k = k + 2
        end
        if ends[i] > latest then
            latest = ends[i]
        end
    end
    -- Only shadow policies that would reject: nothing is counted, nothing written.
    if k > 0 then
        call('HSET', KEYS[1], unpack(fields))
        -- The key lives until its last window ends.
        call('PEXPIREAT', KEYS[1], format('%d', latest))
    end
elseif present and call('PTTL', KEYS[1]) == -1 then
    -- Windows without expiry would outlive their use: give it back (a time in the past
    -- deletes a key whose windows all ended).
    call('PEXPIREAT', KEYS[1], format('%d', newest))
end

local reply = {fits and 'granted' or 'denied'}
for i = 1, n do
    reply[2 * i] = counts[i]
    if ends[i] > 0 then
        reply[2 * i + 1] = ends[i] - now
    else
        reply[2 * i + 1] = -1
    end
end
reply[2 * n + 2] = shadow_rejected
return reply
