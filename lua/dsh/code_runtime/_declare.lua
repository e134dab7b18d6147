--- dsh.code_runtime._declare: what a host may declare about a binding
-- function, so a model knows how to call it: a description, its parameters
-- and its result, typed with JSON Schema. Checked and normalised once, for
-- run() and for the run_code tool (which renders them as TypeScript
-- declarations or Lua annotations).
--
--   functions = {
--     readFile = {
--       fn = read_file,
--       description = "Read a UTF-8 text file of the workspace.",
--       params = {
--         { name = "path", schema = { type = "string" }, description = "relative to the workspace" },
--         { name = "opts", optional = true,
--           schema = { type = "object", properties = { maxBytes = { type = "integer" } } } },
--       },
--       returns = { type = "string" },
--     },
--     now = os.time,                           -- undeclared: (...) -> unknown
--   }
--
-- Shorthands: a parameter's `type = "string"` stands for
-- `schema = { type = "string" }`, `returns = "string"` for
-- `returns = { type = "string" }` ("any": any value, `{}`), `doc` for
-- `description`.
-- Schemas take the keywords below; an unknown one, a wrong value or an
-- unknown key anywhere raises, naming where it is and the closest known key.
local schema = require "dsh.schema"

local M = {}

local FUNCTION_KEYS = { "fn", "description", "doc", "params", "returns" }
local PARAM_KEYS = { "name", "schema", "type", "optional", "description" }

M.TYPES = { string = true, number = true, integer = true, boolean = true, null = true, array = true, object = true }

-- keyword -> what its value must be
local SCHEMA_KEYS = {
  type = "type", description = "string", title = "string", enum = "list of JSON scalars", const = "JSON scalar",
  items = "schema", properties = "table of schemas", required = "list of strings",
  additionalProperties = "boolean or schema", anyOf = "list of schemas", oneOf = "list of schemas",
  default = "any", examples = "any", format = "string", pattern = "string",
  minimum = "number", maximum = "number", exclusiveMinimum = "number", exclusiveMaximum = "number",
  minLength = "number", maxLength = "number", minItems = "number", maxItems = "number",
}
local SCHEMA_NAMES = {}
for k in pairs(SCHEMA_KEYS) do SCHEMA_NAMES[#SCHEMA_NAMES + 1] = k end
table.sort(SCHEMA_NAMES)

local function unknown_key(fail, where, key, known)
  if type(key) ~= "string" then return fail(where .. " has a key that is not a string") end
  local near = schema.closest(key, known)
  if near then return fail(string.format('%s: unknown key "%s" (did you mean "%s"?)', where, key, near)) end
  fail(string.format('%s: unknown key "%s" (known keys: %s)', where, key, table.concat(known, ", ")))
end

local function keys_of(fail, where, t, known)
  local set = {}
  for _, k in ipairs(known) do set[k] = true end
  for k in pairs(t) do
    if not set[k] then unknown_key(fail, where, k, known) end
  end
end

local function is_scalar(v)
  local t = type(v)
  return t == "string" or t == "boolean" or (t == "number" and v == v and v ~= math.huge and v ~= -math.huge)
end

local function is_list(t)
  if type(t) ~= "table" then return false end
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n == #t
end

--- Checks a JSON Schema (iteratively: any depth); returns it. fail(msg) raises.
function M.check_schema(fail, where, root)
  local stack = { { root, where } }
  while #stack > 0 do
    local s, at = unpack(table.remove(stack))
    if type(s) ~= "table" then fail(at .. " must be a JSON Schema table") end
    keys_of(fail, at, s, SCHEMA_NAMES)
    for k, v in pairs(s) do
      local want, here = SCHEMA_KEYS[k], at .. "." .. k
      if want == "type" then
        local list = type(v) == "table" and v or { v }
        if not is_list(list) or #list == 0 then fail(here .. " must be a type name or a list of them") end
        for _, t in ipairs(list) do
          if not M.TYPES[t] then
            fail(string.format('%s: unknown type "%s" (string, number, integer, boolean, null, array, object)',
              here, tostring(t)))
          end
        end
      elseif want == "string" or want == "number" then
        if type(v) ~= want then fail(here .. " must be a " .. want) end
      elseif want == "list of JSON scalars" then
        if not is_list(v) or #v == 0 then fail(here .. " must be a non-empty list") end
        for _, x in ipairs(v) do
          if not is_scalar(x) then fail(here .. " may hold only strings, numbers and booleans") end
        end
      elseif want == "JSON scalar" then
        if not is_scalar(v) then fail(here .. " must be a string, number or boolean") end
      elseif want == "schema" then
        stack[#stack + 1] = { v, here }
      elseif want == "boolean or schema" then
        if type(v) ~= "boolean" then stack[#stack + 1] = { v, here } end
      elseif want == "table of schemas" then
        if type(v) ~= "table" then fail(here .. " must be a table of schemas") end
        for name, sub in pairs(v) do
          if type(name) ~= "string" then fail(here .. " has a property name that is not a string") end
          stack[#stack + 1] = { sub, here .. "." .. name }
        end
      elseif want == "list of schemas" then
        if not is_list(v) or #v == 0 then fail(here .. " must be a non-empty list of schemas") end
        for i, sub in ipairs(v) do stack[#stack + 1] = { sub, here .. "[" .. i .. "]" } end
      elseif want == "list of strings" then
        if not is_list(v) then fail(here .. " must be a list of property names") end
        for _, x in ipairs(v) do
          if type(x) ~= "string" then fail(here .. " must be a list of property names") end
        end
      end
    end
  end
  return root
end

--- The declaration of binding function `g.name` given as f (a function, or
-- a table with fn and declarations), normalised:
--   fn, {description=, params={{name=, optional=, schema=, description=}}|nil, returns=schema|nil}
-- usable(name) says whether a parameter name is usable in the program's
-- language. fail(msg) raises.
function M.check_function(fail, g, name, f, usable)
  local where = string.format('binding "%s.%s"', g, name)
  if type(f) == "function" then return f, {} end
  if type(f) ~= "table" then fail(where .. " is not a function") end
  keys_of(fail, where, f, FUNCTION_KEYS)
  if type(f.fn) ~= "function" then fail(where .. " is not a function") end
  local desc = f.description
  if desc == nil then desc = f.doc end
  if desc ~= nil and type(desc) ~= "string" then fail(where .. ".description must be a string") end
  if f.description ~= nil and f.doc ~= nil then fail(where .. " has both description and doc (doc is its old name)") end
  local decl = { description = desc }
  if f.params ~= nil then
    if not is_list(f.params) then fail(where .. ".params must be a list of parameters") end
    local seen, optional_seen = {}, false
    decl.params = {}
    for i, p in ipairs(f.params) do
      local at = where .. ".params[" .. i .. "]"
      if type(p) ~= "table" then fail(at .. " must be a table {name=, schema=}") end
      keys_of(fail, at, p, PARAM_KEYS)
      if type(p.name) ~= "string" or not usable(p.name) then
        fail(string.format('%s.name "%s" is not a usable identifier', at, tostring(p.name)))
      end
      if seen[p.name] then fail(string.format('%s.name "%s" is repeated', at, p.name)) end
      seen[p.name] = true
      if p.schema ~= nil and p.type ~= nil then fail(at .. " has both schema and type (type is its shorthand)") end
      local sch = p.schema
      if p.type == "any" then sch = {} elseif p.type ~= nil then sch = { type = p.type } end
      if sch ~= nil then M.check_schema(fail, at .. ".schema", sch) end
      if p.optional ~= nil and type(p.optional) ~= "boolean" then fail(at .. ".optional must be a boolean") end
      if p.optional then
        optional_seen = true
      elseif optional_seen then
        fail(at .. " is required but follows an optional parameter")
      end
      if p.description ~= nil and type(p.description) ~= "string" then fail(at .. ".description must be a string") end
      decl.params[i] = { name = p.name, optional = p.optional == true, schema = sch, description = p.description }
    end
  end
  if f.returns ~= nil then
    local r = f.returns == "any" and {} or (type(f.returns) == "string" and { type = f.returns }) or f.returns
    decl.returns = M.check_schema(fail, where .. ".returns", r)
  end
  return f.fn, decl
end

return M
