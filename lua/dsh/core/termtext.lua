--- dsh.core.termtext: terminal output as text (core/include/dsh/termtext.h).
--
-- The sanitizer turns a PTY's byte stream (already whole code points) into
-- plain text: escape sequences and BEL removed, CR LF and CR made LF, the
-- `OSC 133;D;` prompt marker reported. The buffer keeps the last maxBytes
-- bytes (cut on a code point) and at most maxLines lines, and pages lines
-- newest first. Both run on every byte a terminal prints, so the loops are C.
--
--   local s = termtext.sanitizer(4096)
--   local text, prompt, prompt_text = s:feed("\27[1mbold\27[0m\r\n")  --> "bold\n", false, false
--   local b = termtext.buffer(4 * 1024 * 1024, 10000)
--   b:append(text); print(b:page(0, 10))                               --> "bold", 1
local F = require "dsh.core._ffi"
local scratch = require "dsh.core._scratch"
local errors = require "dsh.errors"
local ffi, C = F.ffi, F.C

local M = {}
local MOD = "dsh.core.termtext"

local out_n = ffi.new("size_t[1]")
local flags = ffi.new("uint32_t[1]")
local data_p = ffi.new("const uint8_t *[1]")
local got_p = ffi.new("uint64_t[1]")
local stats_buf = ffi.new("dsh_textbuf_stats_t")

local buffer = scratch.new(65536)

local function positive_int(fn, what, v, max)
  if type(v) ~= "number" or v < 1 or v % 1 ~= 0 or v > (max or 2 ^ 53 - 1) then
    errors.misuse(MOD, "%s: %s must be a positive integer, got %s", fn, what, tostring(v))
  end
  return v
end

-- Sanitizer ------------------------------------------------------------------------

---@class dsh.TermSanitizer
local Sanitizer = {}
Sanitizer.__index = Sanitizer
Sanitizer.__tostring = function(s) return "dsh.core.termtext.sanitizer(" .. s.maxPending .. ")" end

--- A sanitizer; a sequence held across feeds for more than maxPending bytes
--- is discarded through its terminator (and cannot be a prompt marker).
---@param max_pending integer
---@return dsh.TermSanitizer
function M.sanitizer(max_pending)
  positive_int("sanitizer", "maxPending", max_pending, 4294967295)
  local out = ffi.new("dsh_tsan_t *[1]")
  local rc = C.dsh_tsan_new(max_pending, out)
  if rc ~= C.DSH_OK then errors.misuse(MOD, "sanitizer: %s", select(2, F.status(rc))) end
  return setmetatable({ maxPending = max_pending, _ptr = ffi.gc(out[0], C.dsh_tsan_free) }, Sanitizer)
end

--- The text of a chunk, whether it completed a prompt marker, and whether
--- text other than LF followed the latest marker (in this chunk or after it).
---@param s string
---@return string text
---@return boolean prompt
---@return boolean prompt_text
function Sanitizer:feed(s)
  errors.check(MOD, "feed", s, "string")
  local n = #s
  local buf = buffer(n + 1)
  C.dsh_tsan_feed(self._ptr, s, n, buf, n + 1, out_n, flags)
  local f = flags[0]
  return ffi.string(buf, out_n[0]), bit.band(f, 1) ~= 0, bit.band(f, 2) ~= 0
end

--- End of stream: a carried CR as "\n" (else ""); starts afresh.
---@return string
function Sanitizer:flush()
  local buf = buffer(1)
  C.dsh_tsan_flush(self._ptr, buf, 1, out_n, flags)
  return ffi.string(buf, out_n[0])
end

-- Text buffer ------------------------------------------------------------------------

---@class dsh.TermBuffer
local Buffer = {}
Buffer.__index = Buffer
Buffer.__tostring = function(b)
  local st = b:stats()
  return ("dsh.core.termtext.buffer(%d bytes, %d lines%s)"):format(st.bytes, st.lines,
    st.truncated and ", truncated" or "")
end

--- A buffer of at most max_bytes bytes and (max_lines ~= nil) max_lines lines.
---@param max_bytes integer
---@param max_lines integer|nil
---@return dsh.TermBuffer
function M.buffer(max_bytes, max_lines)
  positive_int("buffer", "maxBytes", max_bytes, 2 ^ 40)
  if max_lines ~= nil then positive_int("buffer", "maxLines", max_lines) end
  local out = ffi.new("dsh_textbuf_t *[1]")
  local rc = C.dsh_textbuf_new(max_bytes, max_lines or 0, out)
  if rc ~= C.DSH_OK then errors.misuse(MOD, "buffer: %s", select(2, F.status(rc))) end
  return setmetatable({ maxBytes = max_bytes, maxLines = max_lines,
    _ptr = ffi.gc(out[0], C.dsh_textbuf_free) }, Buffer)
end

--- Append text (whole code points); the limits drop from the front.
---@param s string
function Buffer:append(s)
  if #s == 0 then return end
  local rc = C.dsh_textbuf_append(self._ptr, s, #s)
  if rc ~= C.DSH_OK then errors.misuse(MOD, "append: %s", select(2, F.status(rc))) end
end

--- Everything held.
---@return string
function Buffer:text()
  C.dsh_textbuf_data(self._ptr, data_p, out_n)
  return ffi.string(data_p[0], out_n[0])
end

function Buffer:clear()
  C.dsh_textbuf_clear(self._ptr)
end

--- Everything held, and empty the buffer.
---@return string
function Buffer:consume()
  local s = self:text()
  C.dsh_textbuf_clear(self._ptr)
  return s
end

--- Lines newest first: skip `skip`, then up to `count` older ones, oldest
--- first joined by "\n". Returns the text and how many lines it holds.
---@param skip integer
---@param count integer
---@return string text
---@return integer got
function Buffer:page(skip, count)
  C.dsh_textbuf_tail_lines(self._ptr, skip, count, data_p, out_n, got_p)
  return ffi.string(data_p[0], out_n[0]), tonumber(got_p[0])
end

---@class dsh.TermBufferStats
---@field bytes integer
---@field lines integer
---@field appended integer
---@field dropped integer
---@field truncated boolean

---@return dsh.TermBufferStats
function Buffer:stats()
  C.dsh_textbuf_stats(self._ptr, stats_buf)
  return { bytes = tonumber(stats_buf.bytes), lines = tonumber(stats_buf.lines),
    appended = tonumber(stats_buf.appended), dropped = tonumber(stats_buf.dropped),
    truncated = stats_buf.truncated ~= 0 }
end

--- Number of lines held.
function Buffer:lines()
  C.dsh_textbuf_stats(self._ptr, stats_buf)
  return tonumber(stats_buf.lines)
end

--- True once anything was dropped.
function Buffer:truncated()
  C.dsh_textbuf_stats(self._ptr, stats_buf)
  return stats_buf.truncated ~= 0
end

return M
