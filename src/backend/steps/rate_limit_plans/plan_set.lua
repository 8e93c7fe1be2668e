-- A stored plan set: one hash of the plans of a rate limit, read whole, written change by
-- change, each write counting the `version` field up.
--
-- The kind of KEYS[1], and its version: {'corrupt', 1, what} when it holds another type, or a
-- version that is no count.
local function plan_set()
    local kind, why = kind_of(KEYS[1], 'hash', 'the plan set key', 'hash')
    if kind ~= 'hash' then
        return kind, kind and 0 or {'corrupt', 1, why}
    end
    local version = redis.call('HGET', KEYS[1], 'version') or '0'
    -- Digits only: tonumber would take '1e2', ' 5' or '0x10', which HINCRBY then refuses.
    if not string.match(version, '^%d+$') or #version > 15 then
        return nil, {'corrupt', 1, 'the plan set version is not a count'}
    end
    return 'hash', tonumber(version)
end

-- For a read: {'none'} when there is no plan set, {'corrupt', 1, what} when KEYS[1] is not
-- one; nil when there is one to read.
local function nothing_to_read()
    local kind, problem = plan_set()
    if kind == nil then
        return problem
    end
    if kind == 'none' then
        return {'none'}
    end
    return nil
end
