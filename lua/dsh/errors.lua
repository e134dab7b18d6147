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

--- True when v is an error made by M.new.
function M.is(v)
  return getmetatable(v) == Error
end

--- Raise a misuse error at the caller's caller, naming the module.
---@param module string e.g. "dsh.proc"
function M.misuse(module, fmt, ...)
  error(module .. ": " .. string.format(fmt, ...), 3)
end

--- Check an argument's type; raises a misuse error naming module and what.
function M.check(module, what, v, want, optional)
  local t = type(v)
  if t == want or (optional and v == nil) then return v end
  error(string.format("%s: %s: expected %s, got %s", module, what, want, t), 3)
end

return M
