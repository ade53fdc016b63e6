-- The usage meter's counters (meter.lua counts; this keeps and shows them): the file that carries
-- them across a restart of the front, the histograms, and the Prometheus text format of every
-- key's series. Over the shared dict; the shares and budgets are handed in.
local cjson = require("cjson.safe")

local M = {}

M.TTFT_BUCKETS = { 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0 }
M.DURATION_BUCKETS = { 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 240.0, 480.0, 960.0 }
local KEPT = {
  "requests", "prompt", "completion", "cached", "refused", "seen", "ttft", "duration", "unmetered", "budget_day",
  "budget_refused", "inherited_requests", "inherited_prompt", "inherited_completion", "inherited_cached",
}
-- The counters a restart keeps (slots held, recent activity and the minute budgets start again).

local function escape_label(value)
  return (value:gsub("\\", "\\\\"):gsub('"', '\\"'):gsub("\n", "\\n"))
end

-- ---- persistence ------------------------------------------------------------------------------

local function is_kept(key)
  local family = key:match("^([^:]+):")
  for _, kept in ipairs(KEPT) do
    if family == kept then
      return true
    end
  end
  return key == "names"
end

--- The kept counters, written whole to `path` (a new file, then renamed).
function M.save(dict, path)
  if not path then
    return
  end
  local state = {}
  for _, key in ipairs(dict:get_keys(0)) do
    if is_kept(key) then
      state[key] = dict:get(key)
    end
  end
  local temporary = path .. ".tmp"
  local file, err = io.open(temporary, "w")
  if not file then
    ngx.log(ngx.ERR, "usage meter: cannot write its counters to ", temporary, ": ", err)
    return
  end
  file:write(cjson.encode(state))
  file:close()
  os.rename(temporary, path)
end

--- The counters a previous front left in `path`, where the dict has none yet.
function M.load(dict, path)
  local file = path and io.open(path, "r")
  if not file then
    return
  end
  local state = cjson.decode(file:read("*a") or "")
  file:close()
  if type(state) ~= "table" then
    return
  end
  for key, value in pairs(state) do
    if is_kept(key) and dict:get(key) == nil then
      -- A day's budget expires with its day (two days' grace), as meter_budget.reserve sets it.
      dict:set(key, value, key:find("^budget_day:") and 2 * 86400 or 0)
    end
  end
end

--- One observation of a histogram (`family`: ttft, duration).
function M.observe(dict, family, name, buckets, value)
  for i, bound in ipairs(buckets) do
    if value <= bound then
      dict:incr(family .. ":" .. name .. ":" .. i, 1, 0)
      break
    end
  end
  dict:incr(family .. ":" .. name .. ":count", 1, 0)
  dict:incr(family .. ":" .. name .. ":sum", value, 0)
end

-- ---- the counters, for the stack's Prometheus ------------------------------------------------------

local FAMILIES = {
  { "glm_key_requests_total", "counter", "Requests through the front by API key name and HTTP status." },
  { "glm_key_prompt_tokens_total", "counter", "Prompt tokens the engine processed, by API key name." },
  { "glm_key_completion_tokens_total", "counter", "Completion tokens the engine made, by API key name." },
  { "glm_key_cached_prompt_tokens_total", "counter",
    "Of the prompt tokens, those the engine found in its prefix cache (usage's cached_tokens), by API key name." },
  { "glm_key_fair_share_refused_total", "counter",
    "Requests refused with 429 beyond the key's share of the engine's slots." },
  { "glm_key_unmetered_total", "counter",
    "Requests passed on unmetered because the meter failed on them (its error log says why)." },
  { "glm_key_in_flight", "gauge", "Sequences of the key in the engine now (n x prompts per request)." },
  { "glm_key_share", "gauge", "The key's guaranteed share of the engine's slots now (among the active keys)." },
  { "glm_key_last_seen_timestamp_seconds", "gauge", "When the key last sent a request (Unix time)." },
  { "glm_key_time_to_first_token_seconds", "histogram",
    "Time to the first generated token of streamed answers, by API key name." },
  { "glm_key_request_duration_seconds", "histogram", "Time to the answer's last byte, by API key name." },
  { "glm_key_budget_limit", "gauge", "The key's budget per window (glm:front.usageMeter.limits)." },
  { "glm_key_budget_used", "gauge", "What the key used of its budget in the current window (reserved included)." },
  { "glm_key_budget_refused_total", "counter", "Requests refused for the key's budget, by window." },
}

local function histogram(dict, lines, family, prefix, name, labels, buckets)
  local total = 0
  for i, bound in ipairs(buckets) do
    total = total + (dict:get(prefix .. ":" .. name .. ":" .. i) or 0)
    lines[#lines + 1] = string.format('%s_bucket{%s,le="%s"} %d', family, labels, tostring(bound), total)
  end
  local count = dict:get(prefix .. ":" .. name .. ":count") or 0
  lines[#lines + 1] = string.format('%s_bucket{%s,le="+Inf"} %d', family, labels, count)
  lines[#lines + 1] = string.format("%s_sum{%s} %s", family, labels, tostring(dict:get(prefix .. ":" .. name .. ":sum") or 0))
  lines[#lines + 1] = string.format("%s_count{%s} %d", family, labels, count)
end

--- Every key's series now. `share`, `budget`: meter_shares and meter_budget over the same dict.
-- Prefix affinity (meter_route.lua): the requests sent to each replica (`by`: key, its affinity
-- key; none, no key found: the least loaded), and those in flight on it now.
local function routing(dict, lines)
  local routed, in_flight = {}, {}
  for _, key in ipairs(dict:get_keys(0)) do
    local replica, by = key:match("^routed:(.+):(%a+)$")
    if replica then
      routed[#routed + 1] = string.format('glm_front_routed_total{replica="%s",by="%s"} %d',
        escape_label(replica), by, dict:get(key) or 0)
    end
    replica = key:match("^inflight:(.+)$")
    if replica then
      in_flight[#in_flight + 1] = string.format('glm_front_replica_in_flight{replica="%s"} %d',
        escape_label(replica), dict:get(key) or 0)
    end
  end
  if #routed == 0 then
    return
  end
  table.sort(routed)
  table.sort(in_flight)
  lines[#lines + 1] = "# HELP glm_front_routed_total Generation requests prefix affinity sent to each replica."
  lines[#lines + 1] = "# TYPE glm_front_routed_total counter"
  for _, line in ipairs(routed) do
    lines[#lines + 1] = line
  end
  lines[#lines + 1] = "# HELP glm_front_replica_in_flight Generation requests in flight on each replica, as the front routed them."
  lines[#lines + 1] = "# TYPE glm_front_replica_in_flight gauge"
  for _, line in ipairs(in_flight) do
    lines[#lines + 1] = line
  end
end

-- What the pod inherited from front pods that left (meter_handoff.lua), by the pod (`from`): the
-- usage table adds these to the pods' own once that pod's own series are gone; rates must not (they
-- jump by a whole pod's history at once). Shown only where a key has some: a Docker front never does.
local INHERITED = {
  { "glm_key_inherited_requests_total", "requests",
    "Requests that front pods which left counted, by API key name and status (their last counts)." },
  { "glm_key_inherited_prompt_tokens_total", "prompt", "Prompt tokens that front pods which left counted." },
  { "glm_key_inherited_completion_tokens_total", "completion",
    "Completion tokens that front pods which left counted." },
  { "glm_key_inherited_cached_prompt_tokens_total", "cached",
    "Cached prompt tokens that front pods which left counted." },
}

local function inherited(dict, lines, keys)
  if #keys == 0 then
    return
  end
  table.sort(keys)
  for _, family in ipairs(INHERITED) do
    local metric, prefix = family[1], "inherited_" .. family[2] .. ":"
    lines[#lines + 1] = "# HELP " .. metric .. " " .. family[3]
    lines[#lines + 1] = "# TYPE " .. metric .. " counter"
    for _, key in ipairs(keys) do
      if key:sub(1, #prefix) == prefix then
        local from, name = key:sub(#prefix + 1):match("^([^:]+):(.+)$")
        local status
        if name and family[2] == "requests" then
          name, status = name:match("^(.+):(%d+)$")
        end
        if name then
          lines[#lines + 1] = string.format('%s{client="%s",from="%s"%s} %s', metric, escape_label(name),
            escape_label(from), status and (',status="' .. status .. '"') or "", tostring(dict:get(key) or 0))
        end
      end
    end
  end
end

-- The families that are one counter of the dict a key: the counter's prefix.
local COUNTED = {
  glm_key_prompt_tokens_total = "prompt",
  glm_key_completion_tokens_total = "completion",
  glm_key_cached_prompt_tokens_total = "cached",
  glm_key_fair_share_refused_total = "refused",
  glm_key_unmetered_total = "unmetered",
  glm_key_last_seen_timestamp_seconds = "seen",
}

function M.exposition(dict, share, budget, capacity, now)
  local names = share:names()
  -- Weighed once a scrape: a share per key, each weighing every key, was quadratic in the keys.
  local shares = capacity > 0 and share:shares(capacity, now) or {}
  local statuses, inheritances = {}, {}
  for _, key in ipairs(dict:get_keys(0)) do
    local name, status = key:match("^requests:(.+):(%d+)$")
    if name then
      statuses[name] = statuses[name] or {}
      table.insert(statuses[name], tonumber(status))
    elseif key:find("^inherited_") then
      inheritances[#inheritances + 1] = key
    end
  end
  local lines = { "# HELP glm_fair_share_capacity The engine's slots the keys share now.",
    "# TYPE glm_fair_share_capacity gauge", "glm_fair_share_capacity " .. capacity }
  for _, family in ipairs(FAMILIES) do
    local metric, kind = family[1], family[2]
    lines[#lines + 1] = "# HELP " .. metric .. " " .. family[3]
    lines[#lines + 1] = "# TYPE " .. metric .. " " .. kind
    for _, name in ipairs(names) do
      local labels = 'client="' .. escape_label(name) .. '"'
      if metric == "glm_key_requests_total" then
        table.sort(statuses[name] or {})
        for _, status in ipairs(statuses[name] or {}) do
          lines[#lines + 1] = string.format('%s{%s,status="%d"} %d', metric, labels, status,
            dict:get("requests:" .. name .. ":" .. status) or 0)
        end
      elseif metric == "glm_key_time_to_first_token_seconds" then
        histogram(dict, lines, metric, "ttft", name, labels, M.TTFT_BUCKETS)
      elseif metric == "glm_key_request_duration_seconds" then
        histogram(dict, lines, metric, "duration", name, labels, M.DURATION_BUCKETS)
      elseif metric == "glm_key_budget_limit" or metric == "glm_key_budget_used" then
        for _, window in ipairs(budget:state(name, now)) do
          lines[#lines + 1] = string.format('%s{%s,window="%s"} %d', metric, labels, window.field,
            metric == "glm_key_budget_limit" and window.limit or window.used)
        end
      elseif metric == "glm_key_budget_refused_total" then
        for _, window in ipairs(budget:state(name, now)) do
          lines[#lines + 1] = string.format('%s{%s,window="%s"} %d', metric, labels, window.field,
            dict:get("budget_refused:" .. name .. ":" .. window.field) or 0)
        end
      elseif metric == "glm_key_in_flight" then
        lines[#lines + 1] = string.format("%s{%s} %s", metric, labels, tostring(share:held(name)))
      elseif metric == "glm_key_share" then
        lines[#lines + 1] = string.format("%s{%s} %s", metric, labels, tostring(shares[name] or 0))
      else
        local value = dict:get(COUNTED[metric] .. ":" .. name) or 0
        lines[#lines + 1] = string.format("%s{%s} %s", metric, labels, tostring(value))
      end
    end
  end
  inherited(dict, lines, inheritances)
  routing(dict, lines)
  return table.concat(lines, "\n") .. "\n"
end

return M
