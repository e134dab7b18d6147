--- code-runtime-worker: runs one Lua program for the supervisor, then exits.
--
-- fd 4 brings the boot and binding replies, fd 3 takes logs, calls and the
-- result, one JSON line each. The program runs in a fresh, minimal global
-- environment: no os.execute, io.popen, ffi, debug, require or load unless
-- the boot's `libraries` lists them. Bindings are plain functions: a call
-- writes a `call` line and blocks the program until its reply arrives, so
-- the program reads straight-line. print and io.write become logs. Every
-- function this file relies on is captured before the program runs, so a
-- program that replaces globals (string.format, table.concat, ...) cannot
-- break the transport.
local ffi = require "ffi"
local DIR = arg[0]:match("^(.*)/[^/]*$") or "."
local fast = dofile(DIR .. "/code-runtime-fast.lua")
local J, W = fast.wire(DIR)

local concat, select, tostring, type, pairs, ipairs, setmetatable, getmetatable, error, xpcall =
  table.concat, select, tostring, type, pairs, ipairs, setmetatable, getmetatable, error, xpcall
local sub, find = string.sub, string.find
local traceback = debug.traceback
local sort = table.sort

ffi.cdef [[
long read(int fd, void *buf, size_t n);
long write(int fd, const void *buf, size_t n);
]]
local C = ffi.C
local TO_SUP, FROM_SUP = 3, 4
local LOG_PIECE = 65536

local function put(line)
  local p, left = ffi.cast("const uint8_t *", line), #line
  while left > 0 do
    local n = C.write(TO_SUP, p, left)
    if n <= 0 then
      if ffi.errno() ~= 4 then os.exit(3) end
    else
      p, left = p + n, left - n
    end
  end
end

-- Lines from the supervisor. A long line comes in many reads: its pieces are
-- kept in a list and joined once (joining as they come would copy it again
-- with every read).
local rbuf = ffi.new("uint8_t[65536]")
local pending, pieces = "", {}
local function get_line()
  while true do
    local nl = find(pending, "\n", 1, true)
    if nl then
      local line = sub(pending, 1, nl - 1)
      if #pieces > 0 then
        pieces[#pieces + 1] = line
        line = concat(pieces)
        pieces = {}
      end
      pending = sub(pending, nl + 1)
      return line
    end
    if pending ~= "" then pieces[#pieces + 1] = pending end
    local n = C.read(FROM_SUP, rbuf, 65536)
    if n == 0 then os.exit(3) end -- the supervisor is gone
    if n > 0 then pending = ffi.string(rbuf, n) elseif ffi.errno() ~= 4 then os.exit(3) else pending = "" end
  end
end

local boot = J.decode_json(get_line())
local MAX_OUT = boot.maxOutputBytes

-- Logs ---------------------------------------------------------------------------

-- A code-point-safe cut at or before i bytes.
local function cut(s, i)
  while i > 0 and i < #s do
    local b = s:byte(i + 1)
    if b < 0x80 or b >= 0xC0 then break end
    i = i - 1
  end
  return i
end

-- A code-point-safe cut at or before byte i + at of s (at: where the rest starts).
local function cut_from(s, at, i)
  while i > 0 and at + i < #s do
    local b = s:byte(at + i + 1)
    if b < 0x80 or b >= 0xC0 then break end
    i = i - 1
  end
  return i
end

local function log(text)
  -- Longer than the ledger could ever take: only what it could keep matters.
  if #text > MAX_OUT + 4 then text = sub(text, 1, cut(text, MAX_OUT + 4)) end
  local at = 0 -- bytes of text already sent (slicing the rest off each time would copy it again)
  while #text - at > LOG_PIECE do
    local k = cut_from(text, at, LOG_PIECE)
    if k == 0 then k = LOG_PIECE end
    local piece = sub(text, at + 1, at + k)
    put('{"type":"log","more":true,"text":' .. (fast.plain(piece) and ('"' .. piece .. '"') or J.quote(piece)) .. "}\n")
    at = at + k
  end
  if at > 0 then text = sub(text, at + 1) end
  put('{"type":"log","text":' .. (fast.plain(text) and ('"' .. text .. '"') or J.quote(text)) .. "}\n")
end

-- print's rendering of a value: strings as they are, tables as a short
-- JSON-like text (depth 4, 100 items), the rest with tostring.
local function inspect(v, depth)
  local t = type(v)
  if t == "string" then return depth == 0 and v or J.quote(v) end
  if v == W.null then return "null" end
  if t ~= "table" then return tostring(v) end
  local mt = getmetatable(v)
  if mt and mt ~= W.array_mt and mt ~= W.object_mt and mt.__tostring then return tostring(v) end
  if depth >= 4 then return "{...}" end
  local n = #v
  local parts = {}
  if n > 0 or mt == W.array_mt then
    for i = 1, math.min(n, 100) do parts[i] = inspect(v[i], depth + 1) end
    if n > 100 then parts[#parts + 1] = "... " .. (n - 100) .. " more" end
    return "[" .. concat(parts, ", ") .. "]"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for i = 1, math.min(#keys, 100) do
    local k = keys[i]
    local ks = type(k) == "string" and k:match("^[%a_][%w_]*$") and k or ("[" .. inspect(k, 1) .. "]")
    parts[i] = ks .. " = " .. inspect(v[k], depth + 1)
  end
  if #keys > 100 then parts[#parts + 1] = "... " .. (#keys - 100) .. " more" end
  return "{" .. concat(parts, ", ") .. "}"
end

local function print_(...)
  local parts = {}
  for i = 1, select("#", ...) do parts[i] = inspect((select(i, ...)), 0) end
  log(concat(parts, "\t"))
end

local function write_(...)
  local parts = {}
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if type(v) ~= "string" and type(v) ~= "number" then
      error("bad argument #" .. i .. " to 'write' (string expected, got " .. type(v) .. ")", 2)
    end
    parts[i] = tostring(v)
  end
  log(concat(parts))
end

-- Bindings ---------------------------------------------------------------------------

local next_id = 0

local function binding_error(class, member, name, message)
  if not class then error(message, 0) end
  error(setmetatable({ name = class.name, message = message, [member] = name }, class), 0)
end

local function binding(global, name, class, member)
  return function(...)
    local n = select("#", ...)
    local args = W.array({ ... })
    local wire = #args == n and W.encode(args)
    if not wire then binding_error(class, member, name, "binding arguments must be lossless JSON") end
    next_id = next_id + 1
    local id = next_id
    put('{"type":"call","id":' .. id .. ',"global":' .. J.quote(global) .. ',"name":' .. J.quote(name)
      .. ',"args":' .. wire .. "}\n")
    while true do
      local r = J.decode_json(get_line())
      if type(r) == "table" and r.type == "reply" and r.id == id then
        if r.ok ~= true then binding_error(class, member, name, tostring(r.message)) end
        local value = W.from_tokens(r.value)
        if value == nil then binding_error(class, member, name, "binding resolution must be lossless JSON") end
        return value
      end
    end
  end
end

-- The program's environment ------------------------------------------------------------

local function copy(t, except)
  local out = {}
  for k, v in pairs(t) do
    if not (except and except[k]) then out[k] = v end
  end
  return out
end

local env = {}
for _, k in ipairs { "assert", "error", "ipairs", "next", "pairs", "pcall", "select", "tonumber", "tostring",
  "type", "unpack", "xpcall", "rawequal", "rawget", "rawset", "setmetatable", "getmetatable" } do
  env[k] = _G[k]
end
env.string = copy(string, { dump = true })
env.table = copy(table)
env.math = copy(math)
env.bit = copy(bit)
env.coroutine = copy(coroutine)
env.os = { time = os.time, clock = os.clock, date = os.date, difftime = os.difftime }
env.io = { write = write_ }
env.print = print_
env.json = { null = W.null, array = W.array, object = W.object }
env._G = env
-- The string metatable is shared with this file: the program may use string
-- methods but not reach (and replace) the library behind them.
getmetatable("").__metatable = "string"
for _, lib in ipairs(type(boot.libraries) == "table" and boot.libraries or {}) do
  if lib == "os" then env.os = os
  elseif lib == "io" then env.io = io
  elseif lib == "debug" then env.debug = debug
  elseif lib == "ffi" then env.ffi = ffi
  elseif lib == "require" then env.require = require
  elseif lib == "load" then env.load, env.loadstring, env.dofile = load, loadstring, dofile
  end
end

for _, ns in ipairs(boot.namespaces) do
  local class, member
  if type(ns.errorClass) == "table" then
    class = { name = ns.errorClass.name }
    class.__index = class
    class.__tostring = function(e) return e.name .. ": " .. tostring(e.message) end
    member = ns.errorClass.memberNameProperty
    env[class.name] = class
  end
  local t = {}
  for _, name in ipairs(ns.names) do t[name] = binding(ns.global, name, class, member) end
  env[ns.global] = t
end

-- Running --------------------------------------------------------------------------------

local function done_error(kind, message)
  put('{"type":"done","error":{"kind":' .. J.quote(kind) .. ',"message":' .. J.quote(message) .. "}}\n")
  os.exit(0)
end

local function render_error(e)
  local t = type(e)
  if t == "string" then
    local tb = traceback(e, 3)
    -- keep the program's own frames: the runner's are noise to the model
    local keep = {}
    for line in tb:gmatch("[^\n]+") do
      if not find(line, "^%s") or find(line, "program:") then keep[#keep + 1] = line end
    end
    if keep[#keep] == "stack traceback:" then keep[#keep] = nil end
    return concat(keep, "\n")
  end
  if t == "number" or t == "boolean" then return tostring(e) end
  if t == "table" then
    local mt = getmetatable(e)
    if type(mt) == "table" and mt.__tostring then
      local ok, s = pcall(tostring, e)
      if ok and type(s) == "string" then return s end
    elseif type(rawget(e, "message")) == "string" then
      return rawget(e, "message")
    end
  end
  return nil
end

local fn, perr = load(boot.code, "=program", "t", env)
if not fn then done_error("exception", perr) end
-- The handler allocates as little as it can: out of memory, rendering waits
-- until the program's stack (and what it held) is gone.
local rendered, raw
local ok, value = xpcall(fn, function(e)
  raw = e
  local rok, text = pcall(render_error, e)
  if rok then rendered = text end
  return e
end)
if not ok then
  -- out of memory skips the handler: the error is what xpcall returned
  if raw == nil and type(value) == "string" then raw = value end
  value = nil
  collectgarbage()
  local text = rendered or (type(raw) == "string" and raw) or nil
  if not text or not J.valid_utf8(text) then text = "program threw an unrenderable value" end
  done_error("exception", text)
end
if value == nil then
  put('{"type":"done"}\n')
  os.exit(0)
end
local wire = W.encode(value)
if not wire then done_error("invalid-output", "program completion must be lossless JSON") end
put('{"type":"done","value":' .. wire .. "}\n")
os.exit(0)
