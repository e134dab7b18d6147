--- dsh.core._ffi.check: is what LuaJIT declares what the library was compiled as?
--
-- Compares the declarations loaded in this LuaJIT state with the lines of the
-- build's FFI probe (build/bin/dsh-ffi-probe, written by core/ffi/probe.lua
-- from the same headers, its numbers computed by the C compiler):
--   size struct X N        ffi.sizeof("struct X") == N
--   offset struct X f N    ffi.offsetof("struct X", "f") == N
--   const NAME V           lib.NAME == V (enum constants)
--   func NAME              lib.NAME is declared and the library resolves it
-- and with the library's exported symbols: each one must be a function the
-- probe names (a public header declares it). A development check, used by
-- spec/01-core/10-ffi_contract_spec.lua; it returns the problems it finds, one
-- line each, naming the declaration and both sides.
local M = {}

--- The probe's output as a list of facts.
---@param text string
---@return table[] facts {kind=, name=, field=, value=}
function M.parse_facts(text)
  local facts = {}
  for line in text:gmatch("[^\n]+") do
    local kind, rest = line:match("^(%a+) (.+)$")
    local f
    if kind == "size" then
      local name, n = rest:match("^(struct [%w_]+) (%-?%d+)$")
      f = name and { kind = kind, name = name, value = tonumber(n) }
    elseif kind == "offset" then
      local name, field, n = rest:match("^(struct [%w_]+) ([%w_]+) (%-?%d+)$")
      f = name and { kind = kind, name = name, field = field, value = tonumber(n) }
    elseif kind == "const" then
      local name, n = rest:match("^([%w_]+) (%-?%d+)$")
      f = name and { kind = kind, name = name, value = tonumber(n) }
    elseif kind == "func" then
      f = rest:match("^[%w_]+$") and { kind = kind, name = rest }
    end
    facts[#facts + 1] = f or error("dsh.core._ffi.check: unreadable probe line: " .. line, 2)
  end
  return facts
end

--- Names of the functions a shared library exports (nm -D).
---@param path string
---@return string[]|nil, string?
function M.exports(path)
  local p = io.popen("nm -D --defined-only '" .. path:gsub("'", "'\\''") .. "' 2>&1")
  local text = p:read("*a")
  local ok = p:close()
  if not ok then return nil, "nm failed: " .. text end
  local names = {}
  for kind, name in text:gmatch("%x+ (%a) ([%w_]+)") do
    if kind == "T" or kind == "W" or kind == "D" or kind == "B" or kind == "R" then names[#names + 1] = name end
  end
  return names
end

local function try(fn, ...)
  local ok, v = pcall(fn, ...)
  if ok then return v end
  return nil, tostring(v):gsub("^.-:%d+: ", "")
end

--- Problems between the declarations of this state and the facts.
---@param ffi table the ffi module of the state that holds the declarations
---@param lib userdata the loaded library (ffi.load)
---@param facts table[] from parse_facts
---@param exports string[]|nil exported symbols of lib (from M.exports)
---@return string[] problems, empty when everything agrees
function M.compare(ffi, lib, facts, exports)
  local problems = {}
  local function bad(fmt, ...) problems[#problems + 1] = string.format(fmt, ...) end
  local declared = {}
  for _, f in ipairs(facts) do
    if f.kind == "size" then
      local n, err = try(ffi.sizeof, f.name)
      if n == nil then
        bad("%s: C size %d, not declared in Lua (%s)", f.name, f.value, err)
      elseif n ~= f.value then
        bad("%s: C size %d, Lua size %d", f.name, f.value, n)
      end
    elseif f.kind == "offset" then
      local n = try(ffi.offsetof, f.name, f.field)
      if n == nil then
        bad("%s.%s: C offset %d, no such field in Lua", f.name, f.field, f.value)
      elseif n ~= f.value then
        bad("%s.%s: C offset %d, Lua offset %d", f.name, f.field, f.value, n)
      end
    elseif f.kind == "const" then
      local v, err = try(function() return lib[f.name] end)
      if v == nil then
        bad("%s: C value %d, not declared in Lua (%s)", f.name, f.value, err)
      elseif tonumber(v) ~= f.value then
        bad("%s: C value %d, Lua value %s", f.name, f.value, tostring(tonumber(v)))
      end
    elseif f.kind == "func" then
      declared[f.name] = true
      local _, err = try(function() return lib[f.name] end)
      if err then bad("%s: declared in the headers, not callable from Lua (%s)", f.name, err) end
    end
  end
  for _, name in ipairs(exports or {}) do
    if not declared[name] and name:match("^dsh_") then
      bad("%s: exported by the library, declared in no public header", name)
    elseif not declared[name] and not name:match("^_") then
      bad("%s: exported by the library outside the dsh_ namespace", name)
    end
  end
  return problems
end

return M
