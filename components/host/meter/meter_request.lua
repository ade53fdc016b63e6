-- What a generation request asks of the engine, read from its JSON body without trusting it:
-- whether it streams (as vLLM's pydantic models read `stream`), how many sequences it will run
-- (`n` x its prompts: the weight it takes of the engine's slots), and the body vLLM gets (a stream
-- always asks for usage, on every event, so the meter can count it even when the client leaves).
-- Pure Lua (no ngx): tests run it with luajit (tests/test_meter_lua.py).
local cjson = require("cjson.safe")

local M = {}

M.SMALL_BODY = 64 * 1024
-- Bodies up to this are decoded with cjson; larger ones are scanned in slices (M.Scanner), never
-- decoded whole: a 20 MiB `[[],[],...]` must not hold the loop every stream shares, nor its memory.
M.SLICE = 64 * 1024
M.FIELD_LIMIT = 4096
-- A top-level value longer than this is not kept by the scanner (the meter never needs one).

local LAX_TRUE = { ["1"] = true, on = true, t = true, ["true"] = true, y = true, yes = true }
local LAX_FALSE = { ["0"] = true, off = true, f = true, ["false"] = true, n = true, no = true }

--- pydantic's lax bool (what vLLM's request models accept for `stream` and `stream_options.*`):
--- true, false, 0, 1, and the strings above in any case. nil: absent; "invalid": vLLM answers 400.
function M.lax_bool(value)
  if value == nil or value == cjson.null then
    return nil
  end
  local kind = type(value)
  if kind == "boolean" then
    return value
  elseif kind == "number" then
    if value == 1 then
      return true
    elseif value == 0 then
      return false
    end
  elseif kind == "string" then
    local word = value:lower()
    if LAX_TRUE[word] then
      return true
    elseif LAX_FALSE[word] then
      return false
    end
  end
  return "invalid"
end

--- How many prompts a `prompt` (or the scanner's summary of one) holds, as vLLM reads it: a string
--- or a list of token ids is one prompt; a list of strings or of token-id lists is one each.
local function prompt_count(prompt)
  if type(prompt) ~= "table" then
    return 1
  end
  if prompt.scanned then
    if prompt.count == 0 or prompt.first == "number" then
      return 1
    end
    return prompt.count
  end
  if #prompt == 0 or type(prompt[1]) == "number" then
    return 1
  end
  return #prompt
end

--- The request's shape: {stream, asked_usage, asked_continuous, n, weight, max_tokens, invalid, more}
--- (`more`: the scanner stopped counting prompts past the engine's slots; the weight is a bound). `fields` are the
--- body's top-level values (cjson's table, or the scanner's).
function M.shape(fields, route)
  local shape = { stream = false, asked_usage = false, asked_continuous = false, weight = 1 }
  if type(fields) ~= "table" then
    shape.invalid = true -- vLLM answers 400 with its own message; one slot while it does
    return shape
  end
  local stream = M.lax_bool(fields.stream)
  shape.stream = stream == true
  local options = fields.stream_options
  if type(options) == "table" then
    shape.asked_usage = M.lax_bool(options.include_usage) == true
    shape.asked_continuous = shape.asked_usage and M.lax_bool(options.continuous_usage_stats) == true
  end
  local n = tonumber(fields.n)
  if n == nil or n < 1 or n ~= math.floor(n) then
    n = 1 -- vLLM refuses it; the request still takes a slot until it does
  end
  local prompts = route == "/v1/completions" and prompt_count(fields.prompt) or 1
  shape.n, shape.weight = n, n * prompts
  shape.more = type(fields.prompt) == "table" and fields.prompt.more or nil
  shape.max_tokens = tonumber(fields.max_completion_tokens or fields.max_tokens or fields.max_output_tokens)
  shape.prompt_bound = M.prompt_bound(fields, route)
  return shape
end

M.PER_MESSAGE = 16
-- Tokens a chat template may add around each message and the answer (role markers, the generation
-- prompt): a bound, not a count.

local function text_bytes(content)
  if type(content) == "string" then
    return #content
  elseif type(content) == "table" then
    local total = 0
    for _, part in ipairs(content) do
      if type(part) ~= "table" or (part.type ~= "text" and part.type ~= "input_text") then
        return nil -- an image or audio part: its tokens are not bounded by its bytes
      end
      total = total + #(part.text or "")
    end
    return total
  end
  return nil
end

--- An upper bound of the prompt's tokens, from its text (a token covers at least one byte of
--- text; the template adds at most PER_MESSAGE a message): nil where the text does not bound it (an
--- image, a body only scanned). All prompts of a completion together, once (the caller multiplies
--- by n as the engine counts).
function M.prompt_bound(fields, route)
  local total = M.PER_MESSAGE
  if route == "/v1/chat/completions" and type(fields.messages) == "table" and not fields.messages.scanned then
    for _, message in ipairs(fields.messages) do
      local bytes = type(message) == "table" and text_bytes(message.content)
      if not bytes then
        return nil
      end
      total = total + bytes + M.PER_MESSAGE
    end
  elseif route == "/v1/completions" and fields.prompt ~= nil and not (type(fields.prompt) == "table" and fields.prompt.scanned) then
    local prompts = type(fields.prompt) == "table" and fields.prompt or { fields.prompt }
    if type(prompts[1]) == "number" then
      prompts = { prompts }
    end
    for _, prompt in ipairs(prompts) do
      -- a string's bytes, or a token-id list's length
      total = total + (type(prompt) == "string" and #prompt or type(prompt) == "table" and #prompt or 0) + M.PER_MESSAGE
    end
  elseif route == "/v1/responses" and type(fields.input) == "string" then
    total = total + #fields.input + M.PER_MESSAGE
  else
    return nil
  end
  if fields.tools ~= nil then
    local tools = cjson.encode(fields.tools)
    total = total + (tools and #tools or 0)
  end
  return total
end

--- The body vLLM gets for a stream of chat or completions: `stream_options` with usage on every
--- event, appended as the object's last member (Python's json keeps the last of duplicate keys,
--- so it replaces any the client sent; the client still gets only what it asked: meter_answer).
function M.with_usage(body)
  local last = body:find("}%s*$")
  if not last then
    return nil
  end
  local head = body:sub(1, last - 1)
  local separator = head:find("^%s*{%s*$") and "" or ","
  return head .. separator .. '"stream_options":{"include_usage":true,"continuous_usage_stats":true}}'
end

-- ---- the scanner: top-level fields of a large body, in slices ---------------------------------

local QUOTE, BACKSLASH = 34, 92
local OPEN_OBJECT, CLOSE_OBJECT, OPEN_ARRAY, CLOSE_ARRAY = 123, 125, 91, 93
local COMMA, COLON = 44, 58
local WANTED = { stream = true, stream_options = true, n = true, max_tokens = true, prompt_cache_key = true,
  max_completion_tokens = true, max_output_tokens = true, model = true }
local COUNTED = { prompt = true }

local Scanner = {}
Scanner.__index = Scanner

--- A scanner fed the body slice by slice (:feed), then :fields(): the top-level members the meter
--- reads (short values decoded, `prompt` summarized as {scanned, count, first}), or nil if the body
--- is not a JSON object. Its memory is the kept values, whatever the body's size or shape. `limit`:
--- past that many prompts it stops (`more`: the count is a lower bound; the request is refused).
function M.Scanner(limit)
  return setmetatable({
    limit = limit,
    depth = 0, in_string = false, escaped = false, started = false, broken = false,
    key = nil, key_parts = nil, expect_key = false, value_parts = nil, value_size = 0,
    counted = nil, values = {},
  }, Scanner)
end

function Scanner:_keep(text)
  if self.value_parts and self.value_size + #text <= M.FIELD_LIMIT then
    self.value_parts[#self.value_parts + 1] = text
    self.value_size = self.value_size + #text
  else
    self.value_parts = nil
  end
end

-- A top-level member ended (at a comma or the closing brace): decode what was kept of it.
function Scanner:_end_member()
  if self.key and self.value_parts then
    local value = cjson.decode(table.concat(self.value_parts))
    if value ~= nil then
      self.values[self.key] = value
    end
  elseif self.key and self.counted then
    self.values[self.key] = self.counted
  end
  self.key, self.value_parts, self.value_size, self.counted = nil, nil, 0, nil
end

function Scanner:feed(slice)
  if self.broken or self.done then
    return
  end
  local size = #slice
  -- Where the open capture (a key's text, or a kept value's) starts in this slice.
  local mark = 1
  local i = 0
  while i < size do
    i = i + 1
    local byte = slice:byte(i)
    if self.in_string and not self.escaped and byte ~= BACKSLASH and byte ~= QUOTE then
      -- Inside a string only a backslash or a quote matters: jump to the next (C's search).
      i = (slice:find('[\\"]', i + 1) or size + 1) - 1
    elseif self.in_string then
      if self.escaped then
        self.escaped = false
      elseif byte == BACKSLASH then
        self.escaped = true
      elseif byte == QUOTE then
        self.in_string = false
        if self.key_parts then
          self.key_parts[#self.key_parts + 1] = slice:sub(mark, i - 1)
          self.key = table.concat(self.key_parts)
          self.key_parts = nil
        end
      end
    elseif byte == QUOTE then
      self.in_string = true
      if self.depth == 1 and self.expect_key then
        self.key_parts, self.expect_key, mark = {}, false, i + 1
      elseif self.depth == 2 and self.counted and self.counted.count == 0 then
        self.counted.count, self.counted.first = 1, "string"
      end
    elseif byte == OPEN_OBJECT or byte == OPEN_ARRAY then
      if not self.started then
        if byte ~= OPEN_OBJECT then
          self.broken = true
          return
        end
        self.started, self.expect_key = true, true
      elseif self.depth == 2 and self.counted and self.counted.count == 0 then
        self.counted.count, self.counted.first = 1, "list"
      end
      self.depth = self.depth + 1
    elseif byte == CLOSE_OBJECT or byte == CLOSE_ARRAY then
      self.depth = self.depth - 1
      if self.depth == 0 then
        if self.value_parts then
          self:_keep(slice:sub(mark, i - 1))
        end
        self:_end_member()
        self.done = true
        return
      elseif self.depth < 0 then
        self.broken = true
        return
      end
    elseif byte == COMMA then
      if self.depth == 1 then
        if self.value_parts then
          self:_keep(slice:sub(mark, i - 1))
        end
        self:_end_member()
        self.expect_key = true
      elseif self.depth == 2 and self.counted then
        self.counted.count = self.counted.count + 1
        if self.limit and self.counted.count > self.limit and self.counted.first ~= "number" then
          -- More prompts than the engine runs at once: refused whatever follows, no need to read on.
          self.counted.more, self.done = true, true
          self.values[self.key] = self.counted
          return
        end
      end
    elseif byte == COLON and self.depth == 1 and self.key then
      if WANTED[self.key] then
        self.value_parts, self.value_size, mark = {}, 0, i + 1
      elseif COUNTED[self.key] then
        self.counted = { scanned = true, count = 0 }
      end
    elseif self.depth == 2 and self.counted and self.counted.count == 0 and byte > 32 then
      self.counted.count, self.counted.first = 1, "number"
    end
  end
  if self.value_parts then
    self:_keep(slice:sub(mark, size))
  elseif self.key_parts then
    self.key_parts[#self.key_parts + 1] = slice:sub(mark, size)
  end
end

function Scanner:fields()
  if self.broken or not self.done then
    return nil
  end
  return self.values
end

--- The top-level fields of a body held in memory (a small one: cjson; a large one: the scanner,
--- with `pause()` called between slices so other requests run).
function M.fields(body, pause)
  if #body <= M.SMALL_BODY then
    local decoded = cjson.decode(body)
    return type(decoded) == "table" and decoded or nil
  end
  local scanner = M.Scanner()
  for from = 1, #body, M.SLICE do
    scanner:feed(body:sub(from, from + M.SLICE - 1))
    if pause then
      pause()
    end
  end
  return scanner:fields()
end

return M
