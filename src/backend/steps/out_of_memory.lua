-- Out of memory: the guard a script runs before its first write when it must not grow the
-- data set while the server is out of memory (`maxmemory` under `noeviction`). Placed after
-- a script's own helpers, before its body.

-- Refuses the script with the server's OOM error when it is out of memory, and changes
-- nothing: ZADD XX of a member that never exists adds nothing to `key` (a sorted set, or no
-- key), yet is refused there as every command that may grow memory is. It must come before
-- the script's first write, since any write lets the script's later ones past the refusal.
local function refuse_when_out_of_memory(key)
    redis.call('ZADD', key, 'XX', 0, 'out-of-memory guard')
end
