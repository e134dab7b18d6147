-- The model-facing run_code tool (reference §5) over a real code-runtime-local:
-- its schema, the description generated from the bindings in the program's
-- language, and how results and failures render.
local helpers = require "helpers"
local node = require "dsh.node"
local run_code = require "dsh.tools.run_code"

local TOOLS = { {
  global = "tools",
  functions = {
    readFile = { fn = function(path) return "text of " .. path end, doc = "Read a text file.",
      params = { { name = "path", type = "string" } }, returns = "string" },
    count = { fn = function(a, b) return a + (b or 0) end, doc = "Add numbers.",
      params = { { name = "a", type = "integer" }, { name = "b", type = "integer", optional = true } },
      returns = "integer" },
    boom = function() error("disk on fire", 0) end,
  },
  errorClass = { name = "ToolCallError", memberNameProperty = "toolName" },
} }

local LOCAL, CODE = require "dsh.providers.subprocess_local", require "dsh.providers.code_runtime_local"

local function with_ctx(cfg, fn)
  helpers.run(function() helpers.with_context({ LOCAL, { CODE, cfg } }, fn) end)
end

describe("run_code tool", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("has a schema valid for OpenAI strict mode and Anthropic", function()
    local t = run_code.new { bindings = TOOLS }
    local p = t.parameters
    assert.equal("run_code", t.name)
    assert.equal("object", p.type)
    assert.is_false(p.additionalProperties)
    local names = {}
    for k, prop in pairs(p.properties) do
      names[#names + 1] = k
      for key in pairs(prop) do assert.truthy(key == "type" or key == "description", key) end
    end
    table.sort(names)
    local req = { unpack(p.required) }
    table.sort(req)
    assert.same(names, req) -- strict mode: every property is required
    assert.equal('{"additionalProperties":false,"properties":{"code":{"description":"The program to run (see the '
      .. 'tool description).","type":"string"},"description":{"description":"What the program does, in 5-10 words '
      .. '(a UI label).","type":"string"}},"required":["code","description"],"type":"object"}',
      require("dsh.code_runtime._json").encode_json(p))
  end)

  it("describes the bindings in the program's language", function()
    local lua = run_code.new({ bindings = TOOLS }).description
    assert.truthy(lua:find("---Add numbers.\n---@param a integer\n---@param b? integer\n---@return integer\n"
      .. "function tools.count(a, b) end", 1, true), lua)
    assert.truthy(lua:find("---Read a text file.\n---@param path string\n---@return string\n"
      .. "function tools.readFile(path) end", 1, true))
    assert.truthy(lua:find("---@param ... any\n---@return any\nfunction tools.boom(...) end", 1, true))
    assert.truthy(lua:find("ToolCallError table {message=, toolName=<function name>}", 1, true))
    local ts = run_code.new({ language = "typescript", bindings = TOOLS }).description
    assert.truthy(ts:find("declare const tools: {\n  boom(...args: unknown[]): Promise<unknown>;\n"
      .. "  /** Add numbers. */\n"
      .. "  count(a: number, b?: number): Promise<number>;\n  /** Read a text file. */\n"
      .. "  readFile(path: string): Promise<string>;\n};", 1, true), ts)
    assert.truthy(ts:find("declare class ToolCallError extends Error { toolName: string }", 1, true))
    assert.truthy(ts:find("async TypeScript function", 1, true))
  end)

  it("renders declared JSON Schema types, results and docs in each language", function()
    local B = { { global = "repo", functions = {
      search = { fn = function() end, description = "Search the code.",
        params = {
          { name = "query", description = "what to find", schema = { type = "object", required = { "text" },
            properties = { text = { type = "string" }, limit = { type = "integer" },
              ["match-case"] = { type = "boolean" }, kind = { enum = { "file", "symbol" } } } } },
          { name = "paths", optional = true, schema = { type = "array", items = { type = "string" } } },
        },
        returns = { type = "array", items = { type = "object", properties = {
          path = { type = "string" }, line = { type = "integer" }, score = { type = { "number", "null" } } } } } },
      meta = { fn = function() end, params = {},
        returns = { type = "object", additionalProperties = { type = "integer" } } },
      either = { fn = function() end, params = { { name = "v", schema = { anyOf = { { type = "string" },
        { const = 3 } } } } }, returns = { type = "boolean" } },
    } } }
    local ts = run_code.describe("typescript", B)
    assert.truthy(ts:find("  /**\n   * Search the code.\n   * @param query what to find\n   */\n"
      .. '  search(query: { kind?: "file" | "symbol"; limit?: number; "match-case"?: boolean; text: string }, '
      .. "paths?: string[]): Promise<{ line?: number; path?: string; score?: number | null }[]>;", 1, true), ts)
    assert.truthy(ts:find("  meta(): Promise<Record<string, number>>;", 1, true), ts)
    assert.truthy(ts:find("  either(v: string | 3): Promise<boolean>;", 1, true), ts)
    local lua = run_code.describe("lua", B)
    assert.truthy(lua:find("---Search the code.\n"
      .. '---@param query {kind?: "file" | "symbol", limit?: integer, ["match-case"]?: boolean, text: string} '
      .. "what to find\n---@param paths? string[]\n"
      .. "---@return {line?: integer, path?: string, score?: number | json.null}[]\n"
      .. "function repo.search(query, paths) end", 1, true), lua)
    assert.truthy(lua:find("---@return table<string, integer>\nfunction repo.meta() end", 1, true), lua)
    assert.truthy(lua:find("---@param v string | 3\n", 1, true), lua)
  end)

  it("checks declarations as it checks the rest of the config, at the caller's line", function()
    local HERE = debug.getinfo(1, "S").short_src
    local fn = function() end
    local cases = {
      { { fn = fn, pramas = {} }, 'binding "t.f": unknown key "pramas" (did you mean "params"?)' },
      { { fn = fn, params = { { name = "a", type = "str" } } },
        'binding "t.f".params[1].schema.type: unknown type "str" (string, number, integer, boolean, null, array, '
        .. "object)" },
      { { fn = fn, params = { { name = "a", schema = { properties = { x = { typ = "string" } } } } } },
        'binding "t.f".params[1].schema.properties.x: unknown key "typ" (did you mean "type"?)' },
      { { fn = fn, params = { { name = "end" } } }, 'binding "t.f".params[1].name "end" is not a usable identifier' },
      { { fn = fn, params = { { name = "a" }, { name = "a" } } }, 'binding "t.f".params[2].name "a" is repeated' },
      { { fn = fn, params = { { name = "a", optional = true }, { name = "b" } } },
        'binding "t.f".params[2] is required but follows an optional parameter' },
      { { fn = fn, returns = { enum = {} } }, 'binding "t.f".returns.enum must be a non-empty list' },
      { { fn = fn, description = 3 }, 'binding "t.f".description must be a string' },
      { { doc = "no fn" }, 'binding "t.f" is not a function' },
    }
    for _, c in ipairs(cases) do
      local cfg = { bindings = { { global = "t", functions = { f = c[1] } } } }
      local line = debug.getinfo(1, "l").currentline + 1
      local ok, err = pcall(function() return run_code.new(cfg) end)
      assert.is_false(ok, c[2])
      assert.equal(HERE .. ":" .. line .. ": dsh.tools.run_code: new: " .. c[2], err)
    end
  end)

  it("renders logs then the value; strings as they are, the rest as indented JSON", function()
    with_ctx({}, function(ctx)
      local t = run_code.new { bindings = TOOLS }
      local text = assert(t:run(ctx, { code = [[print("reading") return tools.readFile("a.txt")]],
        description = "read a file" }))
      assert.equal("reading\ntext of a.txt", text)
      text = assert(t:run(ctx, { code = [[return { n = tools.count(1, 2), list = { 1, json.null }, e = {} }]],
        description = "count" }))
      assert.equal('{\n  "e": {},\n  "list": [\n    1,\n    null\n  ],\n  "n": 3\n}', text)
      assert.equal(run_code.EMPTY, assert(t:run(ctx, { code = "local x = 1", description = "nothing" })))
    end)
  end)

  it("renders a failed run as CODE_RUN_FAILED with the captured output", function()
    with_ctx({}, function(ctx)
      local t = run_code.new { bindings = TOOLS }
      local text, err = t:run(ctx, { code = [[print("before") tools.boom()]], description = "fail" })
      assert.is_nil(text)
      assert.equal("CODE_RUN_FAILED", err.code)
      assert.equal("exception", err.kind)
      assert.truthy(err.message:find("^code run failed %(exception%): ToolCallError: disk on fire"), err.message)
      assert.truthy(err.message:find("\nCaptured output:\nbefore$"), err.message)
    end)
  end)

  it("stays within the runtime's output limit", function()
    with_ctx({ maxOutputBytes = 200 }, function(ctx)
      local t = run_code.new { bindings = TOOLS }
      local _, err = t:run(ctx, { code = [[for i = 1, 100 do print(("x"):rep(10)) end]], description = "spam" })
      assert.equal("output-limit", err.kind)
      local logs = table.concat(err.logs, "")
      assert.is_true(#logs < 200)
    end)
  end)

  if node.bin() then
    it("runs TypeScript bindings as async functions", function()
      with_ctx({}, function(ctx)
        local t = run_code.new { language = "typescript", bindings = TOOLS }
        local text = assert(t:run(ctx, { code = [[const n: number = await tools.count(40, 2);
          try { await tools.boom(); } catch (e) { console.log(e instanceof ToolCallError, e.toolName); }
          return n;]], description = "count" }))
        assert.equal("true boom\n42", text)
      end)
    end)
  end

  it("raises on misuse at the caller's line", function()
    local here = debug.getinfo(1, "S").short_src
    local function raises_here(want, fn)
      local ok, err = pcall(fn)
      assert.is_false(ok)
      assert.equal(here .. ":" .. debug.getinfo(fn, "S").linedefined .. ": " .. want, err)
    end
    raises_here('dsh.tools.run_code: new: language must be "lua", "typescript" or "javascript"',
      function() run_code.new { language = "ruby" } end)
    raises_here("dsh.tools.run_code: new: bindings must be a list", function() run_code.new { bindings = 1 } end)
  end)

  it("refuses bad input", function()
    local t = run_code.new { bindings = TOOLS }
    local ctx = {}
    for _, c in ipairs {
      { {}, "run_code: code must be a non-empty string" },
      { { code = "x" }, "run_code: description must be a non-empty string" },
      { { code = "x", description = "d", extra = 1 }, "run_code: unknown parameter extra" },
    } do
      local r, err = t:run(ctx, c[1])
      assert.is_nil(r)
      assert.same({ "INVALID_ARGUMENT", c[2] }, { err.code, err.message })
    end
    local _, err = t:run(ctx, { code = "x", description = "d" })
    assert.equal("CODE_RUNTIME_UNAVAILABLE", err.code)
  end)
end)
