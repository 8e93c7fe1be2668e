-- Latch read: the current generation and its count. Reads only.
--
-- KEYS[1]  the latch
--
-- Returns {'latch', generation id, count}, {'none'}, or {'corrupt', 1, what}. Reads only: it
-- goes as EVALSHA_RO where the server has it.
local gen, count = latch_state(KEYS[1])
if gen == nil then
    return corrupt()
end
if not gen then
    return {'none'}
end
return {'latch', gen, count}
