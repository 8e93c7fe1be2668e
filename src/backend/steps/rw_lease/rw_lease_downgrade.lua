-- Read-write lease downgrade: turns the owner token's write lease into a read lease with the
-- same deadline, in one step, so that no other writer can come in between. Readers may join
-- from then on: admitted readers at once, new ones unless a writer waits.
--
-- KEYS[1]  the lease set
-- ARGV[1]  the lease's owner token
--
-- Returns {'downgraded'}, {'already_read'} (it holds a read lease: an earlier downgrade
--         whose answer was lost applied), {'not_owner'} (gone), or {'corrupt', 1, what}.
local answer, now, member, kind, deadline = own_entry()
if answer then
    return answer
end
if kind == 'r' then
    return {'already_read'}
end
-- The read entry first: removed first, the writer's could be the set's last member.
put(digits(deadline), 'r:' .. ARGV[1])
remove(member)
settle(now)
return {'downgraded'}
