--- code-runtime-fast: byte loops the runners run often, through the FFI
-- (LuaJIT compiles them to tight machine code; Lua patterns are ~10x slower).
-- Loaded by the supervisor and the Lua worker; never by the host.
local ffi = require "ffi"
local bit = require "bit"

local M = {}
local band, bor, lshift, rshift = bit.band, bit.bor, bit.lshift, bit.rshift
local cast, fstring = ffi.cast, ffi.string

--- True when s is printable ASCII without '"' or '\': its JSON text is just
--- s in quotes (and it is valid UTF-8).
function M.plain(s)
  local p = cast("const uint8_t *", s)
  for i = 0, #s - 1 do
    local c = p[i]
    if c < 32 or c > 126 or c == 34 or c == 92 then return false end
  end
  return true
end

--- True when s is 7-bit ASCII.
function M.ascii(s)
  local p = cast("const uint8_t *", s)
  for i = 0, #s - 1 do
    if p[i] >= 128 then return false end
  end
  return true
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local pairs_tab = ffi.new("uint16_t[4096]") -- 12 bits -> two characters, little-endian
for v = 0, 4095 do
  pairs_tab[v] = B64:byte(rshift(v, 6) + 1) + lshift(B64:byte(band(v, 63) + 1), 8)
end
local out, out_n = ffi.new("uint16_t[?]", 32768), 32768

--- Standard base64 with padding, plus a newline.
function M.b64line(s)
  local n = #s
  local need = math.ceil(n / 3) * 2 + 1
  if need > out_n then
    out_n = need * 2
    out = ffi.new("uint16_t[?]", out_n)
  end
  local src = cast("const uint8_t *", s)
  local o, i = 0, 0
  local whole = n - n % 3
  while i < whole do
    local v = bor(lshift(src[i], 16), lshift(src[i + 1], 8), src[i + 2])
    out[o], out[o + 1] = pairs_tab[rshift(v, 12)], pairs_tab[band(v, 4095)]
    o, i = o + 2, i + 3
  end
  local text = fstring(out, o * 2)
  if i < n then
    local b1, b2 = src[i], i + 1 < n and src[i + 1] or 0
    local v = bor(lshift(b1, 16), lshift(b2, 8))
    local c = { B64:byte(rshift(v, 18) + 1), B64:byte(band(rshift(v, 12), 63) + 1),
      i + 1 < n and B64:byte(band(rshift(v, 6), 63) + 1) or 61, 61 }
    text = text .. string.char(c[1], c[2], c[3], c[4])
  end
  return text .. "\n"
end

return M
