-- A stored plan set: one hash of the plans of a rate limit, read whole, written change by
-- change, each write counting the `version` field up.
--
-- The kind of KEYS[1], and its version: {'corrupt', 1, what} when it holds another type, or a
-- version that is no count.
local function plan_set()
    local kind = redis.call('TYPE', KEYS[1])['ok']
    if kind == 'none' then
        return 'none', 0
    end
    if kind ~= 'hash' then
        return nil, {'corrupt', 1, 'the plan set key holds a ' .. kind .. ', not a hash'}
    end
    local version = redis.call('HGET', KEYS[1], 'version') or '0'
    -- Digits only: tonumber would take '1e2', ' 5' or '0x10', which HINCRBY then refuses.
    if not string.match(version, '^%d+$') or #version > 15 then
        return nil, {'corrupt', 1, 'the plan set version is not a count'}
    end
    return 'hash', tonumber(version)
end
