-- What refuses a step before it reads anything, for the scripts whose primitive's helpers
-- define corrupt(): put after those helpers by `script!`.

-- The server's clock now (ms) and its TIME reply, then what refuses the step: {'late'} once
-- its deadline (ARGV as given; nil or '0': none) has passed, else what corrupt() finds
-- (nil: nothing).
local function first_checks(deadline)
    local now, time = now_ms()
    if deadline and past(deadline, now) then
        return now, time, {'late'}
    end
    return now, time, corrupt()
end

