--- dsh.core.bridge: the Code Mode bridge over the C core (core/include/dsh/bridge.h).
--
-- A decoder turns NDJSON-base64 frames into JSON tokens as their bytes
-- arrive, checking everything in C (base64, the bound, UTF-8, JSON, escapes,
-- numbers) with the frame decoder's messages; an encoder builds JSON text in
-- C (strings checked and escaped there) and hands the frame out in pieces.
-- Failures are `nil, err` with err.code "FRAME", err.message the reference's
-- text (dsh.core.frame's) and err.status the core status name.
--
--   local d = bridge.decoder(max)
--   d:push(chunk)
--   local n, more = d:next()          -- n tokens lent; more: call next() again
--   for i = 1, n do local k = d:kind(i) ... d:string(i) ... d:number(i) end
local F = require "dsh.core._ffi"
local errors = require "dsh.errors"
local ffi, C = F.ffi, F.C

local M = {}

local MAX_SAFE = 9007199254740991

M.NULL, M.FALSE, M.TRUE = C.DSH_BRIDGE_NULL, C.DSH_BRIDGE_FALSE, C.DSH_BRIDGE_TRUE
M.NUMBER, M.STRING, M.KEY = C.DSH_BRIDGE_NUMBER, C.DSH_BRIDGE_STRING, C.DSH_BRIDGE_KEY
M.ARRAY, M.OBJECT, M.END, M.FRAME = C.DSH_BRIDGE_ARRAY, C.DSH_BRIDGE_OBJECT, C.DSH_BRIDGE_END, C.DSH_BRIDGE_FRAME

local function fail(rc)
  return errors.new("FRAME", ffi.string(C.dsh_frame_message(rc)), { status = (F.status(rc)) })
end

local function check_max(mod, max)
  if type(max) ~= "number" or max < 1 or max > MAX_SAFE or max ~= math.floor(max) then
    error("dsh.core.bridge: " .. mod .. ": max must be a positive safe integer", 3)
  end
end

-- Decoder ------------------------------------------------------------------------

---@class dsh.BridgeDecoder
local Decoder = {}
Decoder.__index = Decoder
Decoder.__tostring = function(d)
  if not d._d then return "dsh.core.bridge.decoder (closed)" end
  local rc = C.dsh_bridge_decoder_status(d._d)
  if rc ~= 0 then return "dsh.core.bridge.decoder (failed: " .. ffi.string(C.dsh_frame_message(rc)) .. ")" end
  return "dsh.core.bridge.decoder (max " .. d.max .. " bytes)"
end

local toks_p = ffi.new("const dsh_bridge_token_t *[1]")
local n_p = ffi.new("size_t[1]")

--- A decoder for frames of at most max decoded bytes.
---@param max integer
---@return dsh.BridgeDecoder
function M.decoder(max)
  check_max("decoder", max)
  local out = ffi.new("dsh_bridge_decoder_t *[1]")
  local rc = C.dsh_bridge_decoder_new(max, out)
  if rc ~= 0 then error("dsh.core.bridge: decoder: " .. ffi.string(C.dsh_strerror(rc)), 2) end
  return setmetatable({ _d = ffi.gc(out[0], C.dsh_bridge_decoder_free), max = max, _toks = nil, _text = nil },
    Decoder)
end

local function live(d, fn)
  if not d._d then error("dsh.core.bridge: " .. fn .. ": decoder is closed", 3) end
  return d._d
end

--- Buffers a chunk: true, or nil, err (sticky).
---@param s string
function Decoder:push(s)
  local d = live(self, "push")
  if type(s) ~= "string" then error("dsh.core.bridge: push: expected string, got " .. type(s), 2) end
  local rc = C.dsh_bridge_decoder_push(d, s, #s)
  if rc ~= 0 then return nil, fail(rc) end
  return true
end

--- Decodes about 1 MiB of what was pushed and lends the tokens it completed
-- (read them with kind/string/number/wtf8 before calling again). Returns n,
-- more (true: call next() again before pushing) — or n, nil, err when a frame
-- failed (the n tokens lent with it are still readable).
---@return integer n
---@return boolean|nil more
---@return dsh.Error|nil err
function Decoder:next()
  local d = live(self, "next")
  local rc = C.dsh_bridge_decoder_next(d, toks_p, n_p)
  self._toks, self._text = toks_p[0], C.dsh_bridge_decoder_text(d)
  local n = tonumber(n_p[0])
  if rc < 0 then return n, nil, fail(rc) end
  return n, rc == 1
end

--- Token i (1-based) of the last batch: its kind (M.STRING, ...).
function Decoder:kind(i) return self._toks[i - 1].kind end
--- Token i's string (a fresh Lua string) and whether it holds WTF-8.
function Decoder:string(i)
  local t = self._toks[i - 1]
  return ffi.string(self._text + t.off, t.len), t.wtf8 ~= 0
end
--- Token i's byte length (strings and keys).
function Decoder:length(i) return tonumber(self._toks[i - 1].len) end
--- Token i's number.
function Decoder:number(i) return self._toks[i - 1].num end

--- The lent tokens are read: frees what they held (a long string) now.
function Decoder:trim()
  if self._d then C.dsh_bridge_decoder_trim(self._d) end
  self._toks = nil
end

--- End of stream: true, or nil, err (a partial frame, or the failure).
function Decoder:finish()
  local rc = C.dsh_bridge_decoder_finish(live(self, "finish"))
  if rc ~= 0 then return nil, fail(rc) end
  return true
end

--- Bytes the decoder's buffers hold.
function Decoder:held()
  return self._d and tonumber(C.dsh_bridge_decoder_held(self._d)) or 0
end

--- Frees the decoder now (idempotent).
function Decoder:close()
  if self._d then
    C.dsh_bridge_decoder_free(ffi.gc(self._d, nil))
    self._d, self._toks, self._text = nil, nil, nil
  end
end

-- Encoder ------------------------------------------------------------------------

---@class dsh.BridgeEncoder
local Encoder = {}
Encoder.__index = Encoder
Encoder.__tostring = function(e)
  if not e._e then return "dsh.core.bridge.encoder (closed)" end
  return "dsh.core.bridge.encoder (" .. tonumber(C.dsh_bridge_encoder_len(e._e)) .. " bytes)"
end

local used_p = ffi.new("size_t[1]")
local piece_n = ffi.new("size_t[1]")
local piece_buf, piece_cap = nil, 0

--- An encoder of one frame of at most max JSON bytes.
---@param max integer
---@return dsh.BridgeEncoder
function M.encoder(max)
  check_max("encoder", max)
  local out = ffi.new("dsh_bridge_encoder_t *[1]")
  local rc = C.dsh_bridge_encoder_new(max, out)
  if rc ~= 0 then error("dsh.core.bridge: encoder: " .. ffi.string(C.dsh_strerror(rc)), 2) end
  return setmetatable({ _e = ffi.gc(out[0], C.dsh_bridge_encoder_free), max = max }, Encoder)
end

local function elive(e, fn)
  if not e._e then error("dsh.core.bridge: " .. fn .. ": encoder is closed", 3) end
  return e._e
end

--- Appends JSON syntax as it is: true, or nil, err (the bound).
---@param s string
function Encoder:raw(s)
  local rc = C.dsh_bridge_encoder_raw(elive(self, "raw"), s, #s)
  if rc ~= 0 then return nil, fail(rc) end
  return true
end

--- Appends s as a JSON string. true; false when s is not strict UTF-8 (the
-- frame is then unusable: reset it); nil, err at the bound. pause(bytes), if
-- given, is called between the ~1 MiB slices of a long string.
---@param s string
---@param pause fun(bytes:integer)|nil
---@return boolean|nil ok
---@return dsh.Error|nil err
function Encoder:string(s, pause)
  local e = elive(self, "string")
  local n, at = #s, 0
  local p = ffi.cast("const uint8_t *", s)
  repeat
    local rc = C.dsh_bridge_encoder_string(e, p + at, n - at, used_p)
    if rc == C.DSH_EUTF8 then return false end
    if rc ~= 0 then return nil, fail(rc) end
    local used = tonumber(used_p[0])
    at = at + used
    if pause and at < n then pause(used) end
  until at >= n
  return true
end

--- Appends a number (finite, not -0: the caller checked) as JSON.stringify
-- writes it: true, or nil, err.
---@param x number
function Encoder:number(x)
  local rc = C.dsh_bridge_encoder_number(elive(self, "number"), x)
  if rc ~= 0 then return nil, fail(rc) end
  return true
end

--- Bytes of JSON text so far.
function Encoder:len()
  return self._e and tonumber(C.dsh_bridge_encoder_len(self._e)) or 0
end

--- Drops the text built so far.
function Encoder:reset()
  C.dsh_bridge_encoder_reset(elive(self, "reset"))
end

--- The next piece of the frame (at most cap characters, cap >= 5) and
-- whether more follow; after the last one (which ends with "\n") the encoder
-- is empty again.
---@param cap integer
---@return string piece
---@return boolean more
function Encoder:emit(cap)
  local e = elive(self, "emit")
  if cap > piece_cap then
    piece_buf, piece_cap = ffi.new("char[?]", cap), cap
  end
  local rc = C.dsh_bridge_encoder_emit(e, piece_buf, cap, piece_n)
  if rc < 0 then error("dsh.core.bridge: emit: cap must be at least 5", 2) end
  return ffi.string(piece_buf, piece_n[0]), rc == 1
end

--- Frees the encoder now (idempotent).
function Encoder:close()
  if self._e then
    C.dsh_bridge_encoder_free(ffi.gc(self._e, nil))
    self._e = nil
  end
end

return M
