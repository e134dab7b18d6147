--- dsh.core.sha256: SHA-256 digests of Lua strings (the C core's dsh_sha256).
--
--   sha256.hex("abc")        --> "ba7816bf..."
--   sha256.digest("abc")     --> 32 raw bytes
--   local h = sha256.new(); h:update(a); h:update(b); h:hex()
local F = require "dsh.core._ffi"
local ffi, C = F.ffi, F.C

local M = {}

-- One output buffer for the one-shot calls: the digest is copied out at once.
local out = ffi.new("uint8_t[32]")

local function tohex(raw)
  return (raw:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

local function check(what, s)
  if type(s) ~= "string" then
    error("dsh.core.sha256: " .. what .. ": expected string, got " .. type(s), 3)
  end
end

--- The 32-byte binary digest of s.
---@param s string
---@return string
function M.digest(s)
  check("digest", s)
  C.dsh_sha256(s, #s, out)
  return ffi.string(out, 32)
end

--- The lowercase hex digest of s (64 characters).
---@param s string
---@return string
function M.hex(s)
  check("hex", s)
  C.dsh_sha256(s, #s, out)
  return tohex(ffi.string(out, 32))
end

---@class dsh.Sha256
local Hasher = {}
Hasher.__index = Hasher
Hasher.__tostring = function(h)
  return "dsh.core.sha256(" .. (h._done and "finished" or "open") .. ")"
end

--- An incremental hasher: :update(s) any number of times, then :digest() or :hex() once.
---@return dsh.Sha256
function M.new()
  local ctx = ffi.new("dsh_sha256_t")
  C.dsh_sha256_init(ctx)
  return setmetatable({ _ctx = ctx, _done = false }, Hasher)
end

function Hasher:update(s)
  check("update", s)
  if self._done then error("dsh.core.sha256: update: hasher already finished", 2) end
  C.dsh_sha256_update(self._ctx, s, #s)
  return self
end

function Hasher:digest()
  if self._done then error("dsh.core.sha256: digest: hasher already finished", 2) end
  self._done = true
  C.dsh_sha256_final(self._ctx, out)
  return ffi.string(out, 32)
end

function Hasher:hex()
  return tohex(self:digest())
end

return M
