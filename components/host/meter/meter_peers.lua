-- The front's pods, one account (Kubernetes: glm:target.kubernetes.frontReplicas; docs/scaling.md
-- "The meter on Kubernetes"). Each pod meters what it serves; what a key may still spend is the
-- whole stack's, so every pod tells the others what each key used of its budget windows, and the
-- pods share the engine's slots among those that are alive.
--
-- Pull, every INTERVAL seconds, in one worker: from the pods already known (their own address) and
-- from the pods' Service (any pod: how a new pod finds the others, with no API access and no DNS).
-- A report carries every pod the reporter knows, each with its own version (its clock in ms), so
-- what a pod used reaches every other even after it is gone: a deleted pod's day still counts.
-- Admissions read their own windows (exact) plus the others' sums ("peers:<window>"), as of the
-- last pull: across pods, a key can pass its limit by what it was admitted on other pods within
-- one pull (INTERVAL plus a round trip), never by a factor of the pods.
local cjson = require("cjson.safe")

local M = {}

M.INTERVAL = 0.25
local LIVE_SECONDS = 2
-- A pod that answered within this long is alive: its share of the engine's slots is its own.
local FORGET_SECONDS = 30
-- A pod unreachable this long is no longer asked (its windows stay until they end).
local KEPT_SECONDS = 2 * 86400
local TIMEOUT_MS = 300
local WINDOW = "^budget_[a-z]+:"

local function read_file(path)
  local file = io.open(path, "r")
  if not file then
    return nil
  end
  local text = file:read("*a")
  file:close()
  return text
end

--- This pod: its name (the hostname Kubernetes sets) and its address (the pod's IP, which the
--- kubelet writes into /etc/hosts beside the hostname), with the status `port`.
function M.self(port, root)
  root = root or ""
  local name = (read_file(root .. "/etc/hostname") or ""):match("^%s*(%S+)")
  if not name then
    return nil
  end
  for line in (read_file(root .. "/etc/hosts") or ""):gmatch("[^\n]+") do
    local address, names = line:match("^%s*([%d%.]+)%s+(.+)$")
    if address and address ~= "127.0.0.1" and (" " .. names .. " "):find(" " .. name .. " ", 1, true) then
      return { name = name, address = address .. ":" .. port }
    end
  end
  return { name = name, address = nil }
end

local function origins(dict)
  return cjson.decode(dict:get("peer_origins") or "[]") or {}
end

--- What this pod tells the others: itself (version, address, its windows, whether it is leaving:
--- its preStop began, dict "leaving") and every pod it knows.
function M.report(dict, me, now)
  local windows, held = {}, {}
  for _, key in ipairs(dict:get_keys(0)) do
    if key:find(WINDOW) then
      windows[key] = dict:get(key)
    elseif key:find("^held:") then
      local slots = dict:get(key) or 0
      if slots > 0 then
        held[key:sub(6)] = slots
      end
    end
  end
  local fronts = {}
  for _, origin in ipairs(origins(dict)) do
    fronts[origin] = cjson.decode(dict:get("peer:" .. origin) or "null") or nil
  end
  fronts[me.name] = {
    v = math.floor(now * 1000), address = me.address, windows = windows, held = held,
    leaving = dict:get("leaving") or nil,
  }
  return cjson.encode({ origin = me.name, fronts = fronts })
end

--- A report read into the dict: newer versions of the pods it names, and its sender alive.
function M.merge(dict, me, report)
  if type(report) ~= "table" or type(report.fronts) ~= "table" then
    return false
  end
  local known, changed = {}, false
  for _, origin in ipairs(origins(dict)) do
    known[origin] = true
  end
  for origin, entry in pairs(report.fronts) do
    if origin ~= me.name and type(entry) == "table" and tonumber(entry.v)
        and entry.v > (dict:get("peer_v:" .. origin) or 0) then
      dict:set("peer:" .. origin, cjson.encode(entry), KEPT_SECONDS)
      dict:set("peer_v:" .. origin, entry.v, KEPT_SECONDS)
      -- A pod another one relays is asked by its address too: a new pod knows a leaving one (out
      -- of the Service) by then, and takes its counts (meter_handoff). A gone pod's version stops
      -- rising, so its address is not renewed and goes after FORGET_SECONDS.
      if type(entry.address) == "string" and not dict:get("peer_addr:" .. origin) then
        dict:set("peer_addr:" .. origin, entry.address, FORGET_SECONDS)
      end
      if not known[origin] then
        known[origin], changed = true, true
      end
    end
  end
  local sender = report.origin
  if type(sender) == "string" and sender ~= me.name and type(report.fronts[sender]) == "table" then
    dict:set("peer_live:" .. sender, true, LIVE_SECONDS)
    if type(report.fronts[sender].address) == "string" then
      dict:set("peer_addr:" .. sender, report.fronts[sender].address, FORGET_SECONDS)
    end
  end
  if changed then
    local list = {}
    for origin in pairs(known) do
      list[#list + 1] = origin
    end
    table.sort(list)
    dict:set("peer_origins", cjson.encode(list))
  end
  return true
end

--- The other pods' use of each window, and the slots the pods alive hold for each key ("held:<key>",
--- meter_shares.elsewhere), summed where admissions read them. `previous`: the sums of last time (a
--- pod's window that ended, or a key no pod holds a slot for now, is set to 0, not left at its last
--- sum). The slots held expire with the pods' liveness, should the pulls stop.
function M.sum(dict, previous, minute_seconds)
  local sums = {}
  for _, origin in ipairs(origins(dict)) do
    local entry = cjson.decode(dict:get("peer:" .. origin) or "null")
    if type(entry) == "table" and type(entry.windows) == "table" then
      for key, used in pairs(entry.windows) do
        if tonumber(used) then
          sums[key] = (sums[key] or 0) + used
        end
      end
    end
    if type(entry) == "table" and type(entry.held) == "table" and dict:get("peer_live:" .. origin) then
      for name, held in pairs(entry.held) do
        if tonumber(held) then
          sums["held:" .. name] = (sums["held:" .. name] or 0) + held
        end
      end
    end
  end
  for key in pairs(previous or {}) do
    sums[key] = sums[key] or 0
  end
  for key, used in pairs(sums) do
    local ttl = key:find("^held:") and LIVE_SECONDS or 2 * (key:find("^budget_day:") and 86400 or minute_seconds)
    dict:set("peers:" .. key, used, ttl)
  end
  return sums
end

--- How many front pods share the engine's slots now (this one and those alive), and this pod's place
--- among them by name (0: the first): how the pods split each serving pod's slots (meter_replicas).
function M.alive(dict, my_name)
  local count, place = 1, 0
  for _, origin in ipairs(origins(dict)) do
    if dict:get("peer_live:" .. origin) then
      count = count + 1
      if my_name and origin < my_name then
        place = place + 1
      end
    end
  end
  return count, place
end

--- The pods a leaving pod may hand its counts to (meter_handoff): alive, not leaving, by name.
function M.heirs(dict)
  local heirs = {}
  for _, origin in ipairs(origins(dict)) do
    local entry = cjson.decode(dict:get("peer:" .. origin) or "null")
    local address = dict:get("peer_addr:" .. origin)
    if dict:get("peer_live:" .. origin) and address and type(entry) == "table" and not entry.leaving then
      heirs[#heirs + 1] = { name = origin, address = address }
    end
  end
  return heirs
end

--- Whether `ip` is the address of a front pod alive (what may hand this pod its counts).
function M.is_peer(dict, ip)
  for _, origin in ipairs(origins(dict)) do
    local address = dict:get("peer_live:" .. origin) and dict:get("peer_addr:" .. origin)
    if address and address:match("^(.+):%d+$") == ip then
      return true
    end
  end
  return false
end

--- One HTTP/1.0 exchange with another front pod's status port at `address` (host:port): its whole
--- response, or nil, why, and whether the request was sent whole (the pod may have acted on it).
function M.exchange(address, request, timeout_ms)
  local host, port = address:match("^(.+):(%d+)$")
  if not host then
    return nil, "no address", false
  end
  local socket = ngx.socket.tcp()
  socket:settimeout(timeout_ms)
  local ok, err = socket:connect(host, tonumber(port))
  if not ok then
    return nil, "cannot connect: " .. tostring(err), false
  end
  ok, err = socket:send(request)
  if not ok then -- a request cut short is never read whole
    socket:close()
    return nil, "cannot send: " .. tostring(err), false
  end
  local response
  response, err = socket:receive("*a")
  socket:close()
  if not response then
    return nil, "no answer: " .. tostring(err), true
  end
  return response
end

local function fetch(address)
  local response = M.exchange(address, "GET /meter/peers HTTP/1.0\r\nHost: glm53-front-peers\r\n\r\n", TIMEOUT_MS)
  return cjson.decode((response or ""):match("\r\n\r\n(.*)$") or "")
end

--- One pull: the pods' Service, then every pod known by its address; then the sums.
function M.pull(dict, me, discovery, previous, minute_seconds)
  local asked = {}
  for _, origin in ipairs(origins(dict)) do
    local address = dict:get("peer_addr:" .. origin)
    if address and not asked[address] then
      asked[address] = true
      M.merge(dict, me, fetch(address))
    end
  end
  if discovery then
    M.merge(dict, me, fetch(discovery))
  end
  return M.sum(dict, previous, minute_seconds)
end

return M
