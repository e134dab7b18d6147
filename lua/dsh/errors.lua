--- dsh.errors: the one shape of an expected failure.
--
-- Misuse raises (`error("dsh.fs: write: expected string, got nil", 2)`); expected
-- failures return `nil, err` where err is made here: a table with `code` (the
-- reference's codes, e.g. FS_NOT_FOUND) and `message`, printable with tostring.
local M = {}

---@class dsh.Error
---@field code string
---@field message string
local Error = {}
Error.__index = Error
Error.__tostring = function(e)
  return e.code .. ": " .. e.message
end

---@param code string
---@param message string
---@param fields table|nil extra fields copied into the error
---@return dsh.Error
function M.new(code, message, fields)
  local e = { code = code, message = message }
  if fields then
    for k, v in pairs(fields) do
      if e[k] == nil then e[k] = v end
    end
  end
  return setmetatable(e, Error)
end

--- One error for a list of failures: nil for none, the failure itself for
-- one, else an error of code whose message lists every failure and whose
-- .errors holds them all (so none is lost, as AggregateError does).
---@param list dsh.Error[]
---@param code string
---@param what string what failed, e.g. "dsh.context: dispose"
---@return dsh.Error|nil
function M.combine(list, code, what)
  if #list == 0 then return nil end
  if #list == 1 then return list[1] end
  local parts = {}
  for i, e in ipairs(list) do parts[i] = tostring(e.message or e) end
  return M.new(code, string.format("%s: %d failures: %s", what, #list, table.concat(parts, "; ")),
    { errors = list })
end

--- True when v is an error made by M.new.
function M.is(v)
  return getmetatable(v) == Error
end

-- Misuse is reported where the caller made it: at the first stack frame
-- outside dsh's own modules (this directory, providers included), so a
-- message never points inside the library however deep the check sits.
local LIB = debug.getinfo(1, "S").source:match("^@(.*/)[^/]*$")

local function caller_level()
  local level, last = 3, 2
  while true do
    local info = debug.getinfo(level, "S")
    if not info then return last end
    if info.what ~= "C" then
      local src = info.source
      if not (LIB and src:sub(1, 1) == "@" and src:sub(2, #LIB + 1) == LIB) then return level - 1 end
      last = level - 1
    end
    level = level + 1
  end
end

--- Raise a misuse error naming the module, at the caller's line (see above).
---@param module string e.g. "dsh.fs"
---@param fmt string the rest, starting with the public method: "readText: path must be a string"
function M.misuse(module, fmt, ...)
  error(module .. ": " .. string.format(fmt, ...), caller_level())
end

--- Check an argument's type; raises a misuse error naming module and what
-- ("<module>: <what>: expected <want>, got <type>").
function M.check(module, what, v, want, optional)
  local t = type(v)
  if t == want or (optional and v == nil) then return v end
  error(string.format("%s: %s: expected %s, got %s", module, what, want, t), caller_level())
end

return M
