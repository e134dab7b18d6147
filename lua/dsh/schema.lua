--- dsh.schema: the small shared checks of provider config (providers/*/schema.lua).
--
-- Every provider validates its config when it is added (ctx:use), before any
-- I/O, and raises a misuse error naming the provider. The one check every
-- provider must make is that no key is unknown: a misspelt key would
-- otherwise be ignored and its default apply silently. Adopting it is one
-- line at the top of a provider's validate:
--
--   local schema = require "dsh.schema"
--   local KEYS = { "command", "timeoutMs", "cwd" }
--   function M.validate(cfg)
--     schema.keys("pty-e2b", cfg, KEYS)   -- raises: pty-e2b: unknown config key "timeOutMs"
--     ...                                 --   (did you mean "timeoutMs"?)
--   end
--
-- The value checks below (integer, positive, number, one_of, path, string_map) raise
-- with the same wording everywhere ("<key> must be ..."); a provider uses
-- them or its own words, as its reference texts require.
local errors = require "dsh.errors"

local M = {}

--- A deep copy of a config value (plain tables: what a preset or a tool's
--- definition hands out must not alias the module's own).
function M.copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = M.copy(x) end
  return out
end

-- Edit distance (insert, delete, substitute, swap of neighbours), ASCII case
-- ignored: "ondispose" is 0 from "onDispose", "timout" 1 from "timeout".
local function distance(a, b)
  a, b = a:lower(), b:lower()
  local la, lb = #a, #b
  local prev2, prev = {}, {}
  for j = 0, lb do prev[j] = j end
  for i = 1, la do
    local cur = { [0] = i }
    for j = 1, lb do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      local d = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
      if i > 1 and j > 1 and a:byte(i) == b:byte(j - 1) and a:byte(i - 1) == b:byte(j) then
        d = math.min(d, prev2[j - 2] + 1)
      end
      cur[j] = d
    end
    prev2, prev = prev, cur
  end
  return prev[lb]
end
M.distance = distance

--- The known name closest to name, or nil when none is close (more than a
-- third of the longer name differs, and more than two edits).
---@param name string
---@param known string[]
---@return string|nil
function M.closest(name, known)
  local best, best_d
  for _, k in ipairs(known) do
    local d = distance(name, k)
    if not best_d or d < best_d or (d == best_d and k < best) then best, best_d = k, d end
  end
  if not best then return nil end
  local limit = math.max(2, math.floor(math.max(#name, #best) / 3))
  if best_d > limit then return nil end
  return best
end

local function list_of(known)
  if known[1] ~= nil or next(known) == nil then return known end
  local out = {}
  for k in pairs(known) do out[#out + 1] = k end
  return out
end

--- Raise unless cfg is a table whose keys are all in known (a list of names
-- or a set name -> true). The message names the first unknown key (in byte
-- order) and the closest known key, or lists the known keys when none is close.
---@param module string  the provider's name, the prefix of the message
---@param cfg any
---@param known string[]|table<string, boolean>
---@return table cfg
function M.keys(module, cfg, known)
  if type(cfg) ~= "table" then errors.misuse(module, "config must be a table, got %s", type(cfg)) end
  local names = list_of(known)
  local set = {}
  for _, k in ipairs(names) do set[k] = true end
  local unknown = {}
  for k in pairs(cfg) do
    if not set[k] then unknown[#unknown + 1] = k end
  end
  if #unknown == 0 then return cfg end
  table.sort(unknown, function(a, b) return tostring(a) < tostring(b) end)
  local key = unknown[1]
  if type(key) ~= "string" then
    errors.misuse(module, "config keys must be strings, got %s %s", type(key), tostring(key))
  end
  local near = M.closest(key, names)
  if near then errors.misuse(module, 'unknown config key "%s" (did you mean "%s"?)', key, near) end
  local sorted = { unpack(names) }
  table.sort(sorted)
  if #sorted == 0 then errors.misuse(module, 'unknown config key "%s" (it takes no config)', key) end
  errors.misuse(module, 'unknown config key "%s" (known keys: %s)', key, table.concat(sorted, ", "))
end

-- Backend contracts ---------------------------------------------------------------

--- Raise unless backend is a table with a function for every name of
--- contract (a seam's M.BACKEND: the functions its backends provide); the
--- message names the seam's method, the missing function and the contract.
---@param module string  the seam, e.g. "dsh.subprocess"
---@param what string    its constructor, e.g. "service"
---@param backend any
---@param contract string[]
---@return table backend
function M.backend(module, what, backend, contract)
  if type(backend) ~= "table" then errors.misuse(module, "%s: backend must be a table, got %s", what, type(backend)) end
  for _, name in ipairs(contract) do
    if type(backend[name]) ~= "function" then
      errors.misuse(module, "%s: backend.%s must be a function (the backend contract: %s)", what, name,
        table.concat(contract, ", "))
    end
  end
  return backend
end

-- Values ---------------------------------------------------------------------------

--- cfg[key] as an integer in [lo, hi], default when absent.
function M.integer(module, cfg, key, default, lo, hi)
  local v = cfg[key]
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v or v % 1 ~= 0 or v < lo or v > hi then
    errors.misuse(module, "%s must be an integer in [%d, %d]", key, lo, hi)
  end
  return v
end

--- v as a positive safe integer (1 .. 2^53-1, and at most max when given);
--- raises "<label> must be a positive safe integer<tail>" otherwise, where
--- tail is how the caller's reference words the bound (" no greater than
--- 2147483647"), "" by default.
---@return integer
function M.positive(module, label, v, max, tail)
  if type(v) ~= "number" or v < 1 or v % 1 ~= 0 or v > (max or 2 ^ 53 - 1) then
    errors.misuse(module, "%s must be a positive safe integer%s", label, tail or "")
  end
  return v
end

--- cfg[key] as a finite number in [lo, hi], default when absent.
function M.number(module, cfg, key, default, lo, hi)
  local v = cfg[key]
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v or v < lo or v > hi then
    errors.misuse(module, "%s must be a number in [%s, %s]", key, tostring(lo), tostring(hi))
  end
  return v
end

--- cfg[key] as one of the strings of choices, default when absent.
function M.one_of(module, cfg, key, default, choices)
  local v = cfg[key]
  if v == nil then return default end
  for _, c in ipairs(choices) do
    if v == c then return v end
  end
  local quoted = {}
  for i, c in ipairs(choices) do quoted[i] = '"' .. c .. '"' end
  local last = table.remove(quoted)
  errors.misuse(module, "%s must be %s", key, #quoted > 0 and (table.concat(quoted, ", ") .. " or " .. last) or last)
end

--- cfg[key] as an absolute path without NUL bytes, or nil when absent.
function M.path(module, cfg, key)
  local v = cfg[key]
  if v == nil then return nil end
  if type(v) ~= "string" or v:sub(1, 1) ~= "/" or v:find("%z") then
    errors.misuse(module, "%s must be an absolute path", key)
  end
  return v
end

--- cfg[key] as a table mapping strings to strings ({} when absent).
function M.string_map(module, cfg, key)
  local v = cfg[key]
  if v == nil then return {} end
  if type(v) ~= "table" then errors.misuse(module, "%s must be a table of strings", key) end
  for k, val in pairs(v) do
    if type(k) ~= "string" or type(val) ~= "string" then
      errors.misuse(module, "%s must map strings to strings", key)
    end
  end
  return v
end

return M
