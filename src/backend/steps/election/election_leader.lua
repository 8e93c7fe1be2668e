-- Election leader: who leads now, as a step of no candidate sees it. Changes nothing (a
-- leader whose lease ran out is nobody's until a candidate's step promotes the next).
--
-- KEYS[1..4] as election.lua says
--
-- Returns {'other', term, value, ttl_ms}, {'none'}, or {'corrupt', i, what}.
local refused = corrupt()
if refused then
    return refused
end
local now = now_ms()
return leader_reply(current(now, nil), nil, now)
