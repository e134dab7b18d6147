--- dsh.core.utf8: strict UTF-8 validation, streams that release only whole code
-- points (strict, or lossy with U+FFFD for display), and code-point-safe cuts.
--
-- Failures are `nil, err` with err.code "UTF8" and err.position the 1-based
-- byte position of the first bad sequence (validate only).
local F = require "dsh.core._ffi"
local scratch = require "dsh.core._scratch"
local errors = require "dsh.errors"
local ffi, C = F.ffi, F.C

local M = {}

local off_p = ffi.new("size_t[1]")
local out_n = ffi.new("size_t[1]")

local buffer = scratch.new(4096)

local function check(fn, what, v, want)
  if type(v) ~= want then
    error(("dsh.core.utf8: %s: expected %s %s, got %s"):format(fn, want, what, type(v)), 3)
  end
end

--- true if s is strict UTF-8 (no overlongs, surrogates or code points above
--- U+10FFFF), else nil, err with err.position.
---@param s string
---@return true|nil
---@return dsh.Error? err
function M.validate(s)
  check("validate", "text", s, "string")
  if C.dsh_utf8_validate(s, #s, off_p) == 0 then return true end
  local pos = tonumber(off_p[0]) + 1
  return nil, errors.new("UTF8", "invalid UTF-8 at byte " .. pos, { position = pos })
end

--- The longest prefix of s of at most max bytes that does not split a code
--- point.
---@param s string
---@param max integer
---@return string
function M.prefix(s, max)
  check("prefix", "text", s, "string")
  check("prefix", "max", max, "number")
  if max < 0 then max = 0 end
  return s:sub(1, tonumber(C.dsh_utf8_prefix_len(s, #s, max)))
end

--- The last max bytes of s, minus the rest of any code point they would cut
--- (so at most max bytes, never starting inside a code point).
---@param s string
---@param max integer
---@return string
function M.tail(s, max)
  check("tail", "text", s, "string")
  check("tail", "max", max, "number")
  if max < 0 then max = 0 end
  return s:sub(tonumber(C.dsh_utf8_tail_start(s, #s, max)) + 1)
end

---@class dsh.Utf8Stream
---@field private _st ffi.cdata*
---@field lossy boolean
local Stream = {}
Stream.__index = Stream

function Stream:__tostring()
  return ("dsh.core.utf8.stream (%s, %d bytes pending)"):format(self.lossy and "lossy" or "strict",
    self._st.npending)
end

---@class dsh.Utf8StreamOpts
---@field lossy boolean? replace invalid sequences with U+FFFD instead of failing

--- A stream that releases text only on code-point boundaries.
---@param opts dsh.Utf8StreamOpts?
---@return dsh.Utf8Stream
function M.stream(opts)
  if opts ~= nil then check("stream", "opts", opts, "table") end
  return setmetatable({ _st = ffi.new("dsh_utf8_state_t"), lossy = opts and opts.lossy or false },
    Stream)
end

--- Feeds a chunk; returns the text completed so far (maybe ""). Strict
--- streams return nil, err on invalid input and are left unchanged.
---@param s string
---@return string|nil
---@return dsh.Error? err
function Stream:feed(s)
  check("feed", "chunk", s, "string")
  local n = #s
  if self.lossy then
    local buf = buffer(3 * n + 4)
    C.dsh_utf8_feed_lossy(self._st, s, n, buf, 3 * n + 4, out_n)
    return ffi.string(buf, out_n[0])
  end
  local buf = buffer(n + 4)
  if C.dsh_utf8_feed(self._st, s, n, buf, n + 4, out_n) ~= 0 then
    return nil, errors.new("UTF8", "invalid UTF-8 in stream")
  end
  return ffi.string(buf, out_n[0])
end

--- End of stream: the remaining text ("" normally; U+FFFD for a cut-off
--- sequence in a lossy stream), or nil, err for a cut-off sequence in a strict
--- one. Resets the stream.
---@return string|nil
---@return dsh.Error? err
function Stream:finish()
  if self.lossy then
    local buf = buffer(4)
    C.dsh_utf8_finish_lossy(self._st, buf, 4, out_n)
    return ffi.string(buf, out_n[0])
  end
  if C.dsh_utf8_finish(self._st) ~= 0 then
    return nil, errors.new("UTF8", "UTF-8 stream ended inside a code point")
  end
  return ""
end

--- Bytes held back because they end in the middle of a code point (0..3).
---@return integer
function Stream:pending()
  return self._st.npending
end

return M
