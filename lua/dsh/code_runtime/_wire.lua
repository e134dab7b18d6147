--- dsh.code_runtime._wire: the lossless wire across the Code Mode boundary
-- (harness-behaviour.md §3.3), in plain Lua: Lua values to and from the
-- reference's flat pre-order token list, whose JSON text is
-- dsh.code_runtime._json's.
--
-- Owns: what a Lua value is on the wire (the table below), encoding it to
-- wire JSON (into a sink, so the host writes straight to the core's frame
-- buffer), the incremental token reader, and a value's JSON.stringify cost.
-- Never parses or prints JSON itself (the text half does) and never does I/O.
--
-- Shared by the host (dsh.code_runtime) and the runners in the sandbox,
-- which load this very file (uploaded beside them as code-runtime-wire.lua,
-- its text half preloaded as dsh.code_runtime._json), so it requires nothing
-- else and uses nothing but the Lua 5.1 base library.
--
-- How Lua values map (docs/code-runtime.md has the table):
--   null         M.null (a unique sentinel) <-> JSON null; nil never crosses
--   booleans     as they are
--   numbers      finite doubles; NaN, +-Infinity and -0 cannot cross (JSON
--                has no text for them, and JSON.stringify(-0) is "0"); LuaJIT
--                has one number type, so 3 and 3.0 are the same value and an
--                integral number encodes without a fraction
--   strings      must be valid UTF-8 (a byte string that is not cannot cross)
--   arrays       a table whose keys are exactly 1..n (n >= 1), or any table
--                marked with M.array (decoded arrays are marked, so [] stays [])
--   objects      a table whose keys are all strings; an unmarked empty table
--                is {} (as lua-cjson does); key order is not kept (Lua tables
--                have none): keys encode in byte order
--   not at all   cycles, functions, userdata, threads, cdata, tables mixing
--                key kinds or with holes, tables with foreign metatables
-- Shared references are copied. Every traversal is iterative, so depth is
-- unlimited. A value that cannot cross is an error naming where it is
-- (M.encode returns nil, message), never silently changed.
--
-- The wire is the reference's flat pre-order token list: a scalar is itself,
-- an array is {kind="array", length=n} then its children, an object is
-- {kind="object", keys={...}} then its values in key order.
local J = require "dsh.code_runtime._json"

local M = {}

local floor, huge = math.floor, math.huge
local format = string.format
local concat, sort = table.concat, table.sort
local MAX_SAFE = 9007199254740991

-- The values JSON has that Lua lacks, as the text half marks them.
M.null, M.array_mt, M.object_mt = J.null, J.array_mt, J.object_mt
M.array, M.object = J.array, J.object

-- Lua values <-> wire tokens -------------------------------------------------------

local function path_text(path, n)
  local out = { "$" }
  for k = 1, n do
    local seg = path[k]
    out[#out + 1] = type(seg) == "number" and ("[" .. (seg - 1) .. "]") or ("." .. seg)
  end
  return concat(out)
end

-- Classifies table t: "array", n | "object", sorted keys | nil, why.
local function shape(t)
  local mt = getmetatable(t)
  if mt ~= nil and mt ~= M.array_mt and mt ~= M.object_mt then
    return nil, "a table with a metatable"
  end
  local nint, nstr, maxi = 0, 0, 0
  for k in pairs(t) do
    local tk = type(k)
    if tk == "string" then
      nstr = nstr + 1
    elseif tk == "number" and k >= 1 and k == floor(k) then
      nint = nint + 1
      if k > maxi then maxi = k end
    else
      return nil, "a table with a " .. tk .. " key"
    end
  end
  if nint > 0 and nstr > 0 then return nil, "a table mixing array and object keys" end
  if nint > 0 then
    if mt == M.object_mt then return nil, "an object-marked table with integer keys" end
    if maxi ~= nint then return nil, "an array with holes" end
    return "array", nint
  end
  if mt == M.array_mt then
    if nstr > 0 then return nil, "an array-marked table with string keys" end
    return "array", 0
  end
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  sort(keys)
  return "object", keys
end

-- The sink M.encode writes to by default: Lua strings, joined at the end.
local StringSink = {}
StringSink.__index = StringSink
function StringSink:raw(text)
  local n = self.n + 1
  self.n, self.out[n] = n, text
  return true
end
function StringSink:string(x)
  if not J.valid_utf8(x) then return false end
  return self:raw(J.quote(x))
end
function StringSink:number(x)
  return self:raw(J.number(x))
end

--- Writes the wire JSON of a Lua value (a JSON array of tokens) to sink:
-- sink:raw(json_syntax), sink:string(s) (false: s is not UTF-8),
-- sink:number(x); each returns true, or nil, err to stop (returned as is).
-- Returns true, or nil, message naming what cannot cross and where.
function M.encode_into(v, sink)
  local on_path = {}
  -- frames: {table, kind, items (n or keys), next index, path depth}
  local stack, top = {}, 0
  local path, depth = {}, 0
  local x = v
  local ok, err = sink:raw("[")
  if not ok then return nil, err end
  local first = true
  while true do
    if not first then
      ok, err = sink:raw(",")
      if not ok then return nil, err end
    end
    first = false
    local tx = type(x)
    if tx == "string" then
      ok, err = sink:string(x)
      if ok == false then return nil, "a string that is not valid UTF-8 at " .. path_text(path, depth) end
    elseif tx == "number" then
      if x ~= x or x == huge or x == -huge then
        return nil, format("%s at %s", x ~= x and "NaN" or "an infinite number", path_text(path, depth))
      end
      if x == 0 and 1 / x < 0 then return nil, "-0 at " .. path_text(path, depth) end
      ok, err = sink:number(x)
    elseif tx == "boolean" then
      ok, err = sink:raw(x and "true" or "false")
    elseif x == M.null then
      ok, err = sink:raw("null")
    elseif tx == "table" then
      if on_path[x] then return nil, "a cycle at " .. path_text(path, depth) end
      local kind, items = shape(x)
      if not kind then return nil, items .. " at " .. path_text(path, depth) end
      if kind == "array" then
        ok, err = sink:raw('{"kind":"array","length":' .. items .. "}")
      else
        ok, err = sink:raw('{"kind":"object","keys":[')
        for i, k in ipairs(items) do
          if not ok then break end
          if i > 1 then ok, err = sink:raw(",") end
          if ok then ok, err = sink:string(k) end
          if ok == false then
            return nil, "a key that is not valid UTF-8 at " .. path_text(path, depth)
          end
        end
        if ok then ok, err = sink:raw("]}") end
      end
      on_path[x] = true
      top = top + 1
      stack[top] = { x, kind, items, 1 }
    else
      return nil, "a " .. (x == nil and "nil" or tx) .. " value at " .. path_text(path, depth)
    end
    if not ok then return nil, err end
    -- next value: the next child of the innermost unfinished container
    x = nil
    while top > 0 do
      local f = stack[top]
      local i = f[4]
      local count = f[2] == "array" and f[3] or #f[3]
      if i <= count then
        f[4] = i + 1
        depth = top
        if f[2] == "array" then
          path[depth] = i
          x = f[1][i]
        else
          local k = f[3][i]
          path[depth] = k
          x = f[1][k]
        end
        break
      end
      on_path[f[1]] = nil
      stack[top] = nil
      top = top - 1
    end
    if x == nil and top == 0 then break end
  end
  return sink:raw("]")
end

--- The wire JSON text of a Lua value (a JSON array of tokens), or nil,
-- message naming what cannot cross and where.
function M.encode(v)
  local sink = setmetatable({ out = {}, n = 0 }, StringSink)
  local ok, err = M.encode_into(v, sink)
  if not ok then return nil, err end
  return concat(sink.out, "", 1, sink.n)
end

local function is_marker(tok)
  if type(tok) ~= "table" or tok == M.null or getmetatable(tok) == M.array_mt then return nil end
  local kind, nkeys = tok.kind, 0
  for _ in pairs(tok) do nkeys = nkeys + 1 end
  if nkeys ~= 2 then return false end
  if kind == "array" then
    local len = tok.length
    if type(len) == "number" and len >= 0 and len == floor(len) and len <= MAX_SAFE then return "array", len end
  elseif kind == "object" then
    local keys = tok.keys
    if getmetatable(keys) ~= M.array_mt then return false end
    local seen = {}
    for k = 1, #keys do
      local key = keys[k]
      if type(key) ~= "string" or seen[key] or not J.valid_utf8(key) then return false end
      seen[key] = true
    end
    return "object", keys
  end
  return false
end

---@class dsh.code_runtime.TokenReader
local TokenReader = {}
TokenReader.__index = TokenReader

--- An incremental decoder of the wire: feed() each token in order (a
-- decoded JSON value: a scalar, or a marker table), then finish(). Holds
-- only the containers still open; the first malformed token ends it.
function M.token_reader()
  return setmetatable({ stack = {}, top = 0, have = false, count = 0 }, TokenReader)
end

--- One token; checked: for a string, true when it is known to be UTF-8,
-- false when it is known not to be (nil: check it here). False once the wire
-- is malformed.
function TokenReader:feed(tok, checked)
  if self.err then return false end
  self.count = self.count + 1
  if self.have then
    self.err = "the wire holds more than one root"
    return false
  end
  local value
  local tt = type(tok)
  if tt == "string" then
    if checked == false or (checked == nil and not J.valid_utf8(tok)) then
      self.err = "a string that is not valid UTF-8"
      return false
    end
    value = tok
  elseif tt == "number" then
    if tok ~= tok or tok == huge or tok == -huge or (tok == 0 and 1 / tok < 0) then
      self.err = "a number that is not lossless"
      return false
    end
    value = tok
  elseif tt == "boolean" or tok == M.null then
    value = tok
  else
    local kind, items = is_marker(tok)
    if not kind then
      self.err = "a malformed token"
      return false
    end
    local count = kind == "array" and items or #items
    local c = kind == "array" and setmetatable({}, M.array_mt) or {}
    if count == 0 then
      value = c
    else
      self.top = self.top + 1
      self.stack[self.top] = { c, kind, items, 0, count }
      return true
    end
  end
  local stack = self.stack
  while true do
    local f = stack[self.top]
    if not f then
      self.root, self.have = value, true
      return true
    end
    local k = f[4] + 1
    f[4] = k
    if f[2] == "array" then f[1][k] = value else f[1][f[3][k]] = value end
    if k < f[5] then return true end
    value = f[1]
    stack[self.top] = nil
    self.top = self.top - 1
  end
end

--- The value, or nil, message.
function TokenReader:finish()
  if self.err then return nil, self.err end
  if self.count == 0 then return nil, "the wire must be a non-empty array" end
  if not self.have then return nil, "the wire ends inside a container" end
  return self.root
end

--- Lua value of a decoded wire (a token array as dsh.code_runtime._json.decode_json returns it).
-- nil, message when the wire is malformed or holds a value that is not
-- lossless (for Lua: a string that is not UTF-8, -0, a non-finite number).
function M.from_tokens(tokens)
  if type(tokens) ~= "table" or getmetatable(tokens) ~= M.array_mt or #tokens == 0 then
    return nil, "the wire must be a non-empty array"
  end
  local r = M.token_reader()
  for i = 1, #tokens do
    if not r:feed(tokens[i]) then break end
  end
  return r:finish()
end

--- Bytes of JSON.stringify(v) for a value decoded from a wire (iterative).
-- string_cost(s) gives a string's quoted cost (the host passes the core's).
function M.json_cost(v, string_cost)
  local total, stack, top = 0, { v }, 1
  while top > 0 do
    local x = stack[top]
    stack[top] = nil
    top = top - 1
    local tx = type(x)
    if tx == "string" then
      total = total + string_cost(x)
    elseif tx == "number" then
      total = total + #J.number(x)
    elseif tx == "boolean" then
      total = total + (x and 4 or 5)
    elseif x == M.null then
      total = total + 4
    elseif getmetatable(x) == M.array_mt or x[1] ~= nil then
      local n = #x
      total = total + 2 + (n > 0 and n - 1 or 0)
      for i = 1, n do
        top = top + 1
        stack[top] = x[i]
      end
    else
      local n = 0
      for k, val in pairs(x) do
        n = n + 1
        total = total + string_cost(k) + 1
        top = top + 1
        stack[top] = val
      end
      total = total + 2 + (n > 0 and n - 1 or 0)
    end
  end
  return total
end

--- Lua value of wire JSON text; nil, message when malformed.
function M.decode(text)
  local tokens, err = J.decode_json(text)
  if tokens == nil then return nil, err end
  return M.from_tokens(tokens)
end

return M
