-- A leaving front pod (Kubernetes; docs/scaling.md "Usage, exact across pods"): its drain, and its
-- counts handed to a front pod that stays. Each pod's counters are its own series, and a pod that
-- left has none now: the usage table, which sums the series as they are now, would lose all it
-- counted. So once its last request is done and scraped (its preStop,
-- components/kubernetes/front.py), a leaving pod sends its totals (what it counted and what it
-- inherited) to one pod alive that is not leaving. That pod keeps them apart from its own counts
-- ("inherited_<counter>:<from>:") and shows them as glm_key_inherited_*{from="<the leaving pod>"}:
-- the usage table adds them once the leaving pod's own series are gone (it waits a scrape after the
-- handoff, so Prometheus reads them before), and never both (components/render/usage_queries.py);
-- rates read the pods' own series only, since the inherited ones jump by a whole pod's history.
--
-- Once: the heir remembers who it inherited from, so a second send is not a second count. A send
-- whose answer never came may have counted: it is not sent again elsewhere, and the log says so.
local cjson = require("cjson.safe")
local peers = require("meter_peers")

local M = {}

M.PATH = "/meter/inherit"
M.COUNTERS = { "prompt", "completion", "cached" }
-- The token counters the usage table shows; beside them, the requests by status and the last seen.
local TIMEOUT_MS = 1000
local REMEMBERED_SECONDS = 3600
-- How long an heir remembers a pod it inherited from (a send is retried within seconds).

local function counter_of(family)
  for _, counter in ipairs(M.COUNTERS) do
    if family == counter then
      return counter
    end
  end
  return nil
end

--- What this pod would hand over now, by key name: `requests` by status, each token counter, and
--- `seen` (the last request's time), its own counts and those it inherited added.
function M.totals(dict)
  local totals = {}
  local function of(name)
    totals[name] = totals[name] or { requests = {} }
    return totals[name]
  end
  for _, key in ipairs(dict:get_keys(0)) do
    local family, rest = key:match("^([%a_]+):(.+)$")
    local own = family and (family:gsub("^inherited_", ""))
    if family and own ~= family then -- inherited: "<from>:<the rest as its own counter has it>"
      rest = rest:match("^[^:]+:(.+)$")
    end
    local value = family and rest and dict:get(key) or 0
    if own == "requests" then
      local name, status = rest:match("^(.+):(%d+)$")
      if name then
        local requests = of(name).requests
        requests[status] = (requests[status] or 0) + value
      end
    elseif counter_of(own) then
      local entry = of(rest)
      entry[own] = (entry[own] or 0) + value
    elseif family == "seen" then
      local entry = of(rest)
      entry.seen = math.max(entry.seen or 0, value)
    end
  end
  return totals
end

--- A leaving pod's `totals` (M.totals of `from`), kept apart from this pod's own counts. `note_name`:
--- how the meter learns a key name it has not seen (meter_shares.note_name), so its series show.
--- Returns whether they are counted now and what happened.
function M.inherit(dict, from, totals, note_name)
  if type(from) ~= "string" or not from:match("^[^:\"\\\n]+$") or type(totals) ~= "table" then
    return false, "not a handoff"
  end
  local tag = ":" .. from .. ":" -- the key names the pod it came from
  if dict:get("handed_from:" .. from) then
    return true, "already inherited from " .. from
  end
  local names = 0
  for name, entry in pairs(totals) do
    if type(name) == "string" and name ~= "" and type(entry) == "table" then
      for status, count in pairs(type(entry.requests) == "table" and entry.requests or {}) do
        if tostring(status):match("^%d+$") and tonumber(count) then
          dict:incr("inherited_requests" .. tag .. name .. ":" .. status, tonumber(count), 0)
        end
      end
      for _, counter in ipairs(M.COUNTERS) do
        if tonumber(entry[counter]) then
          dict:incr("inherited_" .. counter .. tag .. name, tonumber(entry[counter]), 0)
        end
      end
      if tonumber(entry.seen) and tonumber(entry.seen) > (dict:get("seen:" .. name) or 0) then
        dict:set("seen:" .. name, tonumber(entry.seen))
      end
      note_name(name)
      names = names + 1
    end
  end
  dict:set("handed_from:" .. from, true, REMEMBERED_SECONDS)
  return true, string.format("inherited %d keys' counts from %s", names, from)
end

-- One send: the heir's HTTP status, or nil with why and whether the heir may have counted it.
local function post(address, body)
  local response, err, maybe = peers.exchange(address, table.concat({
    "POST ", M.PATH, " HTTP/1.0\r\nHost: glm53-front-peers\r\nContent-Type: application/json\r\n",
    "Content-Length: ", #body, "\r\n\r\n", body,
  }), TIMEOUT_MS)
  if not response then
    return nil, err, maybe
  end
  return tonumber(response:match("^HTTP/%d%.%d (%d+)")), nil, false
end

--- Hands this pod's totals to the first of `heirs` ({name, address}: meter_peers.heirs) that takes
--- them. Returns whether one did, what happened (for the log), and whether none can have counted
--- them (so they may be sent again).
function M.hand_off(dict, me, heirs)
  local body = cjson.encode({ from = me.name, totals = M.totals(dict) })
  local tried = {}
  for _, heir in ipairs(heirs) do
    local status, err, maybe = post(heir.address, body)
    if status == 200 then
      return true, "handed its counts to " .. heir.name, false
    end
    if maybe then
      return false, heir.name .. " may or may not have counted them (" .. err .. "): not sent again", false
    end
    tried[#tried + 1] = heir.name .. " (" .. (err or ("HTTP " .. tostring(status))) .. ")"
  end
  if #tried == 0 then
    return false, "no front pod alive that is not leaving: the usage table loses this pod's counts", true
  end
  return false, "no front pod took them: " .. table.concat(tried, ", "), true
end

M.TRY_SECONDS = 4
-- How long a leaving pod tries again, each pull, while no pod took its counts and none can have:
-- a pod's liveness lapses after 2 s without a pull (a busy node), and the preStop waits 5 s.

local function exists(path)
  local file = path and io.open(path, "r")
  if file then
    file:close()
  end
  return file ~= nil
end

--- Draining (the pod's preStop wrote `drain_file`): the pod is leaving (it takes no counts now), and
--- once no request is in flight (meter.lua's "flight:" entries) it says so (drain_file .. ".done"),
--- so the preStop lets the stack's Prometheus read the final counts (components/kubernetes/front.py).
function M.drain(dict, drain_file)
  if not exists(drain_file) then
    return
  end
  dict:set("leaving", true)
  for _, key in ipairs(dict:get_keys(0)) do
    if key:find("^flight:") then
      return
    end
  end
  local done = io.open(drain_file .. ".done", "w")
  if done then
    done:close()
  end
end

--- Then, its final counts scraped, the preStop asks (drain_file .. ".handoff") that they go to a pod
--- that stays, and waits for what happened (".handoff.done"): once, or each pull for TRY_SECONDS
--- while none can have counted them. `heirs_of`: meter_peers.heirs.
function M.when_asked(dict, me, drain_file, heirs_of, now)
  local marker = drain_file .. ".handoff"
  if dict:get("handed_off") or not exists(marker) then
    return
  end
  dict:add("handoff_since", now)
  local done, said, again = M.hand_off(dict, me, heirs_of(dict))
  if again and now - dict:get("handoff_since") < M.TRY_SECONDS then
    return
  end
  dict:set("handed_off", true)
  ngx.log(done and ngx.NOTICE or ngx.ERR, "usage meter: ", me.name, " ", said)
  local file = io.open(marker .. ".done", "w")
  if file then
    file:write(said, "\n")
    file:close()
  end
end

--- The heir's side, on the status port: counts from a front pod alive only (`from_peer`), and none
--- while this pod is leaving itself (the sender tries another).
function M.serve(dict, from_peer, note_name)
  if not from_peer then
    return ngx.exit(403)
  end
  if dict:get("leaving") then
    return ngx.exit(409)
  end
  ngx.req.read_body()
  local sent = cjson.decode(ngx.req.get_body_data() or "")
  sent = type(sent) == "table" and sent or {}
  local ok, said = M.inherit(dict, sent.from, sent.totals, note_name)
  ngx.log(ok and ngx.NOTICE or ngx.ERR, "usage meter: ", said)
  if not ok then
    return ngx.exit(400)
  end
  ngx.say(said)
end

return M
