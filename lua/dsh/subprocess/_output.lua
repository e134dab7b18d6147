--- dsh.subprocess._output: where a subprocess's output goes on the host.
--
-- Two sinks, shared by every subprocess backend:
--   collector  the one code-point-safe tail reader of the project: counts every
--              byte, keeps the last maxBytes of them starting on a code-point
--              boundary, holds back an incomplete trailing sequence until it
--              completes (or the stream ends), and answers readFrom(offset)
--              without consuming anything (reference §2.3 "Collect reader").
--   pipe       a byte-faithful queue the caller drains with read(); the producer
--              waits while more than HIGH_WATER bytes are unread, so a slow
--              reader slows the process down instead of growing memory.
-- Offsets are byte offsets into the stream; text is raw bytes (never replaced
-- with U+FFFD), so offsets stay exact.
local async = require "dsh.async"
local errors = require "dsh.errors"
local utf8 = require "dsh.core.utf8"

local M = {}
local lead_len -- defined below, with the collector

M.OFFSET_MESSAGE = "subprocess output offset must be a non-negative safe integer"
M.HIGH_WATER = 256 * 1024
local MAX_SAFE = 2 ^ 53 - 1

--- Length (0..3) of an incomplete UTF-8 sequence at the end of s: a lead byte
-- followed by fewer continuation bytes than it announces. Invalid bytes are
-- never held (they cannot complete).
function M.incomplete_suffix(s)
  local n = #s
  for i = n, math.max(1, n - 3), -1 do
    local b = s:byte(i)
    if b < 0x80 or b >= 0xC0 then
      local need = lead_len(b)
      local have = n - i + 1
      if need > have then return have end
      return 0
    end
  end
  return 0
end

function lead_len(b)
  return (b >= 0xC2 and b <= 0xDF) and 2 or (b >= 0xE0 and b <= 0xEF) and 3
    or (b >= 0xF0 and b <= 0xF4) and 4 or 0
end

-- Index i of s, moved past the rest of a code point that starts before it
-- (an offset inside a code point reads from the next boundary).
local function boundary_after(s, i)
  local j = i
  while j > 1 and j > i - 3 and s:byte(j) >= 0x80 and s:byte(j) < 0xC0 do j = j - 1 end
  if j < i then
    local need = lead_len(s:byte(j))
    if need > 0 and j + need > i then return j + need end
  end
  return i
end

-- Collector -------------------------------------------------------------------

---@class dsh.subprocess.ReadResult
---@field text string
---@field nextOffset integer
---@field lossy boolean
---@field spillPath string|nil

---@class dsh.subprocess.Collector
---@field maxBytes integer
---@field spillMax integer|nil    spill.maxBytes when the stream spills
---@field spillPath string|nil    set by the backend once the spill file exists
---@field total integer           bytes received
local Collector = {}
Collector.__index = Collector
Collector.__tostring = function(c)
  return string.format("dsh.subprocess.collector(%d bytes, %d retained%s)", c.total, #c._tail,
    c._ended and ", ended" or "")
end

---@param max_bytes integer
---@param spill {maxBytes: integer}|nil
---@return dsh.subprocess.Collector
function M.collector(max_bytes, spill)
  return setmetatable({
    maxBytes = max_bytes, spillMax = spill and spill.maxBytes or nil, total = 0,
    _complete = 0, -- bytes up to the last code-point boundary released so far
    _start = 0,    -- stream offset of _tail's first byte
    _tail = "",
    _pending = "",
  }, Collector)
end

function Collector:_append(whole)
  if whole == "" then return end
  self._complete = self._complete + #whole
  local max = self.maxBytes
  if #whole >= max then
    self._tail = utf8.tail(whole, max)
  else
    self._tail = utf8.tail(self._tail .. whole, max)
  end
  self._start = self._complete - #self._tail
end

--- Feed bytes as they arrive.
function Collector:push(s)
  if s == "" or self._ended then return end
  self.total = self.total + #s
  local data = self._pending .. s
  local hold = M.incomplete_suffix(data)
  self._pending = data:sub(#data - hold + 1)
  if hold == 0 then self._pending = "" end
  self:_append(data:sub(1, #data - hold))
  if self._watch then self._watch(s) end
end

--- Call fn(bytes) with every piece pushed from now on, after it was kept
-- (one watcher; nil removes it). For a caller that looks for something in
-- the stream as it arrives, as dsh.bash looks for its shell's exit.
---@param fn fun(bytes:string)|nil
function Collector:watch(fn)
  self._watch = fn
end

--- n bytes were lost before the next push (a replay gap after a reconnect):
-- they count in total but nothing before them is retained any more.
function Collector:skip(n)
  if n <= 0 or self._ended then return end
  self.total = self.total + n
  self._pending = ""
  self._complete = self.total
  self._tail = ""
  self._start = self._complete
end

--- End of stream: an incomplete trailing sequence will never complete, so it
-- is released as it is.
function Collector:finish()
  if self._ended then return end
  local p = self._pending
  self._pending = ""
  self:_append(p)
  self._ended = true
end

--- Bytes before the retained tail (the ones readFrom(0) cannot return).
function Collector:dropped()
  return self._start
end

--- Non-consuming read from a byte offset (reference §2.3): the text from
-- offset (the whole retained tail when offset is older than it: lossy),
-- nextOffset = the end of what is readable now, spillPath only when lossy and
-- a complete spill exists.
---@param offset integer
---@return dsh.subprocess.ReadResult
function Collector:readFrom(offset)
  if type(offset) ~= "number" or offset < 0 or offset % 1 ~= 0 or offset > MAX_SAFE then
    errors.misuse("dsh.subprocess", "readFrom: %s", M.OFFSET_MESSAGE)
  end
  local lossy = offset < self._start
  local text
  if lossy then
    text = self._tail
  elseif offset >= self._complete then
    text = ""
  else
    text = self._tail:sub(boundary_after(self._tail, offset - self._start + 1))
  end
  local r = { text = text, nextOffset = self._complete, lossy = lossy }
  if lossy and self.spillPath and self.spillMax and self.total <= self.spillMax then
    r.spillPath = self.spillPath
  end
  return r
end

--- Whether the spill file must go once the stream ended (§2.3 step 9): kept
-- only when it was needed (total > maxBytes) and is complete (total <= spill.maxBytes).
function Collector:spill_unneeded()
  return not (self.total > self.maxBytes and self.spillMax and self.total <= self.spillMax)
end

-- Pipe ------------------------------------------------------------------------

---@class dsh.subprocess.Pipe
local Pipe = {}
Pipe.__index = Pipe
Pipe.__tostring = function(p)
  return string.format("dsh.subprocess.pipe(%d bytes queued%s)", p._bytes,
    p._closed and ", closed" or (p._eof and ", eof" or ""))
end

---@return dsh.subprocess.Pipe
function M.pipe()
  return setmetatable({ _q = {}, _head = 1, _tail = 0, _bytes = 0 }, Pipe)
end

local function wake(p, key)
  local f = p[key]
  if f then
    p[key] = nil
    f:resolve()
  end
end

--- Producer side: queue bytes; waits (inside a task) while the reader lags.
function Pipe:push(s)
  if self._closed or self._eof or s == "" then return end
  self._tail = self._tail + 1
  self._q[self._tail] = s
  self._bytes = self._bytes + #s
  wake(self, "_readable")
  while self._bytes > M.HIGH_WATER and not self._closed and async.current() do
    self._space = self._space or async.future()
    self._space:await()
  end
end

--- Producer side: end of stream, or a failure the reader gets after the data.
function Pipe:finish(err)
  if self._eof then return end
  self._eof, self._err = true, err
  wake(self, "_readable")
end

--- The next chunk; nil at end of stream; nil, err when the stream failed.
---@return string|nil, dsh.Error|nil
function Pipe:read()
  while true do
    if self._closed then return nil end
    local s = self._q[self._head]
    if s then
      self._q[self._head] = nil
      self._head = self._head + 1
      self._bytes = self._bytes - #s
      if self._head > self._tail then self._q, self._head, self._tail = {}, 1, 0 end
      if self._bytes <= M.HIGH_WATER then wake(self, "_space") end
      return s
    end
    if self._eof then return nil, self._err end
    self._readable = self._readable or async.future()
    self._readable:await()
  end
end

--- Everything to the end of stream as one string (or nil, err).
function Pipe:read_all()
  local parts = {}
  while true do
    local s, err = self:read()
    if not s then
      if err then return nil, err end
      return table.concat(parts)
    end
    parts[#parts + 1] = s
  end
end

--- Consumer side: stop reading; queued and later bytes are dropped and the
-- producer is never held back again. Idempotent.
function Pipe:close()
  if self._closed then return end
  self._closed = true
  self._q, self._head, self._tail, self._bytes = {}, 1, 0, 0
  wake(self, "_space")
  wake(self, "_readable")
end

return M
