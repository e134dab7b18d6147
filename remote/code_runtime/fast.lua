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

--- True when s holds a byte below 32 (a raw control character).
function M.has_control(s)
  local p = cast("const uint8_t *", s)
  for i = 0, #s - 1 do
    if p[i] < 32 then return true end
  end
  return false
end

--- True when s is 7-bit ASCII.
function M.ascii(s)
  local p = cast("const uint8_t *", s)
  for i = 0, #s - 1 do
    if p[i] >= 128 then return false end
  end
  return true
end

--- True when s is strict UTF-8 (no overlongs, surrogates or > U+10FFFF),
--- as code-runtime-json.lua's valid_utf8 (which walks it in Lua patterns).
function M.valid_utf8(s)
  local p, n, i = cast("const uint8_t *", s), #s, 0
  while i < n do
    local c = p[i]
    if c < 0x80 then
      i = i + 1
    else
      local need, lo, hi = 1, 0x80, 0xBF
      if c >= 0xE0 and c <= 0xEF then
        need = 2
        if c == 0xE0 then lo = 0xA0 elseif c == 0xED then hi = 0x9F end
      elseif c >= 0xF0 and c <= 0xF4 then
        need = 3
        if c == 0xF0 then lo = 0x90 elseif c == 0xF4 then hi = 0x8F end
      elseif c < 0xC2 or c > 0xDF then
        return false
      end
      if i + need >= n then return false end
      local c1 = p[i + 1]
      if c1 < lo or c1 > hi then return false end
      for k = 2, need do
        local ck = p[i + k]
        if ck < 0x80 or ck > 0xBF then return false end
      end
      i = i + need + 1
    end
  end
  return true
end

local HEX = "0123456789abcdef"
local SHORT = { [8] = 98, [9] = 116, [10] = 110, [12] = 102, [13] = 114 } -- \b \t \n \f \r
local qbuf, qcap = nil, 0

--- The JSON text of s, as code-runtime-json.lua's quote gives it (controls
--- escaped, DEL kept, an encoded surrogate written as its \u escape).
function M.quote(s)
  if M.plain(s) then return '"' .. s .. '"' end
  local p, n = cast("const uint8_t *", s), #s
  local need = n + 2
  for i = 0, n - 1 do
    local c = p[i]
    if c == 34 or c == 92 then
      need = need + 1
    elseif c < 32 then
      need = need + (SHORT[c] and 1 or 5)
    elseif c == 0xED and i + 2 < n and p[i + 1] >= 0xA0 then
      need = need + 3
    end
  end
  if need > qcap then
    qcap = math.max(need, qcap * 2)
    qbuf = ffi.new("uint8_t[?]", qcap)
  end
  local o, i = qbuf, 0
  local w = 0
  o[w] = 34
  w = w + 1
  while i < n do
    local c = p[i]
    if c == 34 or c == 92 then
      o[w], o[w + 1] = 92, c
      w = w + 2
    elseif c < 32 then
      o[w] = 92
      if SHORT[c] then
        o[w + 1] = SHORT[c]
        w = w + 2
      else
        o[w + 1], o[w + 2], o[w + 3] = 117, 48, 48
        o[w + 4], o[w + 5] = HEX:byte(rshift(c, 4) + 1), HEX:byte(band(c, 15) + 1)
        w = w + 6
      end
    elseif c == 0xED and i + 2 < n and p[i + 1] >= 0xA0 then
      local cp = bor(lshift(band(c, 0x0F), 12), lshift(band(p[i + 1], 0x3F), 6), band(p[i + 2], 0x3F))
      o[w], o[w + 1] = 92, 117
      for k = 0, 3 do o[w + 2 + k] = HEX:byte(band(rshift(cp, 12 - 4 * k), 15) + 1) end
      w = w + 6
      i = i + 2
    else
      o[w] = c
      w = w + 1
    end
    i = i + 1
  end
  o[w] = 34
  return fstring(o, w + 1)
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

--- The wire as the remote half loads it from dir: J, its text half
--- (registered under the host's module name, as the wire requires it),
--- with the byte loops above in place of its patterns (same results, ~10x
--- faster), and W, the wire itself.
function M.wire(dir)
  package.preload["dsh.code_runtime._json"] = function() return dofile(dir .. "/code-runtime-json.lua") end
  local J = require "dsh.code_runtime._json"
  local W = dofile(dir .. "/code-runtime-wire.lua")
  J.valid_utf8, J.quote, J.has_control = M.valid_utf8, M.quote, M.has_control
  return J, W
end

return M
