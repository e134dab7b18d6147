--- dsh.core.frame: NDJSON-base64 frames (harness-behaviour.md §3.1) over the C core.
--
-- A frame is base64(utf8(JSON)) .. "\n". Failures are `nil, err` with
-- err.code "FRAME", err.message the reference's exact text, err.status the
-- core status name (e.g. "ELIMIT"). Decoder errors are sticky.
local F = require "dsh.core._ffi"
local errors = require "dsh.errors"
local json = require "dsh.json"
local ffi, C = F.ffi, F.C

local M = {}

local MAX_SAFE = 9007199254740991
local json_p = ffi.new("const uint8_t *[1]")
local len_p = ffi.new("size_t[1]")
local out_n = ffi.new("size_t[1]")

local EINVAL = C.DSH_EINVAL

local function fail(rc)
  return errors.new("FRAME", ffi.string(C.dsh_frame_message(rc)), { status = (F.status(rc)) })
end

local function check_max(fn, max)
  if type(max) ~= "number" then
    error(("dsh.core.frame: %s: expected number, got %s"):format(fn, type(max)), 3)
  end
  return max >= 1 and max <= MAX_SAFE and max == math.floor(max)
end

---@class dsh.FrameDecoder
---@field private _d ffi.cdata*
local Decoder = {}
Decoder.__index = Decoder

function Decoder:__tostring()
  if not self._d then return "dsh.core.frame.decoder (closed)" end
  local rc = C.dsh_frame_decoder_status(self._d)
  if rc ~= 0 then
    return "dsh.core.frame.decoder (failed: " .. ffi.string(C.dsh_frame_decoder_error(self._d)) .. ")"
  end
  return "dsh.core.frame.decoder (max " .. self.max .. " bytes)"
end

local function live(self, fn)
  if getmetatable(self) ~= Decoder then error("dsh.core.frame: " .. fn .. ": expected a decoder", 3) end
  if not self._d then error("dsh.core.frame: " .. fn .. ": decoder is closed", 3) end
  return self._d
end

--- A bounded frame decoder; max bounds the decoded JSON of one frame.
---@param max integer 1 .. 2^53-1
---@return dsh.FrameDecoder|nil
---@return dsh.Error? err
function M.decoder(max)
  if not check_max("decoder", max) then return nil, fail(EINVAL) end
  local out = ffi.new("dsh_frame_decoder_t *[1]")
  local rc = C.dsh_frame_decoder_new(max, out)
  if rc ~= 0 then return nil, fail(rc) end
  return setmetatable({ _d = ffi.gc(out[0], C.dsh_frame_decoder_free), max = max }, Decoder)
end

--- Pushes a chunk; returns the JSON texts of the frames it completed (maybe
--- none). On failure returns nil, err, and the texts completed before it.
---@param s string
---@return string[]|nil texts
---@return dsh.Error? err
---@return string[]? before
function Decoder:push(s)
  local d = live(self, "push")
  if type(s) ~= "string" then error("dsh.core.frame: push: expected string, got " .. type(s), 2) end
  local rc = C.dsh_frame_decoder_push(d, s, #s)
  if rc ~= 0 then return nil, fail(rc), {} end
  local out = {}
  while true do
    rc = C.dsh_frame_decoder_next(d, json_p, len_p)
    if rc == 0 then return out end
    if rc < 0 then return nil, fail(rc), out end
    out[#out + 1] = ffi.string(json_p[0], len_p[0])
  end
end

--- Like push, but decodes each frame's JSON into Lua values (dsh.json; null
--- is dsh.json.null).
---@param s string
---@return any[]|nil values
---@return dsh.Error? err
function Decoder:push_values(s)
  local texts, err, before = self:push(s)
  local values = {}
  for i, t in ipairs(texts or before) do
    local v, jerr = json.decode(t)
    if jerr then
      return nil, errors.new("FRAME", "E2B frame contained invalid JSON", { status = "EJSON", detail = jerr.message })
    end
    values[i] = v
  end
  if not texts then return nil, err, values end
  return values
end

--- End of stream: true, or nil, err if a partial frame is left (or the
--- decoder had failed).
---@return true|nil
---@return dsh.Error? err
function Decoder:finish()
  local rc = C.dsh_frame_decoder_finish(live(self, "finish"))
  if rc ~= 0 then return nil, fail(rc) end
  return true
end

--- Frees the decoder now (idempotent).
function Decoder:close()
  if self._d then
    C.dsh_frame_decoder_free(ffi.gc(self._d, nil))
    self._d = nil
  end
end

--- Encodes one JSON text as a frame.
---@param text string UTF-8 JSON text (not checked)
---@param max integer 1 .. 2^53-1
---@return string|nil frame
---@return dsh.Error? err
function M.encode(text, max)
  if type(text) ~= "string" then error("dsh.core.frame: encode: expected string, got " .. type(text), 2) end
  if not check_max("encode", max) then return nil, fail(EINVAL) end
  local cap = tonumber(C.dsh_frame_encoded_len(#text))
  local buf = ffi.new("char[?]", cap)
  local rc = C.dsh_frame_encode(text, #text, max, buf, cap, out_n)
  if rc ~= 0 then return nil, fail(rc) end
  return ffi.string(buf, out_n[0])
end

--- Serialises a Lua value with dsh.json and encodes it as a frame.
---@param v any
---@param max integer
---@return string|nil frame
---@return dsh.Error? err
function M.encode_value(v, max)
  local ok, text = pcall(json.encode, v)
  if not ok then
    return nil, errors.new("FRAME", "E2B frame value is not JSON-serializable", { status = "EJSON" })
  end
  return M.encode(text, max)
end

return M
