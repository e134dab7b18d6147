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
      require("dsh.code_runtime._wire").encode_json(p))
  end)

  it("describes the bindings in the program's language", function()
    local lua = run_code.new({ bindings = TOOLS }).description
    assert.truthy(lua:find("tools.count(a: integer, b?: integer) -> integer\n  -- Add numbers.", 1, true), lua)
    assert.truthy(lua:find("tools.readFile(path: string) -> string\n  -- Read a text file.", 1, true))
    assert.truthy(lua:find("tools.boom() -> any", 1, true))
    assert.truthy(lua:find("ToolCallError table {message=, toolName=<function name>}", 1, true))
    local ts = run_code.new({ language = "typescript", bindings = TOOLS }).description
    assert.truthy(ts:find("declare const tools: {\n  boom(): Promise<unknown>;\n  /** Add numbers. */\n"
      .. "  count(a: number, b?: number): Promise<number>;\n  /** Read a text file. */\n"
      .. "  readFile(path: string): Promise<string>;\n};", 1, true), ts)
    assert.truthy(ts:find("declare class ToolCallError extends Error { toolName: string }", 1, true))
    assert.truthy(ts:find("async TypeScript function", 1, true))
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
