-- Prefix-affinity routing (docs/scaling.md "Prefix affinity"): a conversation goes back to the
-- replica that served its last turn, where vLLM's prefix cache still holds its history, unless that
-- replica carries more than its bounded share of the requests in flight.
--
-- The key: OpenAI's `prompt_cache_key` when the client sends one, else the conversation's leading
-- content as the body spells it: the raw text of `messages` (`input`, `prompt`) from its start
-- through the first user message (the system prompt and the question that opened the conversation,
-- which every later turn resends unchanged), at most LEAD_BYTES. Raw text, not a decoded table: a
-- body held in memory and one spilled to a file give the same key, whatever its size.
--
-- The choice: rendezvous hashing (highest random weight) over the names of the replicas in rotation,
-- so a replica that leaves or joins moves only the conversations that were, or will be, its own; with
-- bounded loads (Mirrokni, Thorup, Zadimoghaddam 2018): the first replica in the key's order whose
-- requests in flight are under ceil(factor x (all in flight + 1) / replicas). A spilled conversation
-- goes to its second choice, the same one each time.
--
-- Pure Lua but for ngx.md5 (tests/test_routing.py runs it in the real nginx's LuaJIT).
local M = {}

M.LEAD_BYTES = 64 * 1024
-- The leading content hashed at most: a system prompt past this is shared by the conversations that
-- begin with it (their own `prompt_cache_key` tells them apart).
M.READ_BYTES = 2 * M.LEAD_BYTES
-- How much of the body the key is looked for in (`tools` or other members may come first).
M.PREFIX = "glm_replica_"
-- A replica's upstream group in nginx.conf: this prefix and its name (nginx_conf.py, rotation.sh).

local QUOTE, BACKSLASH = 34, 92
local OPEN_OBJECT, CLOSE_OBJECT, OPEN_ARRAY, CLOSE_ARRAY = 123, 125, 91, 93
local LEAD = { messages = true, input = true, prompt = true }

-- The index of the quote that closes the string opening at `from`, or nil (cut off).
local function string_end(text, from)
  local i = from + 1
  while true do
    local at = text:find('[\\"]', i)
    if not at then
      return nil
    end
    if text:byte(at) == QUOTE then
      return at
    end
    i = at + 2
  end
end

-- The raw text of the value starting at `start`: an array through its first user message, anything
-- else whole; at most LEAD_BYTES either way.
local function lead_value(text, start)
  local limit = math.min(#text, start + M.LEAD_BYTES - 1)
  if text:byte(start) ~= OPEN_ARRAY then
    return text:sub(start, limit)
  end
  local depth, i, element = 0, start, nil
  while i <= limit do
    local byte = text:byte(i)
    if byte == QUOTE then
      i = string_end(text, i)
      if not i then
        break
      end
    elseif byte == OPEN_OBJECT or byte == OPEN_ARRAY then
      depth = depth + 1
      if depth == 2 then
        element = i
      end
    elseif byte == CLOSE_OBJECT or byte == CLOSE_ARRAY then
      depth = depth - 1
      if depth == 0 then
        return text:sub(start, i)
      end
      if depth == 1 and text:sub(element, i):find('"role"%s*:%s*"user"') then
        return text:sub(start, i)
      end
    end
    i = i + 1
  end
  return text:sub(start, limit)
end

--- The conversation's leading content in the body's first bytes `text`: the raw value of its first
--- top-level `messages`, `input` or `prompt` member (see above), or nil when none begins there.
function M.lead(text)
  local depth, i, n = 0, 1, #text
  while i <= n do
    local byte = text:byte(i)
    if byte == QUOTE then
      local close = string_end(text, i)
      if not close then
        return nil
      end
      if depth == 1 then
        local _, value = text:find("^%s*:%s*", close + 1)
        if value and value < n and LEAD[text:sub(i + 1, close - 1)] then
          return lead_value(text, value + 1)
        end
      end
      i = close
    elseif byte == OPEN_OBJECT or byte == OPEN_ARRAY then
      depth = depth + 1
    elseif byte == CLOSE_OBJECT or byte == CLOSE_ARRAY then
      depth = depth - 1
    end
    i = i + 1
  end
  return nil
end

--- The affinity key of a request: its `prompt_cache_key`, else its leading content; nil if neither.
function M.key(fields, prefix)
  local given = fields and fields.prompt_cache_key
  if type(given) == "string" and given ~= "" then
    return "key:" .. given
  end
  local lead = prefix and M.lead(prefix)
  return lead and "lead:" .. lead or nil
end

-- A replica's weight for a key (its rank in the key's order): 32 bits of md5(name, key's digest).
local function weight(name, digest)
  return tonumber(ngx.md5(name .. "\0" .. digest):sub(1, 8), 16)
end

--- The replicas in rotation in `key`'s order (rendezvous hashing), best first.
function M.order(names, key)
  local digest = ngx.md5(key)
  local ranked = {}
  for _, name in ipairs(names) do
    ranked[#ranked + 1] = { name = name, weight = weight(name, digest) }
  end
  table.sort(ranked, function(a, b)
    if a.weight ~= b.weight then
      return a.weight > b.weight
    end
    return a.name < b.name
  end)
  local order = {}
  for i, entry in ipairs(ranked) do
    order[i] = entry.name
  end
  return order
end

--- The replica for a request: the first in `key`'s order under the bound, where `load(name)` is its
--- requests in flight; with no key, the least loaded. `factor`: the bound's multiple of the mean.
function M.choose(names, key, load, factor)
  if #names == 0 then
    return nil
  end
  local loads, total = {}, 0
  for _, name in ipairs(names) do
    loads[name] = math.max(load(name) or 0, 0)
    total = total + loads[name]
  end
  local bound = math.ceil(factor * (total + 1) / #names)
  local order = key and M.order(names, key) or names
  local least
  for _, name in ipairs(order) do
    if key and loads[name] < bound then
      return name
    end
    if not least or loads[name] < loads[least] then
      least = name
    end
  end
  return least
end

--- The names in the rotation's list ("a b c": nginx's $glm_routes, rotation.sh writes it).
function M.names(list)
  local names = {}
  for name in (list or ""):gmatch("[^%s]+") do
    names[#names + 1] = name
  end
  return names
end

return M
