-- Which replica a request goes to, and what each one runs (docs/scaling.md, "Prefix affinity" and
-- "The meter on Kubernetes"). The replicas are a Docker front's rotation ($glm_routes, which
-- templates/rotation.sh writes) or a Kubernetes front's serving pods Ready now (meter_pods.lua);
-- meter_route.lua picks among them, the conversation's with prefix affinity, else the least loaded.
-- Every request routed is counted in flight on its replica until it ends ("inflight:<replica>"),
-- and per worker, so a worker that dies gives its requests back (meter.lua's reclaim).
local route = require("meter_route")
local serving_pods = require("meter_pods")
local peers = require("meter_peers")

local M = {}

--- How many replicas serve now: a Kubernetes front's pods in its routes file (while fresh and not
--- empty), else what the rotation wrote ($replicas_in_rotation; the configured count on Kubernetes).
function M.in_rotation(routing)
  if routing and routing.pods_file then
    local ready = #serving_pods.names(ngx.now())
    if ready > 0 then
      return ready
    end
  end
  return tonumber(ngx.var.replicas_in_rotation) or 1
end

local function names_now(routing)
  if routing.pods_file then
    return serving_pods.names(ngx.now())
  end
  return route.names(ngx.var.glm_routes)
end

local function loads(dict)
  return function(name)
    return dict:get("inflight:" .. name)
  end
end

--- This front's part of the `index`th serving pod's `slots` (0-based, the pods by name), where `fronts`
--- front pods share them and this one is at `place` among them: the quotient, and one more for as
--- many fronts as the remainder, the pods' remainders dealt round the fronts in turn. So the parts
--- of one pod add up to its slots exactly (each front choosing alone never sends a pod more than it
--- runs), and each front's parts of all the pods are its share of the whole, within one.
function M.room(slots, fronts, place, index)
  local extra = slots % fronts
  local room = math.floor(slots / fronts)
  if (place - index * extra) % fronts < extra then
    room = room + 1
  end
  return room
end

local function place_of(dict, config)
  if not config.peers then
    return 1, 0
  end
  return peers.alive(dict, config.me and config.me.name)
end

--- This front's part of the slots of `pods` serving pods: the sum of its parts of each (M.room).
function M.front_part(dict, config, pods)
  local fronts, place = place_of(dict, config)
  local part = 0
  for index = 0, pods - 1 do
    part = part + M.room(config.slots, fronts, place, index)
  end
  return part
end

-- A Kubernetes front's pods with room: fewer of this front's requests in flight than its part of the
-- pod's slots (M.room). Several front pods each choose alone; without this, two of them could send
-- a pod more sequences than it runs while another pod idles, and a request would wait inside the
-- engine behind another key's, where the fair share cannot reach. None with room: all of them (the
-- least loaded is chosen).
local function with_room(dict, config, names)
  if not config.routing.pods_file then
    return names
  end
  local fronts, place = place_of(dict, config)
  local open = {}
  for index, name in ipairs(names) do -- sorted by name (meter_pods.parse)
    if (dict:get("inflight:" .. name) or 0) < M.room(config.slots, fronts, place, index - 1) then
      open[#open + 1] = name
    end
  end
  return #open > 0 and open or names
end

--- The replica of a request with these `fields` (and body's first bytes, `head`), counted in flight
--- on it, and the upstream that reaches it (a Docker replica's group, or the pods' balancer), which
--- the location's proxy_pass reads from $glm_upstream. Nil: none in rotation (upstream vllm answers
--- the rotation's 503, or the Service picks the pod).
function M.choose(dict, config, fields, head)
  local routing = config.routing
  local key = routing.keyed ~= false and route.key(fields, head) or nil
  local replica = route.choose(with_room(dict, config, names_now(routing)), key, loads(dict), routing.load_factor)
  if not replica then
    return nil
  end
  dict:incr("inflight:" .. replica, 1, 0)
  dict:incr("routed_pid:" .. ngx.worker.pid() .. ":" .. replica, 1, 0)
  dict:incr("routed:" .. replica .. ":" .. (key and "key" or "none"), 1, 0)
  return replica, routing.pods_file and serving_pods.UPSTREAM or route.PREFIX .. replica
end

--- The request on `replica` ended.
function M.release(dict, replica)
  dict:incr("inflight:" .. replica, -1, 0)
  dict:incr("routed_pid:" .. ngx.worker.pid() .. ":" .. replica, -1, 0)
end

M.FORGET_SECONDS = 600
-- A serving pod absent from the routes file this long, with nothing in flight, is forgotten: its
-- in-flight gauge and routed counters leave the front's metrics, so a front that lives through many
-- rolls does not keep every pod it ever routed to. Long enough for Prometheus to read their last
-- values, and for a pod out of rotation a while (a failed gate, a restart) to keep its counts.
-- Pod names never come back, so nothing counts twice.

--- Forget the replicas not in `names` (a fresh routes file's) for FORGET_SECONDS with none in flight.
function M.forget_gone(dict, names, now)
  local listed = {}
  for _, name in ipairs(names) do
    listed[name] = true
    dict:delete("gone:" .. name)
  end
  local forgotten = {}
  for _, key in ipairs(dict:get_keys(0)) do
    local name = key:match("^inflight:(.+)$")
    if name and not listed[name] then
      local since = dict:get("gone:" .. name)
      if not since then
        dict:set("gone:" .. name, now)
      elseif now - since >= M.FORGET_SECONDS and (dict:get(key) or 0) <= 0 then
        forgotten[name] = true
      end
    end
  end
  if not next(forgotten) then
    return
  end
  for _, key in ipairs(dict:get_keys(0)) do
    local name = key:match("^inflight:(.+)$") or key:match("^gone:(.+)$") or key:match("^routed:(.+):%a+$")
      or key:match("^routed_pid:%d+:(.+)$")
    if name and forgotten[name] then
      dict:delete(key)
    end
  end
end

--- The `glm_pods` upstream's balancer (a Kubernetes front): the request's pod, another on a retry.
function M.balance(dict, routing, ctx)
  serving_pods.balance(ctx, loads(dict), routing.tries)
end

return M
