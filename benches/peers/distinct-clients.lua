-- wrk script of the deny-distinct mode: each request names the next of 100,000 clients.
local client = 0
request = function()
    client = (client + 1) % 100000
    return wrk.format("GET", "/", { ["x-client"] = tostring(client) })
end
