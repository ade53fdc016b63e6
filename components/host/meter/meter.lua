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
local cjson = require("cjson.safe")
local ffi = require("ffi")
local request = require("meter_request")
local answer = require("meter_answer")
local shares = require("meter_shares")
local budgets = require("meter_budget")
local counters = require("meter_counters")
local peers = require("meter_peers")
local route = require("meter_route")
local serving_pods = require("meter_pods")

local M = {}

local GENERATION = { ["/v1/chat/completions"] = true, ["/v1/completions"] = true, ["/v1/responses"] = true }
-- The routes that take engine slots (components/render/nginx_meter.py GENERATION_ROUTES).
local FLUSH_SECONDS = 2
local WAIT_STEP_SECONDS = 0.005
ffi.cdef("int kill(int pid, int sig);")

local config = { weights = {}, fair_share = true, slots = 0, queue_seconds = 0, state_file = nil, routing = nil }
local dict

local function sharing()
  return shares.new(dict, config)
end

local function budget()
  return budgets.new(dict, config)
end

-- The replicas in rotation: a Kubernetes front's serving pods Ready now (its routes file, while
-- fresh and not empty), else what the rotation wrote ($replicas_in_rotation; the configured count
-- on Kubernetes).
local function replicas_in_rotation()
  if config.routing and config.routing.pods_file then
    local ready = #serving_pods.names(ngx.now())
    if ready > 0 then
      return ready
    end
  end
  return tonumber(ngx.var.replicas_in_rotation) or 1
end

-- The engine's slots: maxNumSeqs x the replicas in rotation. `pods`: this front's part of them,
-- where several front pods share them (meter_peers: an equal part for each pod alive).
local function slots_now(pods)
  local whole = config.slots * replicas_in_rotation()
  if not pods or not config.peers then
    return whole
  end
  return math.max(1, math.floor(whole / peers.alive(dict)))
end

-- Per-sequence tokens of a request that names no max_tokens: what the engine allows it.
local TEMPLATE_TOKENS = 64
-- A bound on what a chat template adds to the prompt (role markers, the generation prompt).

-- ---- the lock: an admission reads every key's slots and takes some, in any worker -------------

local function lock()
  for _ = 1, 2000 do
    if dict:add("lock", ngx.worker.pid(), 0.1) then
      return true
    end
    ngx.sleep(0.001)
  end
  return false
end

local function unlock()
  dict:delete("lock")
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
  if not lock() then
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
  unlock()
end

-- Draining (the pod's preStop wrote config.peers.drain_file): once no request is in flight, say so
-- (drain_file .. ".done"), so the preStop lets the stack's Prometheus read the final counts before
-- nginx quits (components/kubernetes/front.py).
local function drain_done()
  local marker = config.peers.drain_file
  local asked = marker and io.open(marker, "r")
  if not asked then
    return
  end
  asked:close()
  for _, key in ipairs(dict:get_keys(0)) do
    if key:find("^flight:") then
      return
    end
  end
  local done = io.open(marker .. ".done", "w")
  if done then
    done:close()
  end
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
      drain_done()
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

-- The request's top-level fields, and where its body is: in memory (`body`), or in nginx's own
-- temporary file (`path`: past client_body_buffer_size), which is scanned slice by slice so neither
-- the loop every stream shares nor the worker's memory ever holds the whole body.
local function read_fields(capacity)
  ngx.req.read_body()
  local body = ngx.req.get_body_data()
  if body then
    return request.fields(body, function() ngx.sleep(0.001) end), body, nil, #body, body:sub(1, route.READ_BYTES)
  end
  local path = ngx.req.get_body_file()
  local file = path and io.open(path, "rb")
  if not file then
    return nil, nil, nil
  end
  local size = file:seek("end")
  file:seek("set")
  local scanner = request.Scanner(capacity > 0 and capacity or nil)
  local head = config.routing and file:read(route.READ_BYTES)
  file:seek("set")
  while not (scanner.done or scanner.broken) do
    local slice = file:read(request.SLICE)
    if not slice then
      break
    end
    scanner:feed(slice)
    ngx.sleep(0.001)
  end
  file:close()
  return scanner:fields(), nil, path, size, head
end

-- A large stream's body with usage asked for: copied slice by slice into a new temporary file, its
-- closing brace replaced by request.with_usage's; nginx sends that file and removes it afterwards.
local function rewrite_file(path)
  local source = io.open(path, "rb")
  local target_path = path .. ".meter"
  local target = source and io.open(target_path, "wb")
  if not target then
    if source then
      source:close()
    end
    return false
  end
  local previous = source:read(request.SLICE)
  while previous do
    local slice = source:read(request.SLICE)
    if not slice then
      break
    end
    target:write(previous)
    previous = slice
    ngx.sleep(0.001)
  end
  source:close()
  local tail = previous and request.with_usage(previous)
  if not tail then
    target:close()
    os.remove(target_path)
    return false
  end
  target:write(tail)
  target:close()
  ngx.req.set_body_file(target_path, true)
  return true
end

-- The key's budget: an upper bound of what the engine will count for this request (its prompt's
-- text bounds its tokens, else the body's bytes, at most max-model-len a prompt, n times as the
-- engine counts them; plus max_tokens, or the engine's max-model-len, per sequence) must fit every
-- window; it is reserved, and settled when it ends.
-- Returns the refusal, or nil (reserved in ctx.budget).
local function spend(ctx, shape, size, capacity)
  local longest = config.max_model_len or 0
  local per_sequence = shape.max_tokens or longest
  local prompt = shape.prompt_bound or (size + TEMPLATE_TOKENS)
  if longest > 0 then
    prompt = math.min(prompt, longest * (shape.weight / shape.n)) -- the engine refuses a longer prompt
  end
  local estimate = shape.n * prompt + shape.weight * per_sequence
  if not lock() then
    return nil
  end
  local now = ngx.now()
  local account = budget()
  local window = account:refusal(ctx.name, estimate, now)
  if not window then
    ctx.budget = account:reserve(ctx.name, estimate, now)
  end
  unlock()
  if not window then
    return nil
  end
  dict:incr("budget_refused:" .. ctx.name .. ":" .. window.field, 1, 0)
  local unit = window.kind == "tokens" and "tokens" or "requests"
  if window.never then
    return { status = 400, kind = "invalid_request_error", message = string.format(
      "This request may cost up to %d %s (its prompt's bytes bound its tokens, plus %s per sequence), "
        .. "more than this API key's whole %s budget of %d (glm:front.usageMeter.limits): lower "
        .. "max_tokens, or send a shorter prompt.", window.needed, unit,
      shape.max_tokens and "max_tokens" or "the engine's max-model-len with no max_tokens",
      window.field, window.limit) }
  end
  return { status = 429, kind = window.kind, retry_after = window.retry_after, message = string.format(
    "Rate limit reached for this API key on %s: limit %d, used %d, this request needs up to %d. "
      .. "Retry after %d s (the Retry-After header), when the window resets.",
    window.field, window.limit, window.used, window.needed, window.retry_after) }
end

-- The meter's part of the access phase: returns (status, message, code, kind, retry_after) to
-- refuse the request, or nil to pass it on.
-- The key's queue (under the lock): the ticket whose turn it is. A ticket given up is skipped; so
-- is one older than any request waits (its holder's deadline passed: its worker died).
local function turn(name, now)
  local head = dict:get("turn:" .. name) or 1
  local last = dict:get("ticket:" .. name) or 0
  while head <= last do
    local issued = dict:get("issued:" .. name .. ":" .. head)
    if not dict:get("abandoned:" .. name .. ":" .. head) and issued and now - issued <= config.queue_seconds + 1 then
      break
    end
    head = head + 1
  end
  dict:set("turn:" .. name, head)
  return head
end

local function pass_turn(name, ticket)
  dict:set("turn:" .. name, ticket + 1)
end

local function give_up(name, ticket)
  if (dict:get("turn:" .. name) or 1) == ticket then
    pass_turn(name, ticket)
  else
    dict:set("abandoned:" .. name .. ":" .. ticket, true, config.queue_seconds + 60)
  end
end

-- The replicas a request may go to now: a Kubernetes front's serving pods (meter_pods.lua), or a
-- Docker front's rotation ($glm_routes).
local function replicas_now()
  if config.routing.pods_file then
    return serving_pods.names(ngx.now())
  end
  return route.names(ngx.var.glm_routes)
end

local function in_flight(name)
  return dict:get("inflight:" .. name)
end

-- A Kubernetes front's pods with room: fewer of this front's requests in flight than its part of the
-- pod's maxNumSeqs (the slots split among the front pods alive). Several front pods each choose
-- alone; without this, two of them could send a pod more sequences than it runs while another pod
-- idles, and a request would wait inside the engine behind another key's, where the fair share
-- cannot reach. None with room: all of them (the least loaded is chosen).
local function with_room(names)
  if not config.routing.pods_file then
    return names
  end
  local room = math.ceil(config.slots / (config.peers and peers.alive(dict) or 1))
  local open = {}
  for _, name in ipairs(names) do
    if (in_flight(name) or 0) < room then
      open[#open + 1] = name
    end
  end
  return #open > 0 and open or names
end

-- The replica this request goes to (meter_route.lua: the conversation's with prefix affinity, else
-- the least loaded), named in $glm_upstream, which the location's proxy_pass reads (a Docker
-- replica's group, or the pods' balancer); counted in flight on it until the request ends.
local function choose_replica(ctx, fields, head)
  local key = config.routing.keyed ~= false and route.key(fields, head) or nil
  local replica = route.choose(with_room(replicas_now()), key, in_flight, config.routing.load_factor)
  if not replica then
    return -- none in rotation: upstream vllm answers the rotation's 503 (or the Service picks)
  end
  dict:incr("inflight:" .. replica, 1, 0)
  dict:incr("routed_pid:" .. ngx.worker.pid() .. ":" .. replica, 1, 0)
  dict:incr("routed:" .. replica .. ":" .. (key and "key" or "none"), 1, 0)
  ctx.replica = replica
  ngx.var.glm_upstream = config.routing.pods_file and serving_pods.UPSTREAM or route.PREFIX .. replica
  remember(ctx)
end

--- The `glm_pods` upstream's balancer (a Kubernetes front): the request's pod, another on a retry.
function M.balance()
  serving_pods.balance(ngx.ctx.meter, in_flight, config.routing.tries)
end

local function admit(ctx)
  local uri = ngx.var.uri
  local capacity = slots_now()
  local fields, body, path, size, head = read_fields(capacity)
  local shape = request.shape(fields, uri)
  ctx.shape = shape
  local share = sharing()
  local refusal = spend(ctx, shape, size or 0, capacity)
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
  capacity = math.max(slots_now(true), shape.weight)
  -- First come, first served within a key, as vLLM's own queue would order them: each request takes
  -- a ticket, and only the key's oldest waiting one may take a slot.
  -- Issued under the lock: a ticket counted but not yet stamped looked abandoned to another worker's
  -- turn(), which skipped it, and its request waited out the queue (benchmarks/front_overhead.py,
  -- 2026-12-06: one request in ~1,100 at 64 clients waited 10 s for a free slot, then a 429).
  if not lock() then
    return nil -- the meter is stuck, not the request: pass it on
  end
  local ticket = dict:incr("ticket:" .. ctx.name, 1, 0)
  dict:set("issued:" .. ctx.name .. ":" .. ticket, ngx.now(), config.queue_seconds + 60)
  unlock()
  local deadline = ngx.now() + config.queue_seconds
  while true do
    if not lock() then
      dict:set("abandoned:" .. ctx.name .. ":" .. ticket, true, config.queue_seconds + 60)
      return nil -- the meter is stuck, not the request: pass it on
    end
    local now = ngx.now()
    local admitted = false
    if turn(ctx.name, now) == ticket then
      admitted = share:admit(ctx.name, shape.weight, capacity, now)
      if admitted then
        pass_turn(ctx.name, ticket)
      end
    end
    local whole = share:share(ctx.name, capacity, now)
    if not admitted and (shape.weight > whole or now >= deadline) then
      give_up(ctx.name, ticket)
    end
    unlock()
    if admitted then
      ctx.held = shape.weight
      dict:incr("by_pid:" .. ngx.worker.pid() .. ":" .. ctx.name, shape.weight, 0)
      remember(ctx)
      break
    end
    if shape.weight > whole or now >= deadline then
      dict:incr("refused:" .. ctx.name, 1, 0)
      budget():settle(ctx.budget, 0) -- refused: what it reserved goes back
      local waited = shape.weight > whole and ""
        or string.format(" It waited %g s for a slot.", config.queue_seconds)
      return 429, string.format(
        "Too many requests in flight for this API key: its fair share of the engine is %d sequences "
          .. "at once (%d slots shared among the active keys), this request needs %d, and the free "
          .. "slots are kept for the other keys.%s Retry after the Retry-After seconds.",
        whole, capacity, shape.weight, waited), "rate_limit_exceeded", "requests", 1
    end
    ngx.sleep(WAIT_STEP_SECONDS)
    ngx.update_time()
  end
  if config.routing then
    choose_replica(ctx, fields, head)
  end
  if shape.stream and uri ~= "/v1/responses" then
    local rewritten = body and request.with_usage(body)
    if rewritten then
      ngx.req.set_body_data(rewritten)
    elseif path and not rewrite_file(path) then
      ngx.log(ngx.WARN, "usage meter: a stream's body could not ask for usage; counted from what it was sent")
    end
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
    dict:set("flight:" .. request_id(), true, 3600) -- a draining pod waits for these (drain_done)
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
    dict:incr("inflight:" .. ctx.replica, -1, 0)
    dict:incr("routed_pid:" .. ngx.worker.pid() .. ":" .. ctx.replica, -1, 0)
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

function M.metrics()
  local capacity = slots_now(true)
  ngx.header["Content-Type"] = "text/plain; version=0.0.4"
  ngx.print(counters.exposition(dict, sharing(), budget(), capacity, ngx.now()))
end

return M
