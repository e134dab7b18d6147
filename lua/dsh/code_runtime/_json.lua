--- dsh.code_runtime._json: lossless JSON text across the Code Mode boundary
-- (harness-behaviour.md §3.3), in plain Lua — the text half of the wire
-- (dsh.code_runtime._wire is the other: Lua values to and from its tokens).
--
-- Owns: strict UTF-8 checks, the JSON text of strings and numbers as
-- JSON.stringify writes them, encoding the runtime's own small messages, and
-- decoding any JSON text iteratively (arrays marked with M.array_mt, objects
-- plain, null M.null). Never decides what a Lua value means on the wire, and
-- never does I/O.
--
-- Shared by the host and the runners in the sandbox, which load this very
-- file (uploaded beside them as code-runtime-json.lua), so it requires
-- nothing and uses nothing but the Lua 5.1 base library and `bit`. A runner
-- may replace valid_utf8, quote and has_control with faster equivalents
-- (remote/code_runtime/fast.lua): everything here and in the wire looks them
-- up in M at each call.
local bit = require "bit"

local M = {}

local floor = math.floor
local byte, char, sub, find, format, gsub = string.byte, string.char, string.sub, string.find,
  string.format, string.gsub
local concat, sort = table.concat, table.sort

M.null = setmetatable({}, { __tostring = function() return "null" end, __metatable = "null" })
M.array_mt = { __name = "json.array" }
M.object_mt = { __name = "json.object" }

--- Mark t as a JSON array (so an empty t is [], not {}). Returns t.
function M.array(t)
  return setmetatable(t or {}, M.array_mt)
end

--- Mark t as a JSON object. Returns t.
function M.object(t)
  return setmetatable(t or {}, M.object_mt)
end

-- UTF-8 --------------------------------------------------------------------------

--- True when s is strict UTF-8 (no overlongs, surrogates or > U+10FFFF).
function M.valid_utf8(s)
  if not find(s, "[\128-\255]") then return true end
  local i, n = 1, #s
  while i <= n do
    local j = find(s, "[\128-\255]", i)
    if not j then return true end
    i = j
    local c = byte(s, i)
    local need, lo, hi
    lo, hi = 0x80, 0xBF
    if c >= 0xC2 and c <= 0xDF then need = 1
    elseif c >= 0xE0 and c <= 0xEF then
      need = 2
      if c == 0xE0 then lo = 0xA0 elseif c == 0xED then hi = 0x9F end
    elseif c >= 0xF0 and c <= 0xF4 then
      need = 3
      if c == 0xF0 then lo = 0x90 elseif c == 0xF4 then hi = 0x8F end
    else
      return false
    end
    if i + need > n then return false end
    local c1 = byte(s, i + 1)
    if c1 < lo or c1 > hi then return false end
    for k = 2, need do
      local ck = byte(s, i + k)
      if ck < 0x80 or ck > 0xBF then return false end
    end
    i = i + need + 1
  end
  return true
end

-- JSON text: encoding ------------------------------------------------------------

local ESC = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f", ["\n"] = "\\n",
  ["\r"] = "\\r", ["\t"] = "\\t" }
for i = 0, 31 do
  local c = char(i)
  if not ESC[c] then ESC[c] = format("\\u%04x", i) end
end
ESC["\127"] = "\127"

-- An encoded surrogate (WTF-8, from a JSON "\udXXX" escape) back to its escape.
local function surrogate_escape(s)
  local a, b, c = byte(s, 1, 3)
  return format("\\u%04x", bit.bor(bit.lshift(bit.band(a, 0x0F), 12), bit.lshift(bit.band(b, 0x3F), 6),
    bit.band(c, 0x3F)))
end

--- The JSON text of string s (quotes included). Encoded surrogates are
-- written as \u escapes, so the text is valid UTF-8 whenever s is UTF-8 or WTF-8.
function M.quote(s)
  if find(s, '[%c"\\]') then s = gsub(s, '[%c"\\]', ESC) end
  if find(s, "\237[\160-\191]") then s = gsub(s, "\237[\160-\191][\128-\191]", surrogate_escape) end
  return '"' .. s .. '"'
end

--- The text JSON.stringify gives finite x (not -0): the shortest digits that
-- read back as x, laid out as ECMAScript's Number::toString does.
function M.number(x)
  if x == floor(x) and x > -1e15 and x < 1e15 then return format("%d", x) end
  local e
  for p = 0, 16 do
    e = format("%." .. p .. "e", x)
    if tonumber(e) == x then break end
  end
  local sign, d1, rest, exp = e:match("^(-?)(%d)%.?(%d*)e([-+]%d+)$")
  local digits = (d1 .. rest):gsub("0+$", "")
  if digits == "" then digits = "0" end
  local k, n = #digits, tonumber(exp) + 1
  local out
  if k <= n and n <= 21 then
    out = digits .. string.rep("0", n - k)
  elseif 0 < n and n <= 21 then
    out = digits:sub(1, n) .. "." .. digits:sub(n + 1)
  elseif -6 < n and n <= 0 then
    out = "0." .. string.rep("0", -n) .. digits
  else
    local en = n - 1
    out = digits:sub(1, 1) .. (k > 1 and ("." .. digits:sub(2)) or "") .. "e" .. (en >= 0 and "+" or "-")
      .. math.abs(en)
  end
  return sign .. out
end

local Raw = {}
Raw.__index = Raw
--- Already encoded JSON text, embedded as is by M.encode_json.
function M.raw(text) return setmetatable({ text = text }, Raw) end

--- JSON text of a small message built by the runtime itself (recursive:
-- only for values the runtime makes; program values go through M.encode).
function M.encode_json(v)
  local t = type(v)
  if t == "string" then return M.quote(v) end
  if t == "number" then return M.number(v) end
  if t == "boolean" then return v and "true" or "false" end
  if v == M.null or v == nil then return "null" end
  local mt = getmetatable(v)
  if mt == Raw then return v.text end
  if mt == M.array_mt or (v[1] ~= nil) then
    local parts = {}
    for i = 1, #v do parts[i] = M.encode_json(v[i]) end
    return "[" .. concat(parts, ",") .. "]"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  sort(keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = M.quote(k) .. ":" .. M.encode_json(v[k]) end
  return "{" .. concat(parts, ",") .. "}"
end

--- Writes the JSON of a small message built by the runtime itself to a sink
-- (as M.encode_into's; recursive: only for values the runtime makes).
-- Returns true, or nil, message.
function M.encode_json_into(v, sink)
  local t = type(v)
  if t == "string" then
    local ok, err = sink:string(v)
    if ok == false then return nil, "a string that is not valid UTF-8" end
    return ok, err
  end
  if t == "number" then return sink:number(v) end
  if t == "boolean" then return sink:raw(v and "true" or "false") end
  if v == M.null or v == nil then return sink:raw("null") end
  local mt = getmetatable(v)
  if mt == Raw then return sink:raw(v.text) end
  local ok, err
  if mt == M.array_mt or (v[1] ~= nil) then
    ok, err = sink:raw("[")
    for i = 1, #v do
      if ok and i > 1 then ok, err = sink:raw(",") end
      if ok then ok, err = M.encode_json_into(v[i], sink) end
    end
    if not ok then return nil, err end
    return sink:raw("]")
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  sort(keys)
  ok, err = sink:raw("{")
  for i, k in ipairs(keys) do
    if ok and i > 1 then ok, err = sink:raw(",") end
    if ok then ok, err = M.encode_json_into(k, sink) end
    if ok then ok, err = sink:raw(":") end
    if ok then ok, err = M.encode_json_into(v[k], sink) end
  end
  if not ok then return nil, err end
  return sink:raw("}")
end

-- JSON text: decoding ------------------------------------------------------------

local UNESC = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }

local function utf8_of(cp)
  if cp < 0x80 then return char(cp) end
  if cp < 0x800 then return char(0xC0 + floor(cp / 64), 0x80 + cp % 64) end
  if cp < 0x10000 then
    return char(0xE0 + floor(cp / 4096), 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
  end
  return char(0xF0 + floor(cp / 262144), 0x80 + floor(cp / 4096) % 64, 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
end

-- Decodes the string starting at the quote at i; returns it and the index
-- after it. trusted: the text is known to be valid JSON (no raw controls).
local function read_string(s, i, trusted)
  local j = i + 1
  local q = find(s, '"', j, true)
  if not q then return nil, "unterminated string" end
  local str = sub(s, j, q - 1)
  if not find(str, "\\", 1, true) then -- no escapes: plain finds are memchr-fast
    if not trusted and M.has_control(str) then return nil, "control character in string" end
    return str, q + 1
  end
  local k
  local parts, np = {}, 0
  while true do
    k = find(s, '["\\%c]', j)
    if not k then return nil, "unterminated string" end
    local c = byte(s, k)
    if c == 34 then
      np = np + 1
      parts[np] = sub(s, j, k - 1)
      return concat(parts), k + 1
    end
    if c ~= 92 then
      if c == 127 then -- DEL is allowed raw (%c matches it)
        np = np + 1
        parts[np] = sub(s, j, k)
        j = k + 1
      else
        return nil, "control character in string"
      end
    else
      np = np + 1
      parts[np] = sub(s, j, k - 1)
      local e = sub(s, k + 1, k + 1)
      if e == "u" then
        local hex = sub(s, k + 2, k + 5)
        if not find(hex, "^%x%x%x%x$") then return nil, "bad \\u escape" end
        local cp = tonumber(hex, 16)
        j = k + 6
        if cp >= 0xD800 and cp <= 0xDBFF and sub(s, j, j + 1) == "\\u" then
          local lo = tonumber(sub(s, j + 2, j + 5), 16)
          if find(sub(s, j + 2, j + 5), "^%x%x%x%x$") and lo >= 0xDC00 and lo <= 0xDFFF then
            cp = 0x10000 + (cp - 0xD800) * 1024 + (lo - 0xDC00)
            j = j + 6
          end
        end
        np = np + 1
        parts[np] = utf8_of(cp) -- a lone surrogate becomes WTF-8 (never valid UTF-8)
      else
        local r = UNESC[e]
        if not r then return nil, "bad escape" end
        np = np + 1
        parts[np] = r
        j = k + 2
      end
    end
  end
end

--- True when s holds a raw control character (U+0000..U+001F). The runners
-- replace it with a byte loop through the FFI.
function M.has_control(s)
  return find(s, "[%z\1-\31]") ~= nil
end

local function skip_ws(s, i)
  return find(s, "[^ \t\r\n]", i) or #s + 1
end

--- Decodes JSON text (iteratively, any depth). Arrays come back marked with
-- M.array, objects as plain tables (duplicate keys: the last wins), null as
-- M.null. Returns the value, or nil, message. trusted: s was validated as
-- JSON already (the host's frame decoder does), so raw control characters
-- need not be looked for.
function M.decode_json(s, trusted)
  if type(s) ~= "string" then return nil, "expected a string" end
  local stack, top = {}, 0 -- frames: {container, is_array, pending_key}
  local i = skip_ws(s, 1)
  local root, have_root = nil, false
  while true do
    local c = sub(s, i, i)
    local value, is_value = nil, true
    local frame = stack[top]
    -- In an object, a key comes first (or the end).
    if frame and not frame[2] and frame[3] == nil then
      if c == "}" and frame[4] == 0 then
        value, i = frame[1], i + 1
        top = top - 1
        stack[top + 1] = nil
        goto have_value
      end
      if c ~= '"' then return nil, "expected a key at " .. i end
      local key, ni = read_string(s, i, trusted)
      if not key then return nil, ni end
      i = skip_ws(s, ni)
      if sub(s, i, i) ~= ":" then return nil, "expected ':' at " .. i end
      frame[3] = key
      i = skip_ws(s, i + 1)
      c = sub(s, i, i)
    end
    if c == "{" then
      top = top + 1
      stack[top] = { {}, false, nil, 0 }
      i = skip_ws(s, i + 1)
      is_value = false
    elseif c == "[" then
      local j = skip_ws(s, i + 1)
      if sub(s, j, j) == "]" then
        value, i = setmetatable({}, M.array_mt), j + 1
      else
        top = top + 1
        stack[top] = { setmetatable({}, M.array_mt), true, nil, 0 }
        i = j
        is_value = false
      end
    elseif c == '"' then
      local str, ni = read_string(s, i, trusted)
      if not str then return nil, ni end
      value, i = str, ni
    elseif c == "t" and sub(s, i, i + 3) == "true" then
      value, i = true, i + 4
    elseif c == "f" and sub(s, i, i + 4) == "false" then
      value, i = false, i + 5
    elseif c == "n" and sub(s, i, i + 3) == "null" then
      value, i = M.null, i + 4
    else
      local int = s:match("^-?%d+", i)
      if not int or int:match("^-?0%d") then return nil, "unexpected character at " .. i end
      local j = i + #int
      local frac = s:match("^%.%d+", j)
      if frac then j = j + #frac elseif sub(s, j, j) == "." then return nil, "bad number at " .. i end
      local exp = s:match("^[eE][-+]?%d+", j)
      if exp then j = j + #exp elseif find(s, "^[eE]", j) then return nil, "bad number at " .. i end
      value, i = tonumber(sub(s, i, j - 1)), j
    end
    if not is_value then goto continue end
    ::have_value::
    while true do
      frame = stack[top]
      if not frame then
        if have_root then return nil, "trailing data" end
        root, have_root = value, true
        break
      end
      local n = frame[4] + 1
      frame[4] = n
      if frame[2] then frame[1][n] = value else frame[1][frame[3]] = value frame[3] = nil end
      i = skip_ws(s, i)
      local d = sub(s, i, i)
      if d == "," then
        i = skip_ws(s, i + 1)
        break
      end
      if d == (frame[2] and "]" or "}") then
        value = frame[1]
        stack[top] = nil
        top = top - 1
        i = i + 1
      else
        return nil, "expected ',' at " .. i
      end
    end
    if have_root then
      if skip_ws(s, i) <= #s then return nil, "trailing data at " .. skip_ws(s, i) end
      return root
    end
    ::continue::
  end
end

return M
