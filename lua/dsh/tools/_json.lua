--- dsh.tools._json: a small, bounded JSON decoder for tool arguments.
--
-- Tools sit above the seams and may not require a binding (dsh.json wraps
-- lua-cjson), so the registry reads a model's arguments with this decoder:
-- RFC 8259 JSON, at most MAX_BYTES bytes and MAX_DEPTH levels of nesting,
-- \u escapes (surrogate pairs included) decoded to UTF-8. JSON null decodes to
-- M.null. A failure is nil and a message naming the byte offset, written for
-- the model that sent the text.
local M = {}

M.MAX_BYTES = 16 * 1024 * 1024
M.MAX_DEPTH = 64

--- The value JSON null decodes to.
M.null = setmetatable({}, { __tostring = function() return "null" end, __newindex = function()
  error("dsh.tools._json: null is read-only", 2)
end })

local ESCAPES = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }

local function utf8_of(cp)
  if cp < 0x80 then return string.char(cp) end
  if cp < 0x800 then return string.char(0xC0 + math.floor(cp / 0x40), 0x80 + cp % 0x40) end
  if cp < 0x10000 then
    return string.char(0xE0 + math.floor(cp / 0x1000), 0x80 + math.floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
  end
  return string.char(0xF0 + math.floor(cp / 0x40000), 0x80 + math.floor(cp / 0x1000) % 0x40,
    0x80 + math.floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
end

local Fail = {}

local function decode(s)
  local pos, depth = 1, 0
  local function fail(what)
    error(setmetatable({ msg = string.format("%s at byte %d", what, pos) }, Fail), 0)
  end
  local function skip()
    pos = s:find("[^ \t\r\n]", pos) or #s + 1
  end
  local value

  local function str()
    pos = pos + 1 -- the opening quote
    local parts = {}
    while true do
      local i = s:find('["\\%z\1-\31]', pos)
      if not i then fail("unterminated string") end
      parts[#parts + 1] = s:sub(pos, i - 1)
      local c = s:sub(i, i)
      pos = i
      if c == '"' then
        pos = i + 1
        return table.concat(parts)
      elseif c == "\\" then
        local e = s:sub(i + 1, i + 1)
        if ESCAPES[e] then
          parts[#parts + 1] = ESCAPES[e]
          pos = i + 2
        elseif e == "u" then
          local hex = s:match("^%x%x%x%x", i + 2)
          if not hex then fail("invalid \\u escape") end
          local cp = tonumber(hex, 16)
          pos = i + 6
          if cp >= 0xD800 and cp <= 0xDBFF then
            local lo = s:match("^\\u(%x%x%x%x)", pos)
            local low = lo and tonumber(lo, 16)
            if not low or low < 0xDC00 or low > 0xDFFF then
              pos = i
              fail("unpaired surrogate in \\u escape")
            end
            cp = 0x10000 + (cp - 0xD800) * 0x400 + (low - 0xDC00)
            pos = pos + 6
          elseif cp >= 0xDC00 and cp <= 0xDFFF then
            pos = i
            fail("unpaired surrogate in \\u escape")
          end
          parts[#parts + 1] = utf8_of(cp)
        else
          fail("invalid escape in string")
        end
      else
        fail("unescaped control character in string")
      end
    end
  end

  local function nested(open, close, item)
    depth = depth + 1
    if depth > M.MAX_DEPTH then fail("nested deeper than " .. M.MAX_DEPTH .. " levels") end
    pos = pos + 1
    skip()
    if s:sub(pos, pos) == close then
      pos = pos + 1
      depth = depth - 1
      return
    end
    while true do
      item()
      skip()
      local c = s:sub(pos, pos)
      if c == close then
        pos = pos + 1
        depth = depth - 1
        return
      end
      if c ~= "," then
        fail("expected ',' or '" .. close .. "' after " .. (open == "{" and "a member" or "an element"))
      end
      pos = pos + 1
      skip()
    end
  end

  function value()
    skip()
    local c = s:sub(pos, pos)
    if c == "{" then
      local obj = {}
      nested("{", "}", function()
        if s:sub(pos, pos) ~= '"' then fail("expected a string key") end
        local k = str()
        skip()
        if s:sub(pos, pos) ~= ":" then fail("expected ':' after a key") end
        pos = pos + 1
        obj[k] = value()
      end)
      return obj
    elseif c == "[" then
      local arr, n = {}, 0
      nested("[", "]", function()
        n = n + 1
        arr[n] = value()
      end)
      return arr
    elseif c == '"' then
      return str()
    elseif s:sub(pos, pos + 3) == "true" then
      pos = pos + 4
      return true
    elseif s:sub(pos, pos + 4) == "false" then
      pos = pos + 5
      return false
    elseif s:sub(pos, pos + 3) == "null" then
      pos = pos + 4
      return M.null
    end
    local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
    if num and num:match("^-?0%d") then fail("a number has a leading zero") end
    if num and (num:match("^-?%d+$") or num:match("^-?%d+%.%d+$") or num:match("^-?%d+%.?%d*[eE][-+]?%d+$"))
      and not num:match("%.[eE]") then
      pos = pos + #num
      return tonumber(num)
    end
    if c == "" then fail("unexpected end of input") end
    fail("unexpected character '" .. c .. "'")
  end

  local v = value()
  skip()
  if pos <= #s then fail("unexpected text after the value") end
  return v
end

--- Decode s: the value, or nil and a message.
---@param s string
---@return any, string|nil
function M.decode(s)
  if type(s) ~= "string" then return nil, "expected a JSON string, got " .. type(s) end
  if #s > M.MAX_BYTES then return nil, string.format("longer than %d bytes", M.MAX_BYTES) end
  local ok, v = pcall(decode, s)
  if ok then return v end
  if getmetatable(v) == Fail then return nil, v.msg end
  error(v, 0)
end

return M
