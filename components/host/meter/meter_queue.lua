-- The meter's lock, and each key's queue for the engine's slots (docs/front-and-alerts.md, "The
-- fair share"). An admission reads every key's slots and takes some, in any worker, so it runs
-- under one lock in the shared dict. Within a key, first come, first served, as vLLM's own queue
-- orders them: each request takes a ticket, and only the key's oldest waiting ticket may take a
-- slot of the key's fair share (meter_shares.lua), for at most glm:front.usageMeter.queueSeconds.
local M = {}

M.WAIT_STEP_SECONDS = 0.005

--- Take the lock (at most ~2 s of tries; it expires after 0.1 s if its holder died). False: not had.
function M.lock(dict)
  for _ = 1, 2000 do
    if dict:add("lock", ngx.worker.pid(), 0.1) then
      return true
    end
    ngx.sleep(0.001)
  end
  return false
end

function M.unlock(dict)
  dict:delete("lock")
end

-- A ticket's entries go once its turn has passed: only the waiting tickets' stay in the dict, which
-- the counters share (a flood's stamps, kept their minute, had filled it towards evicting them).
local function forget(dict, name, ticket)
  dict:delete("issued:" .. name .. ":" .. ticket)
  dict:delete("abandoned:" .. name .. ":" .. ticket)
end

-- The ticket whose turn it is (under the lock). A ticket given up is skipped; so is one older than
-- any request waits (its holder's deadline passed: its worker died).
local function turn(dict, name, now, queue_seconds)
  local head = dict:get("turn:" .. name) or 1
  local last = dict:get("ticket:" .. name) or 0
  while head <= last do
    local issued = dict:get("issued:" .. name .. ":" .. head)
    if not dict:get("abandoned:" .. name .. ":" .. head) and issued and now - issued <= queue_seconds + 1 then
      break
    end
    forget(dict, name, head)
    head = head + 1
  end
  dict:set("turn:" .. name, head)
  return head
end

local function pass_turn(dict, name, ticket)
  forget(dict, name, ticket)
  dict:set("turn:" .. name, ticket + 1)
end

-- Under the lock. A ticket whose turn already passed (skipped as stale while its worker stalled)
-- has nothing left to mark.
local function give_up(dict, name, ticket, queue_seconds)
  local head = dict:get("turn:" .. name) or 1
  if head == ticket then
    pass_turn(dict, name, ticket)
  elseif head < ticket then
    dict:set("abandoned:" .. name .. ":" .. ticket, true, queue_seconds + 60)
  end
end

--- Wait for `weight` of key `name`'s slots out of `capacity`, its turn first. Returns "admitted";
--- "stuck" (the lock could not be had: the meter is stuck, not the request, which passes on); or
--- "refused" and the key's whole share then (the request is larger than it, or waited queue_seconds).
function M.wait(dict, share, name, weight, capacity, queue_seconds)
  -- Issued under the lock: a ticket counted but not yet stamped looked abandoned to another worker's
  -- turn(), which skipped it, and its request waited out the queue (benchmarks/front_overhead.py,
  -- 2026-12-06: one request in ~1,100 at 64 clients waited 10 s for a free slot, then a 429).
  if not M.lock(dict) then
    return "stuck"
  end
  local ticket = dict:incr("ticket:" .. name, 1, 0)
  dict:set("issued:" .. name .. ":" .. ticket, ngx.now(), queue_seconds + 60)
  M.unlock(dict)
  local deadline = ngx.now() + queue_seconds
  while true do
    if not M.lock(dict) then
      dict:set("abandoned:" .. name .. ":" .. ticket, true, queue_seconds + 60)
      return "stuck"
    end
    local now = ngx.now()
    local admitted, whole = false, nil
    if turn(dict, name, now, queue_seconds) == ticket then
      admitted, whole = share:admit(name, weight, capacity, now)
      if admitted then
        pass_turn(dict, name, ticket)
      end
    end
    if not admitted then -- the keys weighed once a try: a refusing admit() said the share
      whole = whole or share:share(name, capacity, now)
    end
    local refused = not admitted and (weight > whole or now >= deadline)
    if refused then
      give_up(dict, name, ticket, queue_seconds)
    end
    M.unlock(dict)
    if admitted then
      return "admitted"
    end
    if refused then
      return "refused", whole
    end
    ngx.sleep(M.WAIT_STEP_SECONDS)
    ngx.update_time()
  end
end

return M
