-- The usage meter, inside nginx: usage per API key name, each key's fair share of the engine's
-- slots, and nothing between the client and the model but these few calls in nginx's own phases
-- (docs/front-and-alerts.md, "The usage meter": why in nginx, and the figures). nginx.conf calls
-- configure() once per config load, init_worker() in each worker, and access(), header_filter(),
-- body_filter() and log() on the generation routes; metrics() serves the counters on the status
-- port. Every counter lives in one shared dict (lua_shared_dict glm_meter), so every worker sees
-- the same, a reload keeps them, and a file keeps them across a restart of the front.
--
-- Never the reason a request fails: an error in the meter passes the request on unmetered, counted
-- (glm_meter_unmetered_total) and alerted on; only the meter's own answers (the share's 429, a
-- request larger than the engine) refuse one.
--
-- The phases' handlers, read together: what a request holds passes from one phase to the next. The
-- parts they call live beside them: the body (meter_body.lua), the lock and each key's queue
-- (meter_queue.lua), the fair share (meter_shares.lua), budgets (meter_budget.lua), the replica
-- (meter_replicas.lua), the answer's events (meter_answer.lua), the counters (meter_counters.lua),
-- the other front pods (meter_peers.lua) and what a leaving one counted (meter_handoff.lua).
-- Past 400 lines, kept whole: the six phases and what they share (the request's record across an
-- internal redirect, the counting, the dead workers' slots).
local cjson = require("cjson.safe")
local ffi = require("ffi")
local request = require("meter_request")
local answer = require("meter_answer")
local shares = require("meter_shares")
local budgets = require("meter_budget")
local counters = require("meter_counters")
local peers = require("meter_peers")
local handoff = require("meter_handoff")
local route = require("meter_route")
local serving_pods = require("meter_pods")
local queue = require("meter_queue")
local body_of = require("meter_body")
local replicas = require("meter_replicas")

local M = {}

local GENERATION = { ["/v1/chat/completions"] = true, ["/v1/completions"] = true, ["/v1/responses"] = true }
-- The routes that take engine slots (components/render/nginx_meter.py GENERATION_ROUTES).
local FLUSH_SECONDS = 2
local FORGET_CHECK_SECONDS = 10
ffi.cdef("int kill(int pid, int sig);")

local config = { weights = {}, fair_share = true, slots = 0, queue_seconds = 0, state_file = nil, routing = nil }
local dict

local function budget()
  return budgets.new(dict, config)
end

-- The engine's slots: the slots per replica x the replicas in rotation. `pods`: this front's part of
-- them, where several front pods share them (its parts of each serving pod, meter_replicas.room).
local function slots_now(pods)
  local serving = replicas.in_rotation(config.routing)
  if not pods or not config.peers then
    return config.slots * serving
  end
  return math.max(1, replicas.front_part(dict, config, serving))
end

-- The fair share over this front's slots; `stack`: the whole stack's, where several front pods
-- share them (an admission weighs the stack's share too).
local function sharing(stack)
  return shares.new(dict, config, stack)
end

--- Once per config load (init_by_lua, in the master): the shares' weights and the slots, and, on
--- the first load, the counters the last front left.
function M.configure(settings)
  for key, value in pairs(settings) do
    if value == cjson.null then
      settings[key] = nil
    end
  end
  config = settings
  dict = ngx.shared.glm_meter
  if config.state_file and not dict:get("loaded") then
    local directory = config.state_file:match("^(.*)/[^/]+$")
    -- The master may be root and the workers nobody: the workers write the file.
    os.execute("mkdir -p '" .. directory .. "' && chown nobody '" .. directory .. "' 2>/dev/null")
    counters.load(dict, config.state_file)
    dict:set("loaded", true)
  end
  if config.peers then
    local me = peers.self(config.peers.port)
    config.me = {
      name = config.peers.name or (me and me.name) or "front",
      address = config.peers.address or (me and me.address),
    }
  end
end

-- Slots held by a worker that died (a crash, an OOM kill) are given back when its successor starts.
local function reclaim_dead_workers()
  if not queue.lock(dict) then
    return
  end
  for _, key in ipairs(dict:get_keys(0)) do
    local pid, name = key:match("^by_pid:(%d+):(.+)$")
    local routed_pid, replica = key:match("^routed_pid:(%d+):(.+)$")
    pid = pid or routed_pid
    if pid and ffi.C.kill(tonumber(pid), 0) ~= 0 and ffi.errno() == 3 then -- ESRCH: no such process
      if replica then
        dict:incr("inflight:" .. replica, -(dict:get(key) or 0), 0)
      else
        shares.new(dict, config):release(name, dict:get(key) or 0)
      end
      dict:delete(key)
    end
  end
  queue.unlock(dict)
end

function M.init_worker()
  dict = ngx.shared.glm_meter
  -- In a timer, not here: the lock may wait (ngx.sleep), which a worker's start-up may not.
  ngx.timer.at(0, function(premature)
    if not premature then
      reclaim_dead_workers()
    end
  end)
  if config.routing and config.routing.pods_file then
    serving_pods.start(config.routing.pods_file)
    if ngx.worker.id() == 0 then
      ngx.timer.every(FORGET_CHECK_SECONDS, function(premature)
        local names = not premature and serving_pods.names(ngx.now()) or {}
        if #names > 0 then -- a fresh file that lists pods: the others are gone
          replicas.forget_gone(dict, names, ngx.now())
        end
      end)
    end
  end
  if ngx.worker.id() == 0 and config.state_file then
    ngx.timer.every(FLUSH_SECONDS, function(premature)
      counters.save(dict, config.state_file)
    end)
  end
  if ngx.worker.id() == 0 and config.peers then
    local summed = {}
    ngx.timer.every(peers.INTERVAL, function(premature)
      if premature then
        return
      end
      local ok, result = pcall(peers.pull, dict, config.me, config.peers.discovery, summed, config.minute_seconds)
      if ok then
        summed = result
      else
        ngx.log(ngx.ERR, "usage meter: reading the other front pods failed: ", tostring(result))
      end
      handoff.drain(dict, config.peers.drain_file)
      handoff.when_asked(dict, config.me, config.peers.drain_file, peers.heirs, ngx.now())
    end)
  end
end

-- ---- counting -----------------------------------------------------------------------------------

-- What the answer told so far, counted now (a worker killed mid-stream loses nothing counted). The
-- engine runs each of a request's `n` choices as a request of its own, prefill included, and counts
-- the prompt that many times (vllm:prompt_tokens_total); `usage` says it once: the meter counts what
-- the engine did. `cached`: of the prompt, the tokens the engine found in its prefix cache, as
-- `usage` reports them (one engine request's), taken n times like the prompt.
local function count_tokens(ctx, prompt, completion, cached)
  local n = (ctx.shape and ctx.shape.n) or 1
  prompt = prompt * n
  if prompt ~= ctx.prompt then
    dict:incr("prompt:" .. ctx.name, prompt - ctx.prompt, 0)
    ctx.prompt = prompt
  end
  cached = math.min((cached or 0) * n, prompt)
  if cached ~= ctx.cached then
    dict:incr("cached:" .. ctx.name, cached - ctx.cached, 0)
    ctx.cached = cached
  end
  if completion ~= ctx.completion then
    dict:incr("completion:" .. ctx.name, completion - ctx.completion, 0)
    ctx.completion = completion
  end
end

-- What a request holds (its slots, its budget's reservation), kept where an internal redirect (an
-- error_page: the 502/503 while no replica is in rotation, a 504, a 413) cannot lose it: ngx.ctx does
-- not survive one, and the final location's log phase must still give them back.
local function request_id()
  return ngx.worker.pid() .. ":" .. ngx.var.connection .. ":" .. ngx.var.connection_requests
end

local function held_key()
  return "req:" .. request_id()
end

local function remember(ctx)
  dict:set(held_key(), cjson.encode({ name = ctx.name, held = ctx.held, budget = ctx.budget, replica = ctx.replica }), 3600)
end

local function recalled()
  local key = held_key()
  local record = dict:get(key)
  if not record then
    return nil
  end
  dict:delete(key)
  local state = cjson.decode(record)
  if type(state) ~= "table" then
    return nil
  end
  return { name = state.name, held = state.held or 0, budget = state.budget, replica = state.replica,
    prompt = 0, completion = 0, cached = 0, redirected = true }
end

-- ---- the request's way in -------------------------------------------------------------------------

local function openai_error(status, message, code, kind, retry_after)
  ngx.status = status
  ngx.header["Content-Type"] = "application/json"
  if retry_after then
    ngx.header["Retry-After"] = tostring(retry_after)
  end
  ngx.print(cjson.encode({ error = { message = message, type = kind, param = cjson.null, code = code } }))
  return ngx.exit(ngx.HTTP_OK)
end

-- The key's budget: an upper bound of what the engine will count for this request must fit every
-- window (meter_budget.lua); it is reserved, and settled when it ends.
-- Returns the refusal's answer, or nil (reserved in ctx.budget).
local function spend(ctx, shape, size)
  local estimate = budgets.estimate(shape, size, config.max_model_len)
  if not queue.lock(dict) then
    return nil
  end
  local now = ngx.now()
  local account = budget()
  local window = account:refusal(ctx.name, estimate, now)
  if not window then
    ctx.budget = account:reserve(ctx.name, estimate, now)
  end
  queue.unlock(dict)
  if not window then
    return nil
  end
  dict:incr("budget_refused:" .. ctx.name .. ":" .. window.field, 1, 0)
  return budgets.refusal_answer(window, shape)
end

-- The replica this request goes to (meter_replicas.lua), counted in flight on it until it ends.
local function choose_replica(ctx, fields, head)
  local replica, upstream = replicas.choose(dict, config, fields, head)
  if replica then
    ctx.replica = replica
    ngx.var.glm_upstream = upstream
    remember(ctx)
  end
end

--- The `glm_pods` upstream's balancer (a Kubernetes front): the request's pod, another on a retry.
function M.balance()
  replicas.balance(dict, config.routing, ngx.ctx.meter)
end

-- The meter's part of the access phase: returns (status, message, code, kind, retry_after) to
-- refuse the request, or nil to pass it on.
local function admit(ctx)
  local uri = ngx.var.uri
  local capacity = slots_now()
  local fields, body, path, size, head = body_of.read(capacity, config.routing and route.READ_BYTES)
  local shape = request.shape(fields, uri)
  ctx.shape = shape
  local refusal = spend(ctx, shape, size or 0)
  if refusal then
    return refusal.status, refusal.message, "rate_limit_exceeded", refusal.kind, refusal.retry_after
  end
  if config.fair_share and capacity > 0 and shape.weight > capacity then
    return 400, string.format(
      "This request asks for %s%d sequences at once (n x its prompts), and the engine runs at most %d "
        .. "(glm:serving.maxNumSeqs x the replicas in rotation): send fewer prompts or a smaller n.",
      shape.more and "more than " or "", shape.more and capacity or shape.weight, capacity),
      "too_many_sequences", "invalid_request_error"
  end
  -- Several front pods: this pod shares its part (a request larger than the part still fits alone).
  local stack = config.peers and capacity or nil
  capacity = math.max(slots_now(true), shape.weight)
  local outcome, whole = queue.wait(dict, sharing(stack), ctx.name, shape.weight, capacity, config.queue_seconds)
  if outcome == "stuck" then
    return nil -- the meter is stuck, not the request: pass it on
  end
  if outcome == "refused" then
    dict:incr("refused:" .. ctx.name, 1, 0)
    budget():settle(ctx.budget, 0) -- refused: what it reserved goes back
    local waited = shape.weight > whole and "" or string.format(" It waited %g s for a slot.", config.queue_seconds)
    return 429, string.format(
      "Too many requests in flight for this API key: its fair share of the engine is %d sequences "
        .. "at once (%d slots shared among the active keys), this request needs %d, and the free "
        .. "slots are kept for the other keys.%s Retry after the Retry-After seconds.",
      whole, capacity, shape.weight, waited), "rate_limit_exceeded", "requests", 1
  end
  ctx.held = shape.weight
  dict:incr("by_pid:" .. ngx.worker.pid() .. ":" .. ctx.name, shape.weight, 0)
  remember(ctx)
  if config.routing then
    choose_replica(ctx, fields, head)
  end
  if shape.stream and uri ~= "/v1/responses" then
    body_of.ask_usage(body, path)
  end
  return nil
end

function M.access()
  local name = ngx.var.api_client
  if not name or name == "" then
    return
  end
  local ctx = { name = name, prompt = 0, completion = 0, cached = 0, held = 0 }
  ngx.ctx.meter = ctx
  if config.peers then
    dict:set("flight:" .. request_id(), true, 3600) -- a draining pod waits for these (meter_handoff.drain)
  end
  dict:set("seen:" .. name, ngx.time())
  if ngx.req.get_method() ~= "POST" or not GENERATION[ngx.var.uri] then
    return -- counted (log), takes no slot
  end
  local ok, status, message, code, kind, retry_after = pcall(admit, ctx)
  if not ok then
    ctx.unmetered = true
    ngx.log(ngx.ERR, "usage meter: ", tostring(status), " (the request is passed on unmetered)")
    return
  end
  if status then
    ctx.refused = true
    return openai_error(status, message, code, kind, retry_after)
  end
end

-- ---- the answer's way out ---------------------------------------------------------------------------

-- OpenAI's rate-limit headers (platform.openai.com/docs/guides/rate-limits), for a key with a
-- budget: the requests per minute, and the tokens per minute (else per day).
local function rate_limit_headers(name)
  local by_field = {}
  for _, window in ipairs(budget():state(name, ngx.now())) do
    by_field[window.field] = window
  end
  local requests = by_field.requests_per_minute
  local tokens = by_field.tokens_per_minute or by_field.tokens_per_day
  for kind, window in pairs({ requests = requests, tokens = tokens }) do
    ngx.header["x-ratelimit-limit-" .. kind] = tostring(window.limit)
    ngx.header["x-ratelimit-remaining-" .. kind] = tostring(window.remaining)
    ngx.header["x-ratelimit-reset-" .. kind] = budgets.duration(window.reset_in)
  end
end

local function header_filter(ctx)
  local content_type = ngx.header["Content-Type"] or ""
  rate_limit_headers(ctx.name)
  if ctx.refused then
    return
  end
  if type(content_type) == "string" and content_type:find("text/event-stream", 1, true) then
    ctx.stream = answer.Stream(ctx.shape or {}, ngx.var.uri == "/v1/responses")
    ngx.header["Content-Length"] = nil -- events it did not ask for are left out
  elseif ngx.status >= 200 and ngx.status < 300 then
    ctx.parts, ctx.size = {}, 0
  end
end

-- One of the answer's steps; an error in it leaves the answer as it is, unmetered from there on.
local function guarded(step, ctx)
  local ok, err = pcall(step, ctx)
  if not ok then
    ctx.unmetered = true
    ngx.log(ngx.ERR, "usage meter: ", tostring(err), " (the answer is passed on unmetered)")
  end
end

function M.header_filter()
  local ctx = ngx.ctx.meter
  if ctx and not ctx.unmetered then
    guarded(header_filter, ctx)
  end
end

local JSON_KEPT = 1024 * 1024
-- A JSON answer's usage is near its end: past this much only the last JSON_KEPT bytes are kept.

local function body_filter(ctx)
  local piece, last = ngx.arg[1], ngx.arg[2]
  if ctx.stream then
    ngx.arg[1] = ctx.stream:feed(piece, last)
    if not ctx.first_token and ctx.stream.first_token then
      ctx.first_token = ngx.now() - ngx.req.start_time()
    end
    count_tokens(ctx, ctx.stream.prompt, ctx.stream.completion, ctx.stream.cached)
  elseif ctx.parts then
    if piece and piece ~= "" then
      ctx.parts[#ctx.parts + 1] = piece
      ctx.size = ctx.size + #piece
      if ctx.size > 2 * JSON_KEPT then
        local joined = table.concat(ctx.parts)
        ctx.parts, ctx.size = { joined:sub(-JSON_KEPT) }, JSON_KEPT
      end
    end
    if last then
      -- Counted before the answer's last byte leaves: a worker that dies after it loses nothing.
      local usage = answer.usage_of(table.concat(ctx.parts))
      if usage then
        count_tokens(ctx, usage.prompt, usage.completion, usage.cached)
      end
      ctx.parts = nil
    end
  end
end

function M.body_filter()
  local ctx = ngx.ctx.meter
  if ctx and not ctx.unmetered and not ctx.refused then
    guarded(body_filter, ctx)
  end
end

local function log_request(ctx)
  if ctx.held > 0 then
    sharing():release(ctx.name, ctx.held)
    dict:incr("by_pid:" .. ngx.worker.pid() .. ":" .. ctx.name, -ctx.held, 0)
  end
  if ctx.replica then
    replicas.release(dict, ctx.replica)
  end
  local status = tonumber(ngx.var.status) or 0
  if ctx.stream and not ctx.stream.finished and ngx.var.request_completion ~= "OK" then
    status = 499 -- the client left mid-stream: charged what it was sent
  end
  if ctx.parts then -- an answer whose last piece never passed (the client left): what came
    local usage = answer.usage_of(table.concat(ctx.parts))
    if usage then
      count_tokens(ctx, usage.prompt, usage.completion, usage.cached)
    end
  end
  if ctx.budget then
    budget():settle(ctx.budget, ctx.prompt + ctx.completion) -- what it cost, counted above
  end
  dict:incr("requests:" .. ctx.name .. ":" .. status, 1, 0)
  if ctx.unmetered then
    dict:incr("unmetered:" .. ctx.name, 1, 0)
  end
  if ctx.first_token then
    counters.observe(dict, "ttft", ctx.name, counters.TTFT_BUCKETS, ctx.first_token)
  end
  if status ~= 499 and not ctx.refused then
    counters.observe(dict, "duration", ctx.name, counters.DURATION_BUCKETS, ngx.now() - ngx.req.start_time())
  end
end

function M.log()
  local ctx = ngx.ctx.meter
  if config.peers then
    dict:delete("flight:" .. request_id())
  end
  if ctx and (ctx.held > 0 or ctx.budget or ctx.replica) then
    dict:delete(held_key())
  elseif not ctx then
    ctx = recalled() -- the request was redirected internally after the meter admitted it
  end
  if ctx then
    local ok, err = pcall(log_request, ctx)
    if not ok then
      ngx.log(ngx.ERR, "usage meter: ", tostring(err), " (this request's counts may be short)")
    end
  end
end

--- What this pod tells the other front pods (meter_peers), on the status port.
function M.peers()
  ngx.header["Content-Type"] = "application/json"
  ngx.print(peers.report(dict, config.me, ngx.now()))
end

--- A leaving front pod's counts (meter_handoff.serve), on the status port.
function M.inherit()
  handoff.serve(dict, peers.is_peer(dict, ngx.var.remote_addr), function(name)
    sharing():note_name(name)
  end)
end

function M.metrics()
  local capacity = slots_now(true)
  ngx.header["Content-Type"] = "text/plain; version=0.0.4"
  ngx.print(counters.exposition(dict, sharing(), budget(), capacity, ngx.now()))
end

return M
