--- dsh.core.envelope: Connect streaming envelopes (envd-protocol.md §1.6).
--
-- 5-byte prefix (flags, 32-bit big-endian length) + payload. Flag 0x02 marks
-- the end-of-stream message; 0x01 (compressed) and unknown bits are errors.
-- Failures are `nil, err` with err.code "ENVELOPE" and err.status the core
-- status name ("ECOMPRESSED", "ELIMIT", "EFRAME", "ETRUNCATED").
local F = require "dsh.core._ffi"
local errors = require "dsh.errors"
local ffi, C = F.ffi, F.C

local M = {}

M.END_STREAM = 0x02

local flags_p = ffi.new("uint8_t[1]")
local payload_p = ffi.new("const uint8_t *[1]")
local len_p = ffi.new("uint32_t[1]")
local header = ffi.new("uint8_t[5]")

---@class dsh.Envelope
---@field flags integer
---@field payload string
---@field end_stream boolean

---@class dsh.EnvelopeDecoder
local Decoder = {}
Decoder.__index = Decoder

local function live(self, fn)
  if getmetatable(self) ~= Decoder then error("dsh.core.envelope: " .. fn .. ": expected a decoder", 3) end
  if not self._d then error("dsh.core.envelope: " .. fn .. ": decoder is closed", 3) end
  return self._d
end

local function fail(d, rc)
  local msg = C.dsh_envelope_decoder_status(d) ~= 0 and ffi.string(C.dsh_envelope_decoder_error(d))
    or select(2, F.status(rc))
  return errors.new("ENVELOPE", msg, { status = (F.status(rc)) })
end

function Decoder:__tostring()
  if not self._d then return "dsh.core.envelope.decoder (closed)" end
  if C.dsh_envelope_decoder_status(self._d) ~= 0 then
    return "dsh.core.envelope.decoder (failed: " .. ffi.string(C.dsh_envelope_decoder_error(self._d)) .. ")"
  end
  return "dsh.core.envelope.decoder (max " .. self.max .. " bytes)"
end

--- A decoder for a stream of envelopes whose payloads are at most max bytes.
---@param max integer 0 .. 2^32-1
---@return dsh.EnvelopeDecoder
function M.decoder(max)
  if type(max) ~= "number" or max < 0 or max > 0xFFFFFFFF or max ~= math.floor(max) then
    error("dsh.core.envelope: decoder: max must be an integer in 0..4294967295, got " .. tostring(max), 2)
  end
  local out = ffi.new("dsh_envelope_decoder_t *[1]")
  if C.dsh_envelope_decoder_new(max, out) ~= 0 then error("dsh.core.envelope: decoder: out of memory", 2) end
  return setmetatable({ _d = ffi.gc(out[0], C.dsh_envelope_decoder_free), max = max }, Decoder)
end

--- Pushes a chunk; returns the envelopes it completed, in order. On failure
--- returns nil, err, and the envelopes completed before it.
---@param s string
---@return dsh.Envelope[]|nil
---@return dsh.Error? err
---@return dsh.Envelope[]? before
function Decoder:push(s)
  local d = live(self, "push")
  if type(s) ~= "string" then error("dsh.core.envelope: push: expected string, got " .. type(s), 2) end
  local rc = C.dsh_envelope_decoder_push(d, s, #s)
  if rc ~= 0 then return nil, fail(d, rc), {} end
  local out = {}
  while true do
    rc = C.dsh_envelope_decoder_next(d, flags_p, payload_p, len_p)
    if rc == 0 then return out end
    if rc < 0 then return nil, fail(d, rc), out end
    local flags = flags_p[0]
    out[#out + 1] = {
      flags = flags,
      payload = ffi.string(payload_p[0], len_p[0]),
      end_stream = flags == M.END_STREAM,
    }
  end
end

--- End of stream: true, or nil, err if the stream ended inside an envelope.
---@return true|nil
---@return dsh.Error? err
function Decoder:finish()
  local d = live(self, "finish")
  local rc = C.dsh_envelope_decoder_finish(d)
  if rc ~= 0 then return nil, fail(d, rc) end
  return true
end

--- Frees the decoder now (idempotent).
function Decoder:close()
  if self._d then
    C.dsh_envelope_decoder_free(ffi.gc(self._d, nil))
    self._d = nil
  end
end

--- One envelope: prefix .. payload.
---@param flags integer 0..255 (0 for a message, M.END_STREAM for the last)
---@param payload string
---@return string
function M.encode(flags, payload)
  if type(flags) ~= "number" or flags < 0 or flags > 255 or flags ~= math.floor(flags) then
    error("dsh.core.envelope: encode: flags must be an integer in 0..255, got " .. tostring(flags), 2)
  end
  if type(payload) ~= "string" then
    error("dsh.core.envelope: encode: expected string payload, got " .. type(payload), 2)
  end
  if #payload > 0xFFFFFFFF then error("dsh.core.envelope: encode: payload over 4 GiB", 2) end
  C.dsh_envelope_header(flags, #payload, header)
  return ffi.string(header, 5) .. payload
end

return M
