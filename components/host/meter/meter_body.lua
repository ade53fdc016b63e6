-- The request's body, as the meter reads and changes it. In memory (nginx's `body`), or in nginx's
-- own temporary file past client_body_buffer_size, which is read slice by slice so that neither the
-- loop every stream shares nor the worker's memory ever holds the whole body. The fields are
-- meter_request.lua's; a stream is made to ask vLLM for usage on every event (request.with_usage).
local request = require("meter_request")

local M = {}

--- The request's top-level fields; its body (in memory) or the path of nginx's file; its size; and,
--- for prefix affinity (`head_bytes`), its first bytes. `capacity`: the engine's slots, which bound
--- what the scanner counts of a large body's prompts.
function M.read(capacity, head_bytes)
  ngx.req.read_body()
  local body = ngx.req.get_body_data()
  if body then
    local head = head_bytes and body:sub(1, head_bytes)
    return request.fields(body, function() ngx.sleep(0.001) end), body, nil, #body, head
  end
  local path = ngx.req.get_body_file()
  local file = path and io.open(path, "rb")
  if not file then
    return nil, nil, nil
  end
  local size = file:seek("end")
  file:seek("set")
  local scanner = request.Scanner(capacity > 0 and capacity or nil)
  local head = head_bytes and file:read(head_bytes)
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

-- A large stream's body: copied slice by slice into a new temporary file, its closing brace
-- replaced by request.with_usage's; nginx sends that file and removes it afterwards.
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

--- A stream asks vLLM for usage on every event (its body in memory, or nginx's file at `path`).
function M.ask_usage(body, path)
  local rewritten = body and request.with_usage(body)
  if rewritten then
    ngx.req.set_body_data(rewritten)
  elseif path and not rewrite_file(path) then
    ngx.log(ngx.WARN, "usage meter: a stream's body could not ask for usage; counted from what it was sent")
  end
end

return M
