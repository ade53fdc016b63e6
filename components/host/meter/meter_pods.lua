-- The serving pods a Kubernetes front routes to (docs/scaling.md "The meter on Kubernetes").
--
-- The Service picks a pod at random for each connection it opens, whatever that pod already runs:
-- two front pods each sending their share of the slots could put ten sequences on a pod that runs
-- eight while the other pod idles, and a key's request waits behind another key's flood inside the
-- engine, where the fair share cannot reach. So each front pod's `routes` lister
-- (components/host/k8s_targets.py --routes) writes the pods a request may go to now (Ready, not
-- being deleted) into a file, every worker reads it every READ_SECONDS, and the meter chooses the pod
-- of each request as it chooses a Docker host's replica (meter_route.lua); the `glm_pods` upstream's
-- balancer sends the request there. A file older than STALE_SECONDS (the lister stopped, the API
-- server is away) routes nothing: requests go to the Service, as before.
local M = {}

M.UPSTREAM = "glm_pods"
-- The upstream block whose balancer sends a request to its pod (components/render/nginx_meter.py).
M.READ_SECONDS = 0.25
M.STALE_SECONDS = 10

local seen = { written = 0, names = {}, address = {} }

--- The routes file's text as (written, names, address by name): its first line `written <unix
--- time>`, then `<pod> <host>:<port>` lines. The names sorted (the lister writes them so; sorted here
--- once per read all the same): each front's part of a pod is told by the pod's place among them
--- (meter_replicas.room). Nil when the text is not such a file.
function M.parse(text)
  local written = tonumber((text or ""):match("^written ([%d.]+)\n"))
  if not written then
    return nil
  end
  local names, address = {}, {}
  for name, where in text:gmatch("\n(%S+) (%S+)") do
    names[#names + 1] = name
    address[name] = where
  end
  table.sort(names)
  return written, names, address
end

--- Read `path` into this worker's view; a file that cannot be read or parsed leaves the view as it was.
function M.refresh(path)
  local file = io.open(path, "rb")
  if not file then
    return
  end
  local text = file:read("*a")
  file:close()
  local written, names, address = M.parse(text)
  if written then
    seen = { written = written, names = names, address = address }
  end
end

--- The pods a request may go to now, or none while the file is stale (the Service routes).
function M.names(now)
  if now - seen.written > M.STALE_SECONDS then
    return {}
  end
  return seen.names
end

--- Start reading `path` in this worker.
function M.start(path)
  M.refresh(path)
  ngx.timer.every(M.READ_SECONDS, function(premature)
    if not premature then
      M.refresh(path)
    end
  end)
end

--- The host and port of `where` ("10.0.0.7:8000", "[fd00::7]:8000").
local function split(where)
  local host, port = where:match("^%[(.+)%]:(%d+)$")
  if not host then
    host, port = where:match("^(.+):(%d+)$")
  end
  return host, tonumber(port)
end

--- The balancer: the request's pod (`ctx.replica`, the meter's choice) on its first try; on a retry
--- (that pod refused the connection, or closed it unanswered: its guard's verdict failed), the pod
--- with the fewest requests in flight (`load(name)`) not tried yet. `tries`: the most tries of a request.
function M.balance(ctx, load, tries)
  local balancer = require("ngx.balancer")
  ctx.tried = ctx.tried or {}
  local name = not ctx.tried[ctx.replica] and ctx.replica or nil
  if not name then
    for _, other in ipairs(M.names(ngx.now())) do
      if not ctx.tried[other] and (not name or (load(other) or 0) < (load(name) or 0)) then
        name = other
      end
    end
  end
  local where = name and seen.address[name]
  if not where then
    return ngx.exit(502) -- every pod tried: nginx answers the front's 502
  end
  if not next(ctx.tried) then
    balancer.set_more_tries(math.max(0, math.min(#M.names(ngx.now()), tries) - 1))
  end
  ctx.tried[name] = true
  local host, port = split(where)
  local ok, err = balancer.set_current_peer(host, port)
  if not ok then
    ngx.log(ngx.ERR, "usage meter: pod ", name, " at ", where, ": ", err)
    return ngx.exit(502)
  end
end

return M
