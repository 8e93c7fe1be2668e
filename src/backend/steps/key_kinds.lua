-- Key kinds: the type checks a step runs on its keys before it reads anything.

-- The type of `key`: 'none' when it is absent, `want` when it holds one; otherwise nil and
-- the corrupt reply's text, "<role> holds a <type>, not a <what>".
local function kind_of(key, want, role, what)
    local kind = redis.call('TYPE', key)['ok']
    if kind == 'none' or kind == want then
        return kind
    end
    return nil, role .. ' holds a ' .. kind .. ', not a ' .. what
end

-- {'corrupt', i, what} for the first KEYS[i] (i up to #kinds) that holds another type than
-- kinds[i] (roles[i] names the key in the reply); nil when every key is absent or of its
-- kind.
local function wrong_kind(kinds, roles)
    for i = 1, math.min(#KEYS, #kinds) do
        local kind, why = kind_of(KEYS[i], kinds[i], roles[i], kinds[i])
        if not kind then
            return {'corrupt', i, why}
        end
    end
    return nil
end
