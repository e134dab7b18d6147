--- dsh.tools._input: what the model-facing tools share about their input.
--
-- Tool schemas are written for OpenAI's strict mode and Anthropic's tool
-- use at once: every property is listed in `required`, an optional one has a
-- type that also admits null, and `additionalProperties` is false. A model
-- in strict mode sends null for an option it does not use, so null counts
-- as absent everywhere (JSON null as lua-cjson and dsh.json decode it: a
-- NULL light userdata).
local errors = require "dsh.errors"

local M = {}

--- True for nil and for a decoded JSON null.
function M.absent(v)
  return v == nil or (type(v) == "userdata" and getmetatable(v) == nil and tostring(v) == "userdata: NULL")
end

--- An INVALID_ARGUMENT failure: nil, err.
function M.invalid(fmt, ...)
  return nil, errors.new("INVALID_ARGUMENT", string.format(fmt, ...))
end

--- A copy of input without absent values, or nil, err: input must be an
-- object whose keys are all properties of the schema.
function M.object(tool, input, parameters)
  if type(input) ~= "table" then return M.invalid("%s: input must be an object", tool) end
  local out = {}
  for k, v in pairs(input) do
    if not parameters.properties[k] then return M.invalid("%s: unknown parameter %s", tool, tostring(k)) end
    if not M.absent(v) then out[k] = v end
  end
  return out
end

--- A strict-mode schema: every property required, optional ones nullable.
---@param properties table<string, table>   name -> JSON schema (type a string)
---@param optional string[]                 the names that may be null
function M.schema(properties, optional)
  local required, nullable = {}, {}
  for _, name in ipairs(optional) do nullable[name] = true end
  local names = {}
  for name in pairs(properties) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local p = properties[name]
    if nullable[name] then p.type = { p.type, "null" } end
    required[#required + 1] = name
  end
  return { type = "object", properties = properties, required = required, additionalProperties = false }
end

return M
