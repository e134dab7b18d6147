--- dsh.core.base64: canonical base64 over the C core (standard alphabet, padded).
--
-- decode is strict (what the frame decoder accepts); decode_loose is for
-- protobuf JSON `bytes` fields (standard or URL-safe, padding optional).
local F = require "dsh.core._ffi"
local scratch = require "dsh.core._scratch"
local errors = require "dsh.errors"
local ffi, C = F.ffi, F.C

local M = {}

local out_n = ffi.new("size_t[1]")

local buffer = scratch.new(4096)

local function check(fn, s)
  if type(s) ~= "string" then
    error(("dsh.core.base64: %s: expected string, got %s"):format(fn, type(s)), 3)
  end
end

--- Encodes bytes as padded standard base64.
---@param s string
---@return string
function M.encode(s)
  check("encode", s)
  local buf = buffer(tonumber(C.dsh_base64_encoded_len(#s)))
  local n = C.dsh_base64_encode(s, #s, ffi.cast("char *", buf))
  return ffi.string(buf, n)
end

local function decode(fn, cfn, s)
  check(fn, s)
  local buf = buffer(tonumber(C.dsh_base64_decoded_max(#s)) + 1)
  local rc = cfn(s, #s, buf, out_n)
  if rc ~= 0 then
    return nil, errors.new("BASE64", "invalid base64", { status = F.status(rc) })
  end
  return ffi.string(buf, out_n[0])
end

--- Strict decode: length a multiple of 4, standard alphabet, canonical padding.
---@param s string
---@return string|nil bytes
---@return dsh.Error? err code "BASE64"
function M.decode(s)
  return decode("decode", C.dsh_base64_decode, s)
end

--- Loose decode for protobuf JSON bytes: standard or URL-safe, padded or not.
---@param s string
---@return string|nil bytes
---@return dsh.Error? err code "BASE64"
function M.decode_loose(s)
  return decode("decode_loose", C.dsh_base64_decode_loose, s)
end

return M
