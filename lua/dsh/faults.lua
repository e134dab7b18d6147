--- dsh.faults: fault-injection points — the one seam through which specs and
-- `dsh poc` make a service fail where no real fault can be arranged on
-- demand (a publication that fails once the process group exists, a source
-- swapped right before the LSP reader opens it).
--
-- Owns: a service's set of named points and what is armed at each. Never
-- fires anything itself and never changes a service's behaviour while
-- nothing is armed (a fire is one table lookup). A service declares its
-- points and exposes svc:injectFault(point, fn) (fn nil disarms); where the
-- fault would strike it calls points:fire(point, ...), which returns
-- whatever the armed fn returned, or nothing when none is armed.
--
--   self._faults = faults.points("dsh.subprocess", { "afterStart" })
--   function Service:injectFault(point, fn) self._faults:inject(point, fn) end
--   local ok, err = self._faults:fire("afterStart", handle, bp)
local errors = require "dsh.errors"

local M = {}

---@class dsh.FaultPoints
local Points = {}
Points.__index = Points
Points.__tostring = function(p)
  local armed = {}
  for name in pairs(p._armed) do armed[#armed + 1] = name end
  table.sort(armed)
  return "dsh.faults(" .. p._module .. (#armed > 0 and (", armed: " .. table.concat(armed, ", ")) or "") .. ")"
end

--- The points of a service: module names it in misuse messages, names lists them.
---@param module string
---@param names string[]
---@return dsh.FaultPoints
function M.points(module, names)
  local known = {}
  for _, n in ipairs(names) do known[n] = true end
  return setmetatable({ _module = module, _known = known, _names = names, _armed = {} }, Points)
end

--- Arm fn at point (replacing what was armed there), or disarm it (fn nil).
-- Raises on a point the service does not have.
---@param point string
---@param fn function|nil
function Points:inject(point, fn)
  if not self._known[point] then
    errors.misuse(self._module, "injectFault: no fault point %s (it has: %s)", tostring(point),
      table.concat(self._names, ", "))
  end
  errors.check(self._module, "injectFault: fn", fn, "function", true)
  self._armed[point] = fn
end

--- Call what is armed at point with the arguments; nothing when none is.
function Points:fire(point, ...)
  local fn = self._armed[point]
  if fn then return fn(...) end
end

--- True when something is armed at point.
function Points:armed(point)
  return self._armed[point] ~= nil
end

return M
