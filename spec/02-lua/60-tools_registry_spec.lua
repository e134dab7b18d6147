-- The tool registry's definitions (dsh.tools): every model-facing tool is
-- listed once with a schema both APIs accept, checked mechanically against
-- OpenAI's strict-mode rules and Anthropic's tool-use rules; the argument
-- decoder and checker give a model messages it can act on; misuse by the
-- host raises at the caller's line. (The tools running on a real sandbox:
-- 61-tools_sandbox_spec.lua.)
local json = require "dsh.json"
local tools = require "dsh.tools"
local check = require "dsh.tools._check"

local ALL = { "bash", "bash_output", "kill_shell", "read", "write", "edit", "list", "watch", "terminal_open",
  "terminal_send", "terminal_read", "terminal_screen", "terminal_signal", "terminal_close", "terminal_list",
  "lsp", "run_code" }

-- The keywords OpenAI's strict mode (Structured Outputs' supported subset)
-- accepts, by where they may appear.
local KEYWORDS = {
  any = { type = true, description = true, enum = true, const = true, anyOf = true },
  object = { properties = true, required = true, additionalProperties = true },
  string = { pattern = true, format = true },
  number = { minimum = true, maximum = true, exclusiveMinimum = true, exclusiveMaximum = true, multipleOf = true },
  array = { items = true, minItems = true, maxItems = true },
}
KEYWORDS.integer = KEYWORDS.number
local TYPES = { string = true, number = true, integer = true, boolean = true, object = true, array = true, null = true }

-- Every way schema breaks OpenAI strict mode (as strings naming where).
local function strict_problems(schema)
  local out = {}
  local function walk(s, where, depth)
    if depth > 10 then out[#out + 1] = where .. ": nested deeper than 10 levels" end
    local types = type(s.type) == "table" and s.type or { s.type }
    if #types == 0 then out[#out + 1] = where .. ": no type" end
    local allowed = {}
    for k in pairs(KEYWORDS.any) do allowed[k] = true end
    for _, t in ipairs(types) do
      if not TYPES[t] then out[#out + 1] = where .. ": type " .. tostring(t) end
      for k in pairs(KEYWORDS[t] or {}) do allowed[k] = true end
    end
    for k in pairs(s) do
      if not allowed[k] then out[#out + 1] = where .. ": keyword " .. k .. " is not supported in strict mode" end
    end
    if s.enum then
      for _, e in ipairs(s.enum) do
        local ok = false
        for _, t in ipairs(types) do ok = ok or (t == "string" and type(e) == "string") end
        if not ok then out[#out + 1] = where .. ": enum value " .. tostring(e) .. " does not fit the type" end
      end
    end
    for _, t in ipairs(types) do
      if t == "object" then
        if s.additionalProperties ~= false then out[#out + 1] = where .. ": additionalProperties must be false" end
        if type(s.properties) ~= "table" then out[#out + 1] = where .. ": no properties" end
        local req = {}
        for _, r in ipairs(s.required or {}) do
          if req[r] then out[#out + 1] = where .. ": " .. r .. " is required twice" end
          req[r] = true
          if not (s.properties or {})[r] then out[#out + 1] = where .. ": required " .. r .. " is no property" end
        end
        for name, p in pairs(s.properties or {}) do
          if not req[name] then out[#out + 1] = where .. ": " .. name .. " is not in required" end
          if type(p.description) ~= "string" or p.description == "" then
            out[#out + 1] = where .. "." .. name .. ": no description"
          end
          walk(p, where .. "." .. name, depth + 1)
        end
      elseif t == "array" then
        if type(s.items) ~= "table" then out[#out + 1] = where .. ": an array needs items" else
          walk(s.items, where .. "[]", depth + 1)
        end
      end
    end
  end
  if schema.type ~= "object" then out[#out + 1] = "$: the root must be an object" end
  if schema.anyOf or schema.oneOf or schema.allOf or schema["not"] then
    out[#out + 1] = "$: no combinator at the root"
  end
  walk(schema, "$", 1)
  table.sort(out)
  return out
end

local function raised(fn)
  local ok, err = pcall(fn)
  assert.is_false(ok, "did not raise")
  assert.matches("^[^:]*60%-tools_registry_spec%.lua:%d+: ", err) -- at the caller's line
  return (err:gsub("^[^:]*:%d+: ", ""))
end

describe("dsh.tools definitions", function()
  it("lists every model-facing tool once, each with its service", function()
    local names = {}
    for i, t in ipairs(tools.all()) do
      names[i] = t.name
      assert.is_string(tools.needs[t.name])
      assert.equal(tools.needs[t.name], t.service)
    end
    assert.same(ALL, names)
    assert.same(ALL, tools.names)
    assert.same({ bash = "bash", read = "fs", terminal_open = "pty", lsp = "lsp", run_code = "codeRuntime" },
      { bash = tools.needs.bash, read = tools.needs.read, terminal_open = tools.needs.terminal_open,
        lsp = tools.needs.lsp, run_code = tools.needs.run_code })
  end)

  it("docs/tools.md names every tool and every error code the registry makes", function()
    local doc = assert(require("helpers").read_file(require("helpers").root .. "/docs/tools.md"))
    for _, name in ipairs(tools.names) do
      assert.is_truthy(doc:find("`" .. name .. "`", 1, true), name .. " is not in docs/tools.md")
    end
    for _, code in ipairs { "TOOL_UNKNOWN", "TOOL_UNAVAILABLE", "FS_NOT_OBSERVED", "FS_STALE_VERSION" } do
      assert.is_truthy(doc:find(code, 1, true), code .. " is not in docs/tools.md")
    end
  end)

  it("names every parameter in one casing, snake_case, and docs/tools.md lists each tool's", function()
    local doc = assert(require("helpers").read_file(require("helpers").root .. "/docs/tools.md"))
    for _, t in ipairs(tools.all()) do
      local section = doc:match("\n### `" .. t.name .. "`\n(.-)\n#")
      assert.is_truthy(section, "docs/tools.md has no parameter section for " .. t.name)
      local listed = {}
      for name in section:gmatch("\n| `([^`]+)` |") do listed[name] = true end
      for name in pairs(t.parameters.properties) do
        assert.matches("^[a-z][a-z0-9]*_?[a-z0-9_]*$", name, t.name)
        assert.is_nil(name:find("%u"), t.name .. "." .. name)
        assert.is_true(listed[name] == true, t.name .. "." .. name .. " is not in docs/tools.md")
        listed[name] = nil
      end
      assert.is_nil(next(listed), t.name .. ": docs/tools.md lists a parameter it does not have: "
        .. tostring(next(listed)))
    end
  end)

  it("gives OpenAI strict-mode definitions for every tool, checked rule by rule", function()
    local defs = tools.openai(tools.all())
    assert.equal(#ALL, #defs)
    for i, d in ipairs(defs) do
      assert.equal("function", d.type)
      local f = d["function"]
      assert.equal(ALL[i], f.name)
      assert.matches("^[%w_%-]+$", f.name)
      assert.is_true(#f.name <= 64)
      assert.is_true(f.strict)
      assert.is_true(#f.description > 20, f.name)
      assert.same({}, strict_problems(f.parameters), f.name)
      -- the wire form keeps the shape: no empty `required` turned into an object
      local wire = json.decode(json.encode(d))
      assert.same(f.parameters.required, wire["function"].parameters.required)
      assert.equal("object", wire["function"].parameters.type)
      assert.is_false(wire["function"].parameters.additionalProperties)
    end
  end)

  it("gives Anthropic tool-use definitions for every tool", function()
    local defs = tools.anthropic(tools.all())
    for i, d in ipairs(defs) do
      assert.same({ "description", "input_schema", "name" }, (function()
        local k = {}
        for key in pairs(d) do k[#k + 1] = key end
        table.sort(k)
        return k
      end)())
      assert.equal(ALL[i], d.name)
      assert.matches("^[%w_%-]+$", d.name)
      assert.equal("object", d.input_schema.type)
      assert.is_nil(d.input_schema.anyOf or d.input_schema.oneOf or d.input_schema.allOf)
      assert.same({}, strict_problems(d.input_schema), d.name)
    end
  end)

  it("the checker itself catches what strict mode refuses", function()
    assert.same({
      "$.a: keyword default is not supported in strict mode", "$.a: no description",
      "$: additionalProperties must be false", "$: b is not in required",
    }, (function()
      local p = strict_problems { type = "object", properties = { a = { type = "string", default = "x" },
        b = { type = "string", description = "b" } }, required = { "a" } }
      table.sort(p)
      return p
    end)())
    assert.same({ "$: the root must be an object" }, strict_problems { type = "string" })
  end)

  it("hands out copies: a host changing a definition changes nothing in the registry", function()
    local d = tools.openai(tools.all())[1]
    d["function"].parameters.properties.command.type = "number"
    assert.equal("string", tools.all()[1].parameters.properties.command.type)
    local a = tools.anthropic(tools.all())[4]
    a.input_schema.required[1] = "x"
    assert.equal("limit", tools.anthropic(tools.all())[4].input_schema.required[1])
  end)

  it("offers only the tools whose service the context has", function()
    local function names(ctx, opts)
      local out = {}
      for i, t in ipairs(tools.for_context(ctx, opts)) do out[i] = t.name end
      return out
    end
    -- (a table of services: only their presence matters here; 61- runs them)
    assert.same({}, names({}))
    assert.same({ "read", "write", "edit", "list", "watch" }, names({ fs = {} }))
    assert.same({ "bash", "bash_output", "kill_shell", "lsp" }, names({ bash = {}, lsp = {} }))
    assert.same({ "edit", "run_code" }, names({ fs = {}, codeRuntime = {} }, { only = { "run_code", "edit" } }))
  end)

  it("raises for misuse by the host, at its line", function()
    assert.equal("dsh.tools: call: ctx must be a dsh.context, got nil", raised(function() tools.call(nil, "read") end))
    assert.matches("^dsh%.tools: call: ctx must be a dsh%.context %(or a table of services%), got ",
      raised(function() tools.call(setmetatable({}, { __index = {} }), "read", "{}") end))
    assert.equal("dsh.tools: call: name must be a string, got number", raised(function() tools.call({}, 1) end))
    assert.equal("dsh.tools: call: args must be a JSON string or a table, got number",
      raised(function() tools.call({}, "read", 5) end))
    assert.equal("dsh.tools: call: opts must be a table, got string",
      raised(function() tools.call({}, "read", "{}", "fast") end))
    assert.equal("dsh.tools: openai: list must be a list of tools, got nil", raised(function() tools.openai() end))
    assert.equal("dsh.tools: anthropic: list[1] is not a tool", raised(function() tools.anthropic { "bash" } end))
    assert.equal("dsh.tools: for_context: opts.only: no tool reed",
      raised(function() tools.for_context({}, { only = { "reed" } }) end))
  end)

  it("answers an unknown tool with the closest name and the tools there are", function()
    local r = tools.call({}, "raed", "{}")
    assert.is_true(r.isError)
    assert.equal("TOOL_UNKNOWN", r.error.code)
    assert.equal('Error: there is no tool "raed". Available tools: none.', r.text)
    -- a tool of the registry the context cannot run says which service it lacks
    r = tools.call({}, "read", "{}")
    assert.equal("TOOL_UNAVAILABLE", r.error.code)
    assert.equal("Error: read is not available here (it needs ctx.fs). Available tools: none.", r.text)
    assert.same({ code = "TOOL_UNAVAILABLE", message = "read is not available here (it needs ctx.fs)" }, r.data)
  end)
end)

describe("dsh.tools argument decoding", function()
  it("decodes a model's arguments with dsh.json: escapes, surrogate pairs, numbers, null", function()
    local v = assert(check.decode(' {"a": [1, -2.5, 3e2, true, false, null], "s": "\\u00e9\\ud83d\\ude00\\n\\"\\/",'
      .. ' "o": {}} '))
    assert.same({ 1, -2.5, 300, true, false }, { v.a[1], v.a[2], v.a[3], v.a[4], v.a[5] })
    assert.equal(json.null, v.a[6])
    assert.is_true(check.absent(v.a[6]))
    assert.equal("é😀\n\"/", v.s)
    assert.same({}, v.o)
  end)

  it("refuses malformed JSON, naming what and where", function()
    local cases = {
      { '{"a": }', "at character 7" },
      { '{"a": 1', "at character 8" },
      { '{"a" 1}', "at character 6" },
      { "{'a': 1}", "at character 2" },
      { '{"a": 1} x', "at character 10" },
      { '"\\ud800"', "invalid unicode escape code at character 2" },
      { "", "at character 1" },
    }
    for _, c in ipairs(cases) do
      local v, err = check.decode(c[1])
      assert.is_nil(v, c[1])
      assert.is_truthy(err:find(c[2], 1, true), c[1] .. " -> " .. tostring(err))
    end
  end)

  it("is bounded in size before parsing", function()
    local saved = check.MAX_BYTES
    check.MAX_BYTES = 10
    local v, err = check.decode('"' .. string.rep("x", 20) .. '"')
    check.MAX_BYTES = saved
    assert.is_nil(v)
    assert.equal("longer than 10 bytes", err)
    assert.equal(string.rep("x", 20), check.decode('"' .. string.rep("x", 20) .. '"'))
  end)

  it("checks arguments against a schema with messages a model can act on", function()
    local p = tools.all()[13].parameters -- terminal_signal: session_id, signal (enum)
    assert.same({ session_id = "pty-1", signal = "INT" }, check.args(p, { session_id = "pty-1", signal = "INT" }))
    local function msg(args) return select(2, check.args(p, args)) end
    assert.equal('missing required parameter "signal"', msg { session_id = "pty-1" })
    assert.equal('missing required parameter "signal"', msg { session_id = "pty-1", signal = json.null })
    assert.equal('"signal" must be one of INT, TERM, KILL, TSTP, HUP, got "STOP"',
      msg { session_id = "p", signal = "STOP" })
    assert.equal('"session_id" must be a string, got integer', msg { session_id = 1, signal = "INT" })
    assert.equal('unknown parameter "sessionId" (did you mean "session_id"?)', msg { sessionId = "p", signal = "INT" })
    assert.equal('unknown parameter "zzzzzzzz"', msg { zzzzzzzz = 1 })
    assert.equal("the arguments must be a JSON object, got array", msg { 1, 2 })
    assert.equal("the arguments must be a JSON object, got string", msg "x")
    local read = tools.all()[4].parameters
    assert.same({ path = "a" }, check.args(read, { path = "a", offset = json.null, limit = json.null }))
    assert.equal('"offset" must be at least 1', select(2, check.args(read, { path = "a", offset = 0 })))
    assert.equal('"limit" must be an integer, got number', select(2, check.args(read, { path = "a", limit = 1.5 })))
    assert.equal("Parameters: limit (integer, optional); offset (integer, optional); path (string, required).",
      check.usage(read))
    assert.equal("This tool takes no parameters: send {}.", check.usage(tools.all()[15].parameters))
  end)
end)
