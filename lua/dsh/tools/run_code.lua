--- dsh.tools.run_code: the model-facing Code Mode tool over ctx.codeRuntime
-- (reference §5 "run_code").
--
--   local tool = require("dsh.tools.run_code").new {
--     language = "lua",                       -- or "typescript" / "javascript"
--     bindings = { { global = "tools", functions = {
--       readFile = { fn = read_file, description = "Read a text file.",
--                    params = { { name = "path", schema = { type = "string" } } },
--                    returns = { type = "string" } } },
--       errorClass = { name = "ToolCallError", memberNameProperty = "toolName" } } },
--   }
--   tool.name, tool.description, tool.parameters   -- what the model is shown
--   local text, err = tool:run(ctx, { code = "...", description = "..." }, { signal = s })
--
-- The description is generated from the bindings: their names, parameters,
-- results and descriptions (declared with JSON Schema types, checked by
-- dsh.code_runtime), written in the program's language (a TypeScript
-- declaration of each namespace, or LuaCATS-annotated Lua functions), as
-- Code Mode systems present an API to the model. The parameters schema is valid for OpenAI's
-- strict mode and for Anthropic (every property required, no additional ones).
-- A result renders as the logs, then the value (strings as they are, anything
-- else as indented JSON), or `(run_code completed with no output)`; it is
-- already within the runtime's output ledger. A failed run is nil, err with
-- err.code CODE_RUN_FAILED and the message `code run failed (<kind>):
-- <message>` plus the captured logs.
local code_runtime = require "dsh.code_runtime"
local errors = require "dsh.errors"
local json = code_runtime.json

local M = {}

M.EMPTY = "(run_code completed with no output)"

local LANG_TEXT = {
  lua = "the body of a Lua function (a chunk): bindings are plain functions that return their result "
    .. "(a failure raises an error value); `return` the result; print() output is captured",
  typescript = "the body of an async TypeScript function: bindings are async functions (await them); "
    .. "`return` the result; console.log() output is captured",
  javascript = "the body of an async JavaScript function: bindings are async functions (await them); "
    .. "`return` the result; console.log() output is captured",
}

-- Types ------------------------------------------------------------------------------
-- JSON Schema (as dsh.code_runtime checks it) written as a TypeScript type or
-- a Lua (LuaCATS) annotation type.

local function sorted_names(fns)
  local names = {}
  for name in pairs(fns) do names[#names + 1] = name end
  table.sort(names)
  return names
end

local function literal(v)
  if type(v) == "string" then return json.quote(v) end
  if type(v) == "number" then return json.number(v) end
  return tostring(v)
end

local function union(parts)
  local seen, out = {}, {}
  for _, p in ipairs(parts) do
    if not seen[p] then
      seen[p] = true
      out[#out + 1] = p
    end
  end
  return table.concat(out, " | ")
end

-- True when text has a "|" outside brackets and quotes (a union to wrap before "[]").
local function top_union(text)
  local depth, quote, i = 0, false, 1
  while i <= #text do
    local c = text:sub(i, i)
    if quote then
      if c == "\\" then i = i + 1 elseif c == '"' then quote = false end
    elseif c == '"' then
      quote = true
    elseif c == "{" or c == "[" or c == "(" or c == "<" then
      depth = depth + 1
    elseif c == "}" or c == "]" or c == ")" or c == ">" then
      depth = depth - 1
    elseif c == "|" and depth == 0 then
      return true
    end
    i = i + 1
  end
  return false
end

local TS_BASE = { string = "string", number = "number", integer = "number", boolean = "boolean", null = "null" }
local LUA_BASE = { string = "string", number = "number", integer = "integer", boolean = "boolean", null = "json.null" }
local IDENT = "^[%a_][%w_]*$"

--- The TypeScript (lang "typescript") or LuaCATS (lang "lua") type of a JSON
-- Schema s as dsh.code_runtime checks it ("unknown" / "any" for nil).
-- Recursive: schemas a host writes are shallow.
local function type_of(s, lang)
  if s == nil then return lang == "lua" and "any" or "unknown" end
  local base = lang == "lua" and LUA_BASE or TS_BASE
  if s.const ~= nil then return literal(s.const) end
  if s.enum then
    local parts = {}
    for i, v in ipairs(s.enum) do parts[i] = literal(v) end
    return union(parts)
  end
  local alts = s.anyOf or s.oneOf
  if alts then
    local parts = {}
    for i, sub in ipairs(alts) do parts[i] = type_of(sub, lang) end
    return union(parts)
  end
  local t = s.type
  if type(t) == "table" then
    local parts = {}
    for i, one in ipairs(t) do
      local copy = {}
      for k, v in pairs(s) do copy[k] = v end
      copy.type = one
      parts[i] = type_of(copy, lang)
    end
    return union(parts)
  end
  if t == nil then t = s.properties and "object" or (s.items and "array") or nil end
  if base[t] then return base[t] end
  if t == "array" then
    local item = type_of(s.items, lang)
    if top_union(item) then item = "(" .. item .. ")" end
    return item .. "[]"
  end
  if t == "object" then
    local extra = type(s.additionalProperties) == "table" and type_of(s.additionalProperties, lang) or nil
    if not s.properties then
      if lang == "lua" then return "table<string, " .. (extra or "any") .. ">" end
      return "Record<string, " .. (extra or "unknown") .. ">"
    end
    local required = {}
    for _, n in ipairs(s.required or {}) do required[n] = true end
    local fields = {}
    for _, n in ipairs(sorted_names(s.properties)) do
      local key = n:match(IDENT) and n or (lang == "lua" and ("[" .. json.quote(n) .. "]") or json.quote(n))
      fields[#fields + 1] = key .. (required[n] and "" or "?") .. ": " .. type_of(s.properties[n], lang)
    end
    if extra and lang ~= "lua" then fields[#fields + 1] = "[key: string]: " .. extra end
    if lang == "lua" then return "{" .. table.concat(fields, ", ") .. "}" end
    return "{ " .. table.concat(fields, "; ") .. " }"
  end
  return lang == "lua" and "any" or "unknown"
end
M.type_of = type_of

local function one_line(text)
  return (text:gsub("%s*\n%s*", " "))
end

local function ts_namespace(b)
  local lines = { "declare const " .. b.global .. ": {" }
  for _, name in ipairs(b.names) do
    local d = b.declarations[name] or {}
    local docs = {}
    if d.description then docs[#docs + 1] = d.description:gsub("%*/", "* /") end
    for _, p in ipairs(d.params or {}) do
      if p.description then
        docs[#docs + 1] = "@param " .. p.name .. " " .. one_line((p.description:gsub("%*/", "* /")))
      end
    end
    if #docs == 1 and not docs[1]:find("\n") then
      lines[#lines + 1] = "  /** " .. docs[1] .. " */"
    elseif #docs > 0 then
      lines[#lines + 1] = "  /**"
      for _, l in ipairs(docs) do lines[#lines + 1] = "   * " .. l:gsub("\n", "\n   * ") end
      lines[#lines + 1] = "   */"
    end
    local params = {}
    if d.params then
      for _, p in ipairs(d.params) do
        params[#params + 1] = p.name .. (p.optional and "?" or "") .. ": " .. type_of(p.schema, "typescript")
      end
    else
      params[1] = "...args: unknown[]"
    end
    lines[#lines + 1] = string.format("  %s(%s): Promise<%s>;", name, table.concat(params, ", "),
      type_of(d.returns, "typescript"))
  end
  lines[#lines + 1] = "};"
  if b.errorClass then
    lines[#lines + 1] = string.format("declare class %s extends Error { %s: string }", b.errorClass.name,
      b.errorClass.memberNameProperty)
  end
  return table.concat(lines, "\n")
end

local function lua_namespace(b)
  local lines = {}
  for i, name in ipairs(b.names) do
    local d = b.declarations[name] or {}
    if i > 1 then lines[#lines + 1] = "" end
    if d.description then lines[#lines + 1] = "---" .. d.description:gsub("\n", "\n---") end
    local names = {}
    if d.params then
      for _, p in ipairs(d.params) do
        names[#names + 1] = p.name
        lines[#lines + 1] = "---@param " .. p.name .. (p.optional and "?" or "") .. " " .. type_of(p.schema, "lua")
          .. (p.description and (" " .. one_line(p.description)) or "")
      end
    else
      names[1] = "..."
      lines[#lines + 1] = "---@param ... any"
    end
    lines[#lines + 1] = "---@return " .. type_of(d.returns, "lua")
    lines[#lines + 1] = string.format("function %s.%s(%s) end", b.global, name, table.concat(names, ", "))
  end
  if b.errorClass then
    lines[#lines + 1] = string.format("-- failures raise a %s table {message=, %s=<function name>}; "
      .. "test with getmetatable(e) == %s", b.errorClass.name, b.errorClass.memberNameProperty, b.errorClass.name)
  end
  return table.concat(lines, "\n")
end

local function describe(language, bindings, method)
  bindings = code_runtime.check_bindings("dsh.tools.run_code", language, bindings, method)
  local parts = {
    "Run a short program in a fresh, sandboxed " .. (language == "lua" and "Lua" or
      (language == "typescript" and "TypeScript" or "JavaScript")) .. " runtime instead of making many tool calls. "
      .. "`code` is " .. LANG_TEXT[language] .. ". Values passed to and returned from bindings, and the "
      .. "program's result, must be JSON" .. (language == "lua"
        and " (tables with keys 1..n are arrays, json.array(t) marks an empty one, json.null is null)" or "")
      .. ". The run has CPU, wall-clock, memory and output limits.",
    "",
    "Available bindings:",
    language == "lua" and "```lua" or "```ts",
  }
  for _, b in ipairs(bindings or {}) do
    parts[#parts + 1] = language == "lua" and lua_namespace(b) or ts_namespace(b)
  end
  parts[#parts + 1] = "```"
  return table.concat(parts, "\n")
end

--- The model-facing description for bindings in language (checked as
-- ctx.codeRuntime:run checks them: a bad declaration raises).
function M.describe(language, bindings)
  return describe(language, bindings, "describe")
end

M.parameters = {
  type = "object",
  properties = {
    code = { type = "string", description = "The program to run (see the tool description)." },
    description = { type = "string", description = "What the program does, in 5-10 words (a UI label)." },
  },
  required = { "code", "description" },
  additionalProperties = false,
}

-- Rendering -------------------------------------------------------------------------

--- Indented JSON of a value that came through the runtime (iterative, any depth).
function M.pretty(v)
  local out = {}
  local stack = { { v = v, indent = "" } }
  while #stack > 0 do
    local item = table.remove(stack)
    if item.text then
      out[#out + 1] = item.text
    else
      local x, ind = item.v, item.indent
      if type(x) ~= "table" or x == code_runtime.null then
        out[#out + 1] = json.encode_json(x)
      else
        local is_array = getmetatable(x) == json.array_mt or x[1] ~= nil
        local inner = ind .. "  "
        local entries = {}
        if is_array then
          for i = 1, #x do entries[i] = { v = x[i] } end
        else
          for _, k in ipairs(sorted_names(x)) do entries[#entries + 1] = { k = k, v = x[k] } end
        end
        if #entries == 0 then
          out[#out + 1] = is_array and "[]" or "{}"
        else
          out[#out + 1] = is_array and "[\n" or "{\n"
          stack[#stack + 1] = { text = "\n" .. ind .. (is_array and "]" or "}") }
          for i = #entries, 1, -1 do
            local e = entries[i]
            if i < #entries then stack[#stack + 1] = { text = ",\n" } end
            stack[#stack + 1] = { v = e.v, indent = inner }
            stack[#stack + 1] = { text = inner .. (e.k and (json.quote(e.k) .. ": ") or "") }
          end
        end
      end
    end
  end
  return table.concat(out)
end

--- The text a result renders to (a successful run).
function M.render(result)
  local parts = {}
  for _, l in ipairs(result.logs or {}) do parts[#parts + 1] = l end
  if result.value ~= nil then
    parts[#parts + 1] = type(result.value) == "string" and result.value or M.pretty(result.value)
  end
  if #parts == 0 then return M.EMPTY end
  return table.concat(parts, "\n")
end

--- The message of a failed run.
function M.render_failure(result)
  local text = string.format("code run failed (%s): %s", result.error.kind, result.error.message)
  if result.logs and #result.logs > 0 then text = text .. "\nCaptured output:\n" .. table.concat(result.logs, "\n") end
  return text
end

-- The tool ----------------------------------------------------------------------------

local Tool = {}
Tool.__index = Tool
Tool.__tostring = function(t) return "dsh.tools.run_code(" .. t.language .. ")" end

---@class dsh.tools.RunCodeOpts
---@field language "lua"|"typescript"|"javascript"|nil  default "lua"
---@field bindings dsh.code_runtime.Binding[]|nil

--- A run_code tool for these bindings.
---@param o dsh.tools.RunCodeOpts|nil
function M.new(o)
  o = o or {}
  local language = o.language or "lua"
  if not LANG_TEXT[language] then
    errors.misuse("dsh.tools.run_code", 'new: language must be "lua", "typescript" or "javascript"')
  end
  if o.bindings ~= nil and type(o.bindings) ~= "table" then
    errors.misuse("dsh.tools.run_code", "new: bindings must be a list")
  end
  return setmetatable({
    name = "run_code", language = language, bindings = o.bindings or {},
    description = describe(language, o.bindings or {}, "new"), parameters = M.parameters,
  }, Tool)
end

local function invalid(msg) return nil, errors.new("INVALID_ARGUMENT", msg) end

--- Check a decoded input object: the input, or nil, err (INVALID_ARGUMENT).
function M.validate(input)
  if type(input) ~= "table" then return invalid("run_code: input must be an object") end
  for k in pairs(input) do
    if not M.parameters.properties[k] then return invalid("run_code: unknown parameter " .. tostring(k)) end
  end
  if type(input.code) ~= "string" or input.code:match("^%s*$") then
    return invalid("run_code: code must be a non-empty string")
  end
  if type(input.description) ~= "string" or input.description:match("^%s*$") then
    return invalid("run_code: description must be a non-empty string")
  end
  return input
end

--- Run the tool: the rendered text, or nil, err.
---@param ctx table a context with ctx.codeRuntime
---@param input {code:string, description:string}
---@param opts {signal: dsh.AbortSignal|nil}|nil
---@return string|nil, dsh.Error|nil
function Tool:run(ctx, input, opts)
  local ok, err = M.validate(input)
  if not ok then return nil, err end
  local cr = ctx.codeRuntime
  if not cr then
    return nil, errors.new("CODE_RUNTIME_UNAVAILABLE", "run_code: ctx.codeRuntime is not configured")
  end
  local r = cr:run { program = input.code, language = self.language, bindings = self.bindings,
    signal = opts and opts.signal }
  if r.error then
    return nil, errors.new("CODE_RUN_FAILED", M.render_failure(r), { kind = r.error.kind, logs = r.logs })
  end
  return M.render(r), nil, r
end

M.Tool = Tool
return M
