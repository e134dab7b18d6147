--- dsh.core.ledger: the Code Mode output ledger (harness-behaviour.md §2.6).
--
-- Counts the JSON bytes of the logs array plus the value or failure message,
-- with costs following JSON.stringify. The state is a plain C struct.
local F = require "dsh.core._ffi"
local ffi, C = F.ffi, F.C

local M = {}

local prefix_p = ffi.new("size_t[1]")
local msg = ffi.new("char[64]")
local msg_n = ffi.new("size_t[1]")

local function check(fn, what, v, want)
  if type(v) ~= want then
    error(("dsh.core.ledger: %s: expected %s %s, got %s"):format(fn, want, what, type(v)), 3)
  end
end

--- JSON.stringify byte length of s as a string, quotes included.
---@param s string
---@return integer
function M.string_cost(s)
  check("string_cost", "text", s, "string")
  return tonumber(C.dsh_json_string_cost(s, #s))
end

--- The longest code-point-safe prefix of s whose quoted cost fits in budget.
---@param s string
---@param budget integer
---@return string
function M.string_prefix(s, budget)
  check("string_prefix", "text", s, "string")
  check("string_prefix", "budget", budget, "number")
  if budget < 0 then budget = 0 end
  return s:sub(1, tonumber(C.dsh_json_string_prefix(s, #s, budget)))
end

---@class dsh.Ledger
---@field private _l ffi.cdata*
local Ledger = {}
Ledger.__index = Ledger

function Ledger:__tostring()
  local l = self._l
  return ("dsh.core.ledger (%d of %d bytes, %d logs%s)"):format(tonumber(l.used), tonumber(l.max_bytes),
    tonumber(l.nlogs), l.limited ~= 0 and ", limited" or "")
end

--- A ledger for max bytes (>= 4).
---@param max integer
---@return dsh.Ledger
function M.new(max)
  check("new", "max", max, "number")
  local l = ffi.new("dsh_ledger_t")
  if max ~= math.floor(max) or C.dsh_ledger_init(l, max) ~= 0 then
    error("dsh.core.ledger: new: max must be an integer >= 4, got " .. tostring(max), 2)
  end
  return setmetatable({ _l = l }, Ledger)
end

--- Counts one log. true if it fits whole; otherwise false and the
--- code-point-safe prefix that still fits ("" if none). The ledger is then
--- limited and every later log returns false, "".
---@param text string
---@return boolean fits
---@return string? prefix
function Ledger:add_log(text)
  check("add_log", "text", text, "string")
  if C.dsh_ledger_add_log(self._l, text, #text, prefix_p) == 0 then return true end
  return false, text:sub(1, tonumber(prefix_p[0]))
end

--- Counts a value or failure message of nbytes JSON bytes; false (and limited)
--- if it does not fit.
---@param nbytes integer
---@return boolean
function Ledger:add_value(nbytes)
  check("add_value", "nbytes", nbytes, "number")
  if nbytes < 0 then error("dsh.core.ledger: add_value: nbytes must be >= 0, got " .. nbytes, 2) end
  return C.dsh_ledger_add_value(self._l, nbytes) == 0
end

--- "outer output exceeded <max> bytes", cut to fit what is left ("" if < 2).
---@return string
function Ledger:limit_message()
  C.dsh_ledger_limit_message(self._l, msg, 64, msg_n)
  return ffi.string(msg, msg_n[0])
end

---@return integer
function Ledger:used() return tonumber(self._l.used) end
---@return integer
function Ledger:max() return tonumber(self._l.max_bytes) end
---@return integer
function Ledger:nlogs() return tonumber(self._l.nlogs) end
---@return boolean
function Ledger:limited() return self._l.limited ~= 0 end

return M
