-- Budgets per key (glm:front.usageMeter.limits / defaultLimits; docs/front-and-alerts.md "Budgets
-- per key"): tokens per minute and per day, requests per minute, in fixed UTC windows. A request is
-- admitted when its estimate (an upper bound of what the engine will count for it) fits what is
-- left in every window, and reserves it; its real usage settles the account when it ends. So the
-- request that would cross a limit is the one refused, before any byte, and no stream is ever cut.
-- One front sees every replica's tokens: the limits are the key's, whatever the replicas. Where
-- several front pods share the stack (Kubernetes), each window's use on the other pods is read
-- beside this pod's own (meter_peers.lua keeps it at "peers:<window>").
--
-- Pure Lua over a store with ngx.shared.DICT's get/incr (tests/test_meter_budget.py passes a
-- table): admissions run under the meter's lock. The day windows outlive a restart (meter.lua keeps
-- the `budget_day` family in its file); the minute windows expire with their minute.
local M = {}

local Budget = {}
Budget.__index = Budget

--- `config`: {limits = {name = {tokens_per_minute, tokens_per_day, requests_per_minute}},
--- default_limits, exempt = {names}, minute_seconds (60; a test's clock), day_seconds (86400)}.
function M.new(store, config)
  local exempt = {}
  for _, name in ipairs(config.exempt or {}) do
    exempt[name] = true
  end
  return setmetatable({
    store = store,
    limits = config.limits or {},
    default = config.default_limits,
    exempt = exempt,
    minute = config.minute_seconds or 60,
    day = config.day_seconds or 86400,
  }, Budget)
end

--- The key's windows now: {field, kind ("tokens"|"requests"), limit, key, reset} for each limit set.
function Budget:windows(name, now)
  if self.exempt[name] then
    return {}
  end
  local limits = self.limits[name] or self.default
  if type(limits) ~= "table" then
    return {}
  end
  local found = {}
  for _, window in ipairs({
    { "tokens_per_minute", "tokens", self.minute, "budget_minute" },
    { "requests_per_minute", "requests", self.minute, "budget_minute" },
    { "tokens_per_day", "tokens", self.day, "budget_day" },
  }) do
    local field, kind, span, family = window[1], window[2], window[3], window[4]
    local limit = tonumber(limits[field])
    if limit then
      local index = math.floor(now / span)
      found[#found + 1] = {
        field = field, kind = kind, limit = limit, span = span,
        key = family .. ":" .. field .. ":" .. name .. ":" .. index,
        reset = (index + 1) * span,
      }
    end
  end
  return found
end

local function need(window, tokens)
  return window.kind == "tokens" and tokens or 1
end

--- What the key used of `window`: here, and on the other front pods as of their last report.
function Budget:used(window)
  return (self.store:get(window.key) or 0) + (self.store:get("peers:" .. window.key) or 0)
end

--- Whether `tokens` (the estimate) fit every window of `name` now. nil: they fit; else the
--- window that refuses, with `used`, `needed`, `retry_after` (seconds until it frees), `never`
--- (the request alone is more than the limit: no wait helps).
function Budget:refusal(name, tokens, now)
  for _, window in ipairs(self:windows(name, now)) do
    local used = self:used(window)
    local needed = need(window, tokens)
    if used + needed > window.limit then
      window.used, window.needed = used, needed
      window.never = needed > window.limit
      window.retry_after = math.max(1, math.ceil(window.reset - now))
      return window
    end
  end
  return nil
end

--- Take `tokens` (and one request) from every window of `name`; returns the reservation to settle.
function Budget:reserve(name, tokens, now)
  local held = {}
  for _, window in ipairs(self:windows(name, now)) do
    local amount = need(window, tokens)
    self.store:incr(window.key, amount, 0, window.span * 2)
    if window.kind == "tokens" then
      held[#held + 1] = { key = window.key, amount = amount, span = window.span }
    end
  end
  return held
end

--- The request ended having cost `tokens` (what the meter counted for it): the windows it reserved
--- in get the difference (0 for a request refused after its reservation: all of it back).
function Budget:settle(held, tokens)
  for _, window in ipairs(held or {}) do
    self.store:incr(window.key, tokens - window.amount, 0, window.span * 2)
  end
end

--- Per window, what is left now and when it resets (OpenAI's x-ratelimit-* headers, the series).
function Budget:state(name, now)
  local states = {}
  for _, window in ipairs(self:windows(name, now)) do
    local used = self:used(window)
    states[#states + 1] = {
      field = window.field, kind = window.kind, limit = window.limit, used = used,
      remaining = math.max(0, window.limit - used), reset_in = window.reset - now,
    }
  end
  return states
end

M.TEMPLATE_TOKENS = 64
-- A bound on what a chat template adds to the prompt (role markers, the generation prompt).

--- An upper bound of what the engine will count for a request of this `shape` (meter_request.lua)
--- and body `size` in bytes: its prompt's text bounds its tokens, else the body's bytes; at most
--- max-model-len a prompt (the engine refuses a longer one), n times as the engine counts them;
--- plus max_tokens, or the engine's max-model-len, per sequence.
function M.estimate(shape, size, max_model_len)
  local longest = max_model_len or 0
  local per_sequence = shape.max_tokens or longest
  local prompt = shape.prompt_bound or (size + M.TEMPLATE_TOKENS)
  if longest > 0 then
    prompt = math.min(prompt, longest * (shape.weight / shape.n))
  end
  return shape.n * prompt + shape.weight * per_sequence
end

--- What a request refused by `window` (Budget:refusal's) is answered: {status, kind, message,
--- retry_after}. A request that could never fit the window is a 400, not a 429 to retry.
function M.refusal_answer(window, shape)
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

--- OpenAI's duration format for x-ratelimit-reset-*: `1s`, `0.5s`, `6m0s`, `2h0m0s`.
function M.duration(seconds)
  if seconds < 60 then
    local text = string.format("%.3f", seconds):gsub("0+$", ""):gsub("%.$", "")
    return text .. "s"
  end
  local whole = math.ceil(seconds)
  local hours, minutes, rest = math.floor(whole / 3600), math.floor(whole % 3600 / 60), whole % 60
  if hours > 0 then
    return string.format("%dh%dm%ds", hours, minutes, rest)
  end
  return string.format("%dm%ds", minutes, rest)
end

return M
