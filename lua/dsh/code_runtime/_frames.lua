--- dsh.code_runtime._frames: a run's frames on the host, through the C
-- bridge (dsh.core.bridge), so no payload byte is looked at in Lua.
--
-- Reader: the runner's frames become messages as their bytes arrive. The C
-- decoder checks the frame (base64, maxFrameBytes, UTF-8, JSON, escapes,
-- numbers); here tokens become only what the host reads of a message:
--   type, id, global, name, text, more, ok, message   scalars as they are (a
--                                                     container: M.NOT_SCALAR)
--   error                                             a JSON value
--   args, value                                       the lossless value the
--     token array holds (harness-behaviour.md §3.3), decoded as it arrives;
--     M.BAD when that wire is malformed or not lossless, M.NOT_ARRAY when it
--     is not an array
--   bytes                                             what the message holds: its
--     strings' bytes plus VALUE_COST for each token
-- Other members are skipped unbuilt. A frame whose root is not an object is
-- M.IGNORED. A frame that fails a check fails the reader (dsh.core.frame's
-- messages), after the messages of the frames before it.
--
--   reader:push(chunk)
--   repeat local m, err = reader:next() ... until m == nil   -- false: work left, call again
--   reader.work: bytes decoded or built since the caller last reset it (for pacing)
--
-- Writer: one frame of the host's, built in C (strings checked as UTF-8 and
-- escaped there), sent as pieces of at most PIECE characters. It is the sink
-- dsh.code_runtime._wire's encode_into and encode_json_into write to.
local bridge = require "dsh.core.bridge"
local utf8 = require "dsh.core.utf8"
local wire = require "dsh.code_runtime._wire"

local M = {}

M.PIECE = 1048576 -- characters per stdin write (dsh.providers.subprocess_e2b's piece)
M.PACE_BYTES = 2097152 -- work between two turns of the loop
M.VALUE_COST = 16 -- bytes a decoded value costs beyond its string bytes (a table slot)

M.NOT_SCALAR = setmetatable({}, { __tostring = function() return "not a scalar" end })
M.NOT_ARRAY = setmetatable({}, { __tostring = function() return "not an array" end })
M.BAD = setmetatable({}, { __tostring = function() return "not lossless" end })
M.IGNORED = setmetatable({}, { __tostring = function() return "ignored frame" end })

local FALSE, TRUE = bridge.FALSE, bridge.TRUE
local NUMBER, STRING, KEY = bridge.NUMBER, bridge.STRING, bridge.KEY
local ARRAY, OBJECT, END, FRAME = bridge.ARRAY, bridge.OBJECT, bridge.END, bridge.FRAME

local SCALAR_KEYS = { type = true, id = true, global = true, name = true, text = true, more = true, ok = true,
  message = true }
local WIRE_KEYS = { args = true, value = true }

-- Reader modes
local ROOT, ENV, VALUE, SKIP, GEN, LL, LL_GEN, AFTER, IGNORE = 1, 2, 3, 4, 5, 6, 7, 8, 9

---@class dsh.code_runtime.FrameReader
local Reader = {}
Reader.__index = Reader
Reader.__tostring = function(r) return "dsh.code_runtime.frames.reader(" .. tostring(r.d) .. ")" end

function M.reader(max)
  local r = setmetatable({ d = bridge.decoder(max), q = {}, qh = 1, qt = 0, more = false, work = 0 }, Reader)
  r:_reset()
  return r
end

function Reader:_reset()
  self.mode, self.msg, self.key, self.bytes, self.tokens = ROOT, nil, nil, 0, 0
  self.gen, self.ll, self.skip, self.back = nil, nil, 0, nil
end

--- true, or nil, err (the decoder failed).
function Reader:push(chunk)
  local ok, err = self.d:push(chunk)
  if not ok then
    self.failed = err
    return nil, err
  end
  self.more = true
  self.work = self.work + #chunk
  return true
end

-- A scalar token's value; strings also say whether they are UTF-8.
function Reader:_scalar(k, i)
  if k == STRING then
    local d = self.d
    local n = d:length(i)
    self.bytes, self.work = self.bytes + n, self.work + n
    local s, wtf8 = d:string(i)
    return s, not wtf8
  elseif k == NUMBER then
    return self.d:number(i), true
  elseif k == TRUE then
    return true, true
  elseif k == FALSE then
    return false, true
  end
  return wire.null, true
end

-- Generic JSON (an error object, a marker): frames {container, is_array, key}.
-- Returns true and the value once the value that started it is complete.
local function gen_feed(r, k, i)
  local g = r.gen
  local value
  if k == OBJECT or k == ARRAY then
    g[#g + 1] = { k == ARRAY and wire.array {} or {}, k == ARRAY, nil }
    return false
  elseif k == KEY then
    local n = r.d:length(i)
    r.bytes, r.work = r.bytes + n, r.work + n
    g[#g].key = (r.d:string(i))
    return false
  elseif k == END then
    value = table.remove(g)[1]
  else
    value = r:_scalar(k, i)
  end
  local top = g[#g]
  if not top then return true, value end
  if top[2] then top[1][#top[1] + 1] = value else top[1][top.key] = value top.key = nil end
  return false
end

-- Skips a value's tokens: container tokens count depth; back is the mode after.
function Reader:_skip_value(k, back)
  if k == OBJECT or k == ARRAY then
    self.mode, self.skip, self.back = SKIP, 1, back
  else
    self.mode = back
  end
end

function Reader:_frame_end(tokens)
  local m = self.mode == AFTER and self.msg or M.IGNORED
  if m ~= M.IGNORED then m.bytes = self.bytes + (self.tokens + tokens) * M.VALUE_COST end
  self.qt = self.qt + 1
  self.q[self.qt] = m
  self:_reset()
end

function Reader:_consume(n)
  local d = self.d
  local start = 0 -- where the frame under way began in this batch
  for i = 1, n do
    local k = d:kind(i)
    local mode = self.mode
    if k == FRAME then
      self:_frame_end(i - 1 - start)
      start = i
    elseif mode == SKIP then
      if k == OBJECT or k == ARRAY then
        self.skip = self.skip + 1
      elseif k == END then
        self.skip = self.skip - 1
        if self.skip == 0 then self.mode = self.back end
      end
    elseif mode == LL then
      local ll = self.ll
      if k == END then
        local v = ll:finish()
        self.msg[self.key] = v == nil and M.BAD or v
        self.mode = ENV
      elseif ll.err or k == ARRAY then -- a token cannot be an array: malformed
        if not ll.err then ll.err = "a malformed token" end
        self:_skip_value(k, LL)
      elseif k == OBJECT then
        self.gen = { { {}, false, nil } }
        self.mode = LL_GEN
      else
        ll:feed(self:_scalar(k, i))
      end
    elseif mode == LL_GEN then
      local done, v = gen_feed(self, k, i)
      if done then
        self.ll:feed(v)
        self.mode = LL
      end
    elseif mode == GEN then
      local done, v = gen_feed(self, k, i)
      if done then
        self.msg[self.key] = v
        self.mode = ENV
      end
    elseif mode == VALUE then
      local key = self.key
      if WIRE_KEYS[key] then
        if k == ARRAY then
          self.ll, self.mode = wire.token_reader(), LL
        else
          self.msg[key] = M.NOT_ARRAY
          self:_skip_value(k, ENV)
        end
      elseif key == "error" then
        if k == OBJECT or k == ARRAY then
          self.gen = { { k == ARRAY and wire.array {} or {}, k == ARRAY, nil } }
          self.mode = GEN
        else
          self.msg[key] = (self:_scalar(k, i))
          self.mode = ENV
        end
      elseif SCALAR_KEYS[key] then
        if k == OBJECT or k == ARRAY then
          self.msg[key] = M.NOT_SCALAR
          self:_skip_value(k, ENV)
        else
          self.msg[key] = (self:_scalar(k, i))
          self.mode = ENV
        end
      else
        self:_skip_value(k, ENV)
      end
    elseif mode == ENV then
      if k == KEY then
        self.key = d:length(i) <= 16 and (d:string(i)) or "" -- the host reads no longer name
        self.mode = VALUE
      else -- the envelope's END
        self.mode = AFTER
      end
    elseif mode == ROOT then
      if k == OBJECT then
        self.msg, self.mode = {}, ENV
      else
        self.mode = IGNORE
      end
    end -- IGNORE, AFTER: nothing until FRAME
  end
  self.tokens = self.tokens + n - start
end

--- The next message; false when work is left (call again); nil when
-- everything pushed is used (push more); nil, err when a frame failed.
function Reader:next()
  if self.qh <= self.qt then
    local m = self.q[self.qh]
    self.q[self.qh] = nil
    self.qh = self.qh + 1
    if self.qh > self.qt then self.qh, self.qt = 1, 0 end
    return m
  end
  if self.failed then return nil, self.failed end
  if not self.more then return nil end
  local n, more, err = self.d:next()
  self:_consume(n)
  self.d:trim()
  self.more = more
  if err then self.failed = err end
  if self.qh <= self.qt then return self:next() end
  if err then return nil, err end
  if more then return false end
  return nil
end

--- End of stream: true, or nil, err (a partial frame was left).
function Reader:finish()
  if self.failed then return nil, self.failed end
  return self.d:finish()
end

function Reader:close()
  self.d:close()
  self.q = {}
end

-- Writer ---------------------------------------------------------------------------

---@class dsh.code_runtime.FrameWriter
local Writer = {}
Writer.__index = Writer
Writer.__tostring = function(w) return "dsh.code_runtime.frames.writer(" .. w:len() .. " bytes)" end

--- A frame of at most max JSON bytes; pause(bytes), if given, is called
-- between the slices of a long string.
function M.writer(max, pause)
  return setmetatable({ e = bridge.encoder(max), pause = pause }, Writer)
end

function Writer:raw(text) return self.e:raw(text) end
function Writer:string(s) return self.e:string(s, self.pause) end
function Writer:number(x) return self.e:number(x) end
function Writer:len() return self.e:len() end
function Writer:reset() self.e:reset() end

--- s as a JSON string, its invalid bytes replaced by U+FFFD (text the host
-- wrote, such as an error message, is not rejected for its bytes).
function Writer:text(s)
  local ok, err = self:string(s)
  if ok ~= false then return ok, err end
  local st = utf8.stream { lossy = true }
  return self:string(st:feed(s) .. st:finish())
end

--- The next piece and whether more follow (the last ends with "\n").
function Writer:emit()
  return self.e:emit(M.PIECE)
end

function Writer:close()
  self.e:close()
end

return M
