-- Read-write lease renew: gives the lease held under the owner token, read or write, a new
-- deadline counted from now on the server clock. Only this holder's entry is touched; a
-- lease it no longer finds is not recreated.
--
-- KEYS[1]  the lease set
-- ARGV[1]  the lease's owner token
-- ARGV[2]  the new lease in milliseconds (1 ..= 2^40)
--
-- Returns {'renewed'}, {'not_owner'} (gone: expired, released, or never granted), or
--         {'corrupt', 1, what} (nothing changed).
local answer, now, member, kind = own_entry()
if answer then
    return answer
end
local deadline = now + tonumber(ARGV[2])
if kind == 'w' then
    deadline = -deadline
end
put(digits(deadline), member, 'XX')
settle(now)
return {'renewed'}
