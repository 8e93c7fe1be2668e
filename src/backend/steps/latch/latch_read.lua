-- Latch read: the current generation and its count, or whether a generation the latch no
-- longer holds completed. Reads only.
--
-- KEYS[1]  the latch
-- KEYS[2]  its completions
-- ARGV[1]  the generation asked about, or '' for the current one
--
-- Returns {'latch', generation id, count} (the current generation: when ARGV[1] is '' or
-- names it), {'completed'} (ARGV[1] names a generation the latch no longer holds, which
-- completed), {'none'} (no latch, or ARGV[1] names another generation that did not
-- complete), or {'corrupt', i, what}. Reads only: it goes as EVALSHA_RO where the server
-- has it.
local refused, gen, count = checked_state()
if refused then
    return refused
end
if gen and (ARGV[1] == '' or gen == ARGV[1]) then
    return {'latch', gen, count}
end
if ARGV[1] ~= '' and completed(ARGV[1]) then
    return {'completed'}
end
return {'none'}
