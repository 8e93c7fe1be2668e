-- Fenced lock: helpers shared by its scripts, which are appended to this file.
--
-- The lease key is a string holding its owner's token, with a PX expiry; the counter key is
-- a string of decimal digits without expiry. Every script replies with a table whose first
-- element names the outcome; {'corrupt', i, what} means KEYS[i] holds something else, and the
-- script changed nothing.

-- The owner token stored in the lease key: false when there is no lease; nil and why when
-- the key holds something other than a string.
local function lease_owner(key)
    local kind, why = kind_of(key, 'string', 'the lease key', 'lease')
    if kind ~= 'string' then
        return kind and false, why
    end
    return redis.call('GET', key)
end

local function corrupt_lease(why)
    return {'corrupt', 1, why}
end
