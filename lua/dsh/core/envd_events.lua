--- dsh.core.envd_events: the binding of the core's envd stream reader
-- (core/include/dsh/envd_events.h).
--
-- Envelopes in, process events out: a data event's base64 is decoded in C
-- and handed out as bytes, every other message as its raw JSON text. Used by
-- dsh.envd's server streams; bytes can go straight from an HTTP response's
-- buffer into the reader (reader.sink) without a Lua string.
--
--   local r = envd_events.reader(max_message_bytes)
--   res:read_with(r.sink)              -- or r:push(string)
--   local kind, a, b, c = r:next()     -- "data", stream, bytes, offset | "message", json
--                                      -- | "end", json | nil (push more) | nil, err
--
-- Failures are `nil, err` with err.code "ENVELOPE", err.message the core's
-- text and err.status the core status name ("ELIMIT", "EFRAME", ...).
local F = require "dsh.core._ffi"
local errors = require "dsh.errors"
local ffi, C = F.ffi, F.C

local M = {}

local DATA, MESSAGE = C.DSH_ENVD_DATA, C.DSH_ENVD_MESSAGE
local STREAM_NAMES = { [C.DSH_ENVD_STDOUT] = "stdout", [C.DSH_ENVD_STDERR] = "stderr", [C.DSH_ENVD_PTY] = "pty" }

-- Data events are handed out in pieces of at most this many bytes. LuaJIT's
-- allocator maps every string of 128 KiB or more with mmap of its own and
-- unmaps it when collected, so a 256 KiB event (dshd's largest) would cost
-- 64 fresh page faults and a munmap; measured, ffi.string of 256 KiB runs at
-- 1.6 GB/s and of 64 KiB at over 20 GB/s. Pieces keep the bytes exactly and
-- carry their own offsets.
M.PIECE_BYTES = 65536

---@class dsh.EnvdEventsReader
---@field sink fun(ptr: ffi.cdata*, n: integer) pushes lent bytes (for dsh.core.http's read_with)
local Reader = {}
Reader.__index = Reader

local function live(self, fn)
  if getmetatable(self) ~= Reader then error("dsh.core.envd_events: " .. fn .. ": expected a reader", 3) end
  if not self._r then error("dsh.core.envd_events: " .. fn .. ": reader is closed", 3) end
  return self._r
end

local function fail(r, rc)
  local msg = ffi.string(C.dsh_envd_events_error(r))
  if msg == "" then msg = select(2, F.status(rc)) end
  return errors.new("ENVELOPE", msg, { status = (F.status(rc)) })
end

function Reader:__tostring()
  if not self._r then return "dsh.core.envd_events.reader (closed)" end
  return "dsh.core.envd_events.reader (max " .. self.max .. " bytes)"
end

--- A reader of one stream whose messages are at most max bytes.
---@param max integer 0 .. 2^32-1
---@return dsh.EnvdEventsReader
function M.reader(max)
  if type(max) ~= "number" or max < 0 or max > 0xFFFFFFFF or max ~= math.floor(max) then
    error("dsh.core.envd_events: reader: max must be an integer in 0..4294967295, got " .. tostring(max), 2)
  end
  local out = ffi.new("dsh_envd_events_t *[1]")
  if C.dsh_envd_events_new(max, out) ~= 0 then error("dsh.core.envd_events: reader: out of memory", 2) end
  local self = setmetatable({ _r = ffi.gc(out[0], C.dsh_envd_events_free), _ev = ffi.new("dsh_envd_event_t"),
    max = max }, Reader)
  self.sink = function(ptr, n)
    local rc = C.dsh_envd_events_push(live(self, "push"), ptr, n)
    if rc ~= 0 and not self._push_rc then self._push_rc = rc end
  end
  return self
end

--- Pushes a chunk (a string). Call only after next() returned nil without an
-- error (everything pushed before is used up).
---@param s string
function Reader:push(s)
  live(self, "push")
  if type(s) ~= "string" then error("dsh.core.envd_events: push: expected string, got " .. type(s), 2) end
  self.sink(s, #s)
end

-- The next piece of the data event in _ev (which still lends its bytes:
-- nothing is pushed until the event is used up).
function Reader:_piece()
  local ev, at = self._ev, self._piece_at
  local len = tonumber(ev.len)
  local n = len - at
  if n > M.PIECE_BYTES then n = M.PIECE_BYTES end
  self._piece_at = at + n < len and at + n or nil
  return "data", STREAM_NAMES[ev.stream], ffi.string(ev.data + at, n),
    ev.offset >= 0 and tonumber(ev.offset) + at or nil
end

--- The next event: "data", stream ("stdout", "stderr" or "pty"), bytes,
-- offset (nil when the event had none); "message", json; "end", json (the
-- end-of-stream message); nil when everything pushed is used up; nil, err on
-- a protocol error (sticky).
---@return string|nil kind
---@return any a stream name, JSON text, or err
---@return string|nil bytes
---@return integer|nil offset
function Reader:next()
  if self._piece_at then return self:_piece() end
  local r = self._r or live(self, "next")
  if self._push_rc then return nil, fail(r, self._push_rc) end
  local ev = self._ev
  local rc = C.dsh_envd_events_next(r, ev)
  if rc == 1 then
    local kind = ev.kind
    if kind == DATA then
      self._piece_at = 0
      return self:_piece()
    end
    return kind == MESSAGE and "message" or "end", ffi.string(ev.data, ev.len)
  elseif rc == 0 then
    return nil
  end
  return nil, fail(r, rc)
end

--- End of stream: true, or nil, err when it ended inside a message.
---@return true|nil, dsh.Error?
function Reader:finish()
  local r = live(self, "finish")
  local rc = C.dsh_envd_events_finish(r)
  if rc ~= 0 then return nil, fail(r, rc) end
  return true
end

--- Frees the reader now (idempotent).
function Reader:close()
  if self._r then
    C.dsh_envd_events_free(ffi.gc(self._r, nil))
    self._r = nil
  end
end

return M
