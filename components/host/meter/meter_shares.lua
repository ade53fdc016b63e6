-- The fair share of the engine's sequence slots among the API keys (docs/front-and-alerts.md,
-- "The fair share"). vLLM admits first come first served up to --max-num-seqs, so a key that
-- holds every slot with long streams makes everybody else wait for whole answers. Among the keys
-- active now (asked in the last ACTIVE_SECONDS, or hold a slot) each is sure of
-- capacity x weight / their weights (at least 1), and is admitted up to that even when the engine
-- is full. Beyond its share a key may take any slot but the headroom of every other active key:
-- as many slots as that key held at once lately (at least one) on top of what it holds, within
-- its share. vLLM cannot preempt a running stream: what another key will ask for must already be
-- free. Slots are sequences: a request weighs `n` x its prompts (meter_request.shape).
--
-- Several front pods (Kubernetes) each share their part of the slots, and the Service spreads a
-- key's connections among them at random, so a key within the whole stack's share can find one
-- pod's share of it too small. There, a key beyond the stack's share (what the other pods hold for
-- it, as of the last pull, included) keeps free for each other key the room the stack's share
-- leaves it, if larger than this pod's; a key within the stack's share keeps only this pod's
-- headroom of the others, so it takes a free slot beside a flood instead of waiting for it.
--
-- Pure Lua over a store with ngx.shared.DICT's get/set/incr (tests/test_meter_lua.py passes a
-- table): every worker shares the one dict, and admissions run under the meter's lock.
local M = {}

M.ACTIVE_SECONDS = 60

local Shares = {}
Shares.__index = Shares

--- `config`: {weights = {name = weight}, fair_share = bool, unshared = {names}}. `store`: the shared
--- dict. An unshared key (the gate's: one request at a time, in a deploy) is admitted as it comes
--- and keeps no slot free for itself: it takes no part in the shares. `stack`: the whole stack's
--- slots where several front pods share them (nil: this front's are all of them).
function M.new(store, config, stack)
  local unshared = {}
  for _, name in ipairs(config.unshared or {}) do
    unshared[name] = true
  end
  return setmetatable({
    store = store, weights = config.weights or {}, fair_share = config.fair_share ~= false, unshared = unshared,
    stack = stack,
  }, Shares)
end

function Shares:weight(name)
  return self.weights[name] or 1
end

function Shares:held(name)
  return self.store:get("held:" .. name) or 0
end

--- What the other front pods hold for `name`, as of the last pull (meter_peers.sum).
function Shares:elsewhere(name)
  return self.store:get("peers:held:" .. name) or 0
end

--- The keys the meter shares among: every configured key, and any other that holds or asked lately.
function Shares:names()
  local names, seen = {}, {}
  for name in pairs(self.weights) do
    names[#names + 1], seen[name] = name, true
  end
  for name in (self.store:get("names") or ""):gmatch("[^\n]+") do
    if not seen[name] then
      names[#names + 1], seen[name] = name, true
    end
  end
  table.sort(names)
  return names
end

function Shares:note_name(name)
  local names = self.store:get("names") or ""
  if not ("\n" .. names .. "\n"):find("\n" .. name .. "\n", 1, true) then
    self.store:set("names", names == "" and name or names .. "\n" .. name)
  end
end

function Shares:active(name, now)
  if self.unshared[name] then
    return false
  end
  return self:held(name) > 0 or now - (self.store:get("asked:" .. name) or -math.huge) < M.ACTIVE_SECONDS
end

--- The most slots `name` held at once lately: over the last one to two ACTIVE_SECONDS (the current
--- window and the one before, so an old burst is forgotten without a list).
function Shares:peak(name, now)
  local since = self.store:get("peak_since:" .. name) or -math.huge
  local current = self.store:get("peak:" .. name) or 0
  local previous = self.store:get("peak_before:" .. name) or 0
  local age = now - since
  if age >= 2 * M.ACTIVE_SECONDS then
    return 0
  end
  return age >= M.ACTIVE_SECONDS and current or math.max(current, previous)
end

function Shares:note_peak(name, held, now)
  local since = self.store:get("peak_since:" .. name) or -math.huge
  if now - since >= M.ACTIVE_SECONDS then
    local current = self.store:get("peak:" .. name) or 0
    self.store:set("peak_before:" .. name, now - since < 2 * M.ACTIVE_SECONDS and current or 0)
    self.store:set("peak:" .. name, 0)
    self.store:set("peak_since:" .. name, now)
  end
  if held > (self.store:get("peak:" .. name) or 0) then
    self.store:set("peak:" .. name, held)
  end
end

--- The keys, the active ones' weights summed and which are active: what every share of one
--- decision reads, weighed once (a share per key each weighing them was quadratic in the keys).
function Shares:weighing(now)
  local names, total, active = self:names(), 0, {}
  for _, name in ipairs(names) do
    if self:active(name, now) then
      active[name], total = true, total + self:weight(name)
    end
  end
  return names, total, active
end

local function share_of(self, name, capacity, total, active)
  local weight = self:weight(name)
  local others = total - (active[name] and weight or 0)
  return math.max(1, math.floor(capacity * weight / (weight + others)))
end

--- The slots `name` is sure of now: capacity x weight / weights of the active keys (its own
--- included), at least 1.
function Shares:share(name, capacity, now)
  local _, total, active = self:weighing(now)
  return share_of(self, name, capacity, total, active)
end

--- Every key's share of `capacity` now, the keys weighed once (the counters' glm_key_share).
function Shares:shares(capacity, now)
  local names, total, active = self:weighing(now)
  local shares = {}
  for _, name in ipairs(names) do
    shares[name] = share_of(self, name, capacity, total, active)
  end
  return shares
end

--- The free slots kept for an active `name` while another key is beyond its share; `stack_wide`:
--- for a key beyond the whole stack's share, which keeps the room the stack's share leaves `name`.
function Shares:headroom(name, capacity, now, stack_wide, total, active)
  local held = self:held(name)
  local room = share_of(self, name, capacity, total, active) - held
  if stack_wide and self.stack then
    room = math.max(room, share_of(self, name, self.stack, total, active) - held - self:elsewhere(name))
  end
  return math.max(0, math.min(room, math.max(self:peak(name, now), 1)))
end

--- Whether `weight` more slots for `name` fit now (asking makes it active); when not, also the
--- key's whole share now (what a request larger than it can never get).
function Shares:fits(name, weight, capacity, now)
  self.store:set("asked:" .. name, now)
  self:note_name(name)
  if capacity <= 0 or not self.fair_share or self.unshared[name] then
    return true
  end
  local names, total, active = self:weighing(now)
  local held = self:held(name)
  local whole = share_of(self, name, capacity, total, active)
  if held + weight <= whole then
    return true
  end
  local beyond_stack = self.stack and held + self:elsewhere(name) + weight > share_of(self, name, self.stack, total, active)
  local busy, kept = 0, 0
  for _, other in ipairs(names) do
    busy = busy + self:held(other)
    if other ~= name and active[other] then
      kept = kept + self:headroom(other, capacity, now, beyond_stack, total, active)
    end
  end
  if busy + weight + kept <= capacity then
    return true
  end
  return false, whole
end

--- Take `weight` slots for `name` if they fit; false and the key's whole share otherwise (the
--- caller waits or refuses).
function Shares:admit(name, weight, capacity, now)
  local fits, whole = self:fits(name, weight, capacity, now)
  if not fits then
    return false, whole
  end
  local held = self.store:incr("held:" .. name, weight, 0)
  self:note_peak(name, held, now)
  return true
end

function Shares:release(name, weight)
  self.store:incr("held:" .. name, -weight, 0)
end

return M
