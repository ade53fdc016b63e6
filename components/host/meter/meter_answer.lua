-- Reading the engine's answers on their way to the client: the usage of a JSON answer, and the
-- server-sent events of a stream, each passed on the moment it is complete. A stream always asked
-- for usage on every event (meter_request.with_usage), so the tokens are known as they are made
-- and a client that hangs up is charged what it was sent; the client gets only what it asked for.
-- Pure Lua (no ngx): tests run it with luajit (tests/test_meter_lua.py).
local cjson = require("cjson.safe")

local M = {}

--- The last `"usage":{...}` object in `text`, as {prompt, completion, cached}; nil if there is none.
--- Chat and completions name them prompt_tokens/completion_tokens, /v1/responses
--- input_tokens/output_tokens (in `response.usage` of its `response.completed` event). `cached`: the
--- prompt tokens found in the engine's prefix cache, `prompt_tokens_details.cached_tokens` (vLLM with
--- --enable-prompt-tokens-details, on a hit; null otherwise) or `input_tokens_details.cached_tokens`.
function M.usage_of(text)
  local found
  for object in text:gmatch('"usage"%s*:%s*(%b{})') do
    found = object
  end
  local usage = found and cjson.decode(found)
  if type(usage) ~= "table" then
    return nil
  end
  local prompt = tonumber(usage.prompt_tokens or usage.input_tokens)
  local completion = tonumber(usage.completion_tokens or usage.output_tokens)
  if not prompt and not completion then
    return nil
  end
  local details = usage.prompt_tokens_details or usage.input_tokens_details
  local cached = type(details) == "table" and tonumber(details.cached_tokens) or 0
  return { prompt = prompt or 0, completion = completion or 0, cached = cached }
end

local TOKEN_PATTERNS = {
  '"content"%s*:%s*"[^"]', '"reasoning_content"%s*:%s*"[^"]', '"reasoning"%s*:%s*"[^"]',
  '"text"%s*:%s*"[^"]', '"tool_calls"%s*:%s*%[%s*{', '"type"%s*:%s*"response%.[%w_.]*%.delta"',
}

local function has_token(event)
  for _, pattern in ipairs(TOKEN_PATTERNS) do
    if event:find(pattern) then
      return true
    end
  end
  return false
end

local Stream = {}
Stream.__index = Stream

--- A stream's reader. `shape`: meter_request.shape's (asked_usage, asked_continuous, n: the
--- choices per prompt); `responses`: a /v1/responses stream (its own events, no stream_options).
--- Its `prompt` and `completion` are the tokens known so far; `cached`: the prompt tokens the engine
--- found cached, once the last usage (vLLM's final usage event, the only one that has them) came.
function M.Stream(shape, responses)
  return setmetatable({
    asked_usage = shape.asked_usage, asked_continuous = shape.asked_continuous, n = shape.n or 1,
    responses = responses,
    pending = "", prompt = 0, completion = 0, cached = 0, first_token = false, finished = false, final = false,
    per_choice = {}, per_prompt = {}, deltas = 0,
  }, Stream)
end

-- Whether the event's choices are empty (the totals' event): compact JSON by plain searches.
local function no_choices(event)
  if event:find('"choices":[]', 1, true) then
    return true
  end
  return not event:find('"choices":[{', 1, true) and event:find('"choices"%s*:%s*%[%s*%]') ~= nil
end

-- An event of chat or completions with usage on it: per choice while streaming (vLLM's continuous
-- usage counts each choice's own tokens), the totals on the last (`"choices":[]`).
function Stream:_note_usage(event, usage)
  if no_choices(event) then
    self.prompt, self.completion, self.cached, self.final = usage.prompt, usage.completion, usage.cached, true
    return
  end
  if self.final then
    return
  end
  local index = tonumber(event:match('"index"%s*:%s*(%d+)')) or 0
  self.per_choice[index] = usage.completion
  self.per_prompt[math.floor(index / self.n)] = usage.prompt
  local prompt, completion = 0, 0
  for _, tokens in pairs(self.per_prompt) do
    prompt = prompt + tokens
  end
  for _, tokens in pairs(self.per_choice) do
    completion = completion + tokens
  end
  self.prompt, self.completion = prompt, completion
end

-- The usage object of an event, found without decoding the event: its bounds and its counts (the
-- cached tokens of its `prompt_tokens_details`, the only object nested in it, if any).
-- vLLM writes compact JSON (`"usage":{"prompt_tokens":12,...}`), found by a plain search; spaces are
-- tolerated.
local function usage_span(event)
  local key, after = event:find('"usage":{', 1, true)
  if not key then
    key, after = event:find('"usage"%s*:%s*{')
  end
  if not key then
    return nil
  end
  local first, last = event:find("%b{}", after)
  if not first then
    return nil
  end
  local object = event:sub(first, last)
  local prompt = tonumber(object:match('"prompt_tokens"%s*:%s*(%d+)') or object:match('"input_tokens"%s*:%s*(%d+)'))
  local completion = tonumber(
    object:match('"completion_tokens"%s*:%s*(%d+)') or object:match('"output_tokens"%s*:%s*(%d+)')
  )
  if not prompt and not completion then
    return nil
  end
  local cached = tonumber(object:match('"cached_tokens"%s*:%s*(%d+)')) or 0
  return key, last, { prompt = prompt or 0, completion = completion or 0, cached = cached }
end

local COMMA, CR, LF = string.byte(",\r\n", 1, 3)

-- One complete event: what the client gets of it ("" drops it). The common one, a token with the
-- usage the meter asked for, costs a few plain searches and one cut: nothing is decoded.
function Stream:_event(event)
  if not self.first_token and has_token(event) then
    self.first_token = true
  end
  if self.responses then
    return self:_responses_event(event)
  end
  if not event:find('"usage"', 1, true) then
    if event:find("[DONE]", 1, true) then
      self.finished = true
    end
    return event
  end
  local from, to, usage = usage_span(event)
  if not usage then
    return event
  end
  self:_note_usage(event, usage)
  if self.final then
    return self.asked_usage and event or "" -- the usage event the meter asked for
  end
  if self.asked_continuous then
    return event
  end
  -- The client did not ask for usage on every event: the member goes, with its comma.
  if event:byte(from - 1) == COMMA then
    return event:sub(1, from - 2) .. event:sub(to + 1)
  end
  local head = event:sub(1, from - 1)
  local comma = head:find(",%s*$")
  if comma then
    return head:sub(1, comma - 1) .. event:sub(to + 1)
  end
  return head .. event:sub(to + 1):gsub("^%s*,", "", 1)
end

-- /v1/responses has no usage until `response.completed`: until then each text delta counts as one
-- token made (what the client was sent), so a client that hangs up is charged that much.
function Stream:_responses_event(event)
  local kind = event:match('"type"%s*:%s*"(response%.[%w_.]+)"') or ""
  if kind:find("%.delta$") then
    self.deltas = self.deltas + 1
    if not self.final then
      self.completion = self.deltas
    end
  elseif kind == "response.completed" or kind == "response.incomplete" or kind == "response.failed" then
    self.finished = true
    local usage = M.usage_of(event)
    if usage then
      self.prompt, self.completion, self.cached, self.final = usage.prompt, usage.completion, usage.cached, true
    end
  end
  return event
end

-- Where the event that starts at `from` ends (the last byte of its blank line, "\n\n" or
-- "\r\n\r\n"), by plain searches for its newlines; nil while it has not ended.
local function event_end(text, from)
  while true do
    local newline = text:find("\n", from, true)
    if not newline then
      return nil
    end
    local after = newline + 1
    if text:byte(after) == CR then
      after = after + 1
    end
    if text:byte(after) == LF then
      return after
    end
    from = newline + 1
  end
end

--- Take one piece of the stream as it arrived; returns what goes on to the client now (complete
--- events; a partial one waits for its end). `last`: the stream's end (what is left goes as is).
function Stream:feed(piece, last)
  local text = self.pending == "" and (piece or "") or self.pending .. (piece or "")
  local finish = event_end(text, 1)
  if finish == #text then -- the common piece: one whole event, as the engine writes them
    self.pending = ""
    return self:_event(text)
  end
  local out, from = {}, 1
  while finish do
    out[#out + 1] = self:_event(text:sub(from, finish))
    from = finish + 1
    finish = event_end(text, from)
  end
  self.pending = text:sub(from)
  if last and self.pending ~= "" then
    out[#out + 1] = self.pending
    self.pending = ""
  end
  return table.concat(out)
end

return M
