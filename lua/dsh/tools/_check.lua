--- dsh.tools._check: a tool's arguments against its parameters schema, with
-- messages a model can act on.
--
-- The schemas are the strict-mode subset every tool uses (dsh.tools._input):
-- one object level, each property a type (or {type, "null"}), enum,
-- minimum, maximum. JSON null (lua-cjson's NULL, as dsh.json decodes it)
-- counts as absent. A failure names the parameter, what was
-- expected and what came, and suggests the closest name for an unknown one.
local input = require "dsh.tools._input"
local json = require "dsh.json"
local schema = require "dsh.schema"

local M = {}

--- True for nil and JSON null.
function M.absent(v)
  return input.absent(v)
end

--- The longest argument text a call decodes (a model's arguments are small;
-- a runaway one is refused before it is parsed).
M.MAX_BYTES = 16 * 1024 * 1024

--- A model's argument text decoded (dsh.json, bounded in depth), or nil and a
-- message naming what is wrong and where.
---@param text string
---@return any|nil value
---@return string? message
function M.decode(text)
  if #text > M.MAX_BYTES then return nil, string.format("longer than %d bytes", M.MAX_BYTES) end
  local v, err = json.decode(text)
  if err then return nil, err.message end
  return v
end

local function json_type(v)
  if M.absent(v) then return "null" end
  local t = type(v)
  if t == "number" then return v % 1 == 0 and "integer" or "number" end
  if t == "table" then return (next(v) == nil or v[1] ~= nil) and "array" or "object" end
  return t
end

local function types_of(p)
  local t = p.type
  if type(t) == "table" then return t end
  return { t }
end

local function fits(want, v)
  if want == "integer" then return type(v) == "number" and v % 1 == 0 and v == v end
  if want == "number" then return type(v) == "number" and v == v end
  if want == "object" or want == "array" then return type(v) == "table" end
  return type(v) == want
end

local function article(t)
  if t == "integer" or t == "object" or t == "array" then return "an " .. t end
  return "a " .. t
end

--- "command (string, required), timeout (integer or null), ...": the
-- parameters, in the schema's required order, for the end of an error.
function M.usage(parameters)
  local parts = {}
  for _, name in ipairs(parameters.required or {}) do
    local p = parameters.properties[name]
    local ts, nullable = {}, false
    for _, t in ipairs(types_of(p)) do
      if t == "null" then nullable = true else ts[#ts + 1] = t end
    end
    local what = table.concat(ts, " or ")
    if p.enum then what = "one of " .. table.concat(p.enum, ", ") end
    parts[#parts + 1] = name .. " (" .. what .. (nullable and ", optional" or ", required") .. ")"
  end
  if #parts == 0 then return "This tool takes no parameters: send {}." end
  return "Parameters: " .. table.concat(parts, "; ") .. "."
end

--- The arguments without absent values, or nil and a message (without the
-- tool's name).
---@param parameters table  the tool's JSON schema
---@param args any          the decoded arguments
---@return table|nil, string|nil
function M.args(parameters, args)
  if M.absent(args) then args = {} end
  if type(args) ~= "table" or (next(args) ~= nil and args[1] ~= nil) then
    return nil, "the arguments must be a JSON object, got " .. json_type(args)
  end
  local names = {}
  for name in pairs(parameters.properties) do names[#names + 1] = name end
  table.sort(names)
  local keys = {}
  for k in pairs(args) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    if not parameters.properties[k] then
      local near = type(k) == "string" and schema.closest(k, names)
      return nil, string.format('unknown parameter "%s"%s', tostring(k),
        near and string.format(' (did you mean "%s"?)', near) or "")
    end
  end
  local out = {}
  for _, name in ipairs(names) do
    local p, v = parameters.properties[name], args[name]
    local ts = types_of(p)
    local nullable = false
    for _, t in ipairs(ts) do nullable = nullable or t == "null" end
    if M.absent(v) then
      if not nullable then return nil, string.format('missing required parameter "%s"', name) end
    else
      local ok = false
      for _, t in ipairs(ts) do ok = ok or (t ~= "null" and fits(t, v)) end
      if not ok then
        return nil, string.format('"%s" must be %s, got %s', name, article(ts[1]), json_type(v))
      end
      if p.enum then
        local found = false
        for _, e in ipairs(p.enum) do found = found or e == v end
        if not found then
          return nil, string.format('"%s" must be one of %s, got "%s"', name, table.concat(p.enum, ", "), tostring(v))
        end
      end
      if p.minimum and v < p.minimum then return nil, string.format('"%s" must be at least %s', name, p.minimum) end
      if p.maximum and v > p.maximum then return nil, string.format('"%s" must be at most %s', name, p.maximum) end
      out[name] = v
    end
  end
  return out
end

return M
