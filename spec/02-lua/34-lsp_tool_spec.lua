-- The model-facing `lsp` tool: its schema (OpenAI strict mode and Anthropic),
-- input checks, rendering, and a run against real clangd on this machine.
local async = require "dsh.async"
local helpers = require "helpers"
local json = require "dsh.json"
local lsp = require "dsh.lsp"
local tool = require "dsh.tools.lsp"

local function range(l1, c1, l2, c2)
  return { start = { line = l1, character = c1 }, ["end"] = { line = l2 or l1, character = c2 or c1 } }
end

describe("dsh.tools.lsp", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("has a schema OpenAI strict mode and Anthropic accept", function()
    local p = tool.parameters
    assert.equal("object", p.type)
    assert.is_false(p.additionalProperties)
    local required = {}
    for _, k in ipairs(p.required) do required[k] = true end
    -- strict mode: every property required, optional ones nullable, only supported keywords
    local allowed = { type = true, enum = true, description = true }
    for name, prop in pairs(p.properties) do
      assert.is_true(required[name], name .. " must be required")
      for k in pairs(prop) do assert.is_true(allowed[k], name .. ": keyword " .. k) end
    end
    for _, name in ipairs { "line", "character", "query", "name_path", "new_name", "title" } do
      assert.same("null", p.properties[name].type[2])
    end
    assert.equal(22, #p.properties.operation.enum)
    for _, op in ipairs(p.properties.operation.enum) do assert.is_not_nil(lsp.OPERATIONS[op]) end
    -- it survives JSON as it is
    local back = json.decode(json.encode(p))
    assert.same(p.required, back.required)
    assert.equal("lsp", tool.name)
    assert.matches("UTF%-16", tool.description)
  end)

  it("checks its input; null means absent", function()
    local null = json.null
    local function bad(input, msg)
      local v, err = tool.validate(input)
      assert.is_nil(v)
      assert.equal("INVALID_ARGUMENT", err.code)
      assert.equal(msg, err.message)
    end
    bad(nil, "lsp: input must be an object")
    bad({ operation = "frobnicate", file_path = "a.c" }, "lsp: operation must be one of goToDefinition, "
      .. "findReferences, goToImplementation, goToTypeDefinition, goToDeclaration, hover, documentSymbol, "
      .. "workspaceSymbol, symbol, incomingCalls, outgoingCalls, supertypes, subtypes, diagnostics, "
      .. "workspaceDiagnostics, completion, signatureHelp, rename, codeActions, applyCodeAction, organizeImports, "
      .. "format")
    bad({ operation = "rename", file_path = "a.c", line = 1, character = 1, new_name = null },
      "lsp: rename needs new_name, a non-empty string")
    bad({ operation = "symbol", file_path = "a.c", name_path = " " }, "lsp: symbol needs name_path, a non-empty string")
    bad({ operation = "applyCodeAction", file_path = "a.c", line = 1, character = 1 },
      "lsp: applyCodeAction needs title, a non-empty string")
    bad({ operation = "hover", file_path = " " }, "lsp: file_path must be a non-empty string")
    local line_msg = "line must be a positive integer (one-based)"
    bad({ operation = "hover", file_path = "a.c", line = null, character = 1 }, line_msg)
    bad({ operation = "hover", file_path = "a.c", line = 1, character = 0 },
      "character must be a positive integer (one-based)")
    bad({ operation = "hover", file_path = "a.c", line = 1.5, character = 1 }, line_msg)
    bad({ operation = "workspaceSymbol", file_path = "a.c", query = null },
      "lsp: workspaceSymbol needs query, a string")
    bad({ operation = "hover", file_path = "a.c", line = 1, character = 1, extra = 1 }, "lsp: unknown parameter extra")
    assert.same({ operation = "diagnostics", file_path = "a.c" },
      tool.validate { operation = "diagnostics", file_path = "a.c", line = null, character = null, query = null })
    assert.same({ operation = "hover", file_path = "a.c", line = 2, character = 3 },
      tool.validate { operation = "hover", file_path = "a.c", line = 2, character = 3, query = null })
  end)

  it("renders locations relative to the workspace, grouped by file, within its limits", function()
    local ws = "file:///w"
    local text = tool.render { kind = "locations", resolvedWorkspaceUri = ws, locations = {
      { uri = "file:///w/b.c", range = range(4, 0) },
      { uri = "file:///w/a.c", range = range(9, 2) },
      { uri = "file:///usr/include/stdio.h", range = range(0, 0) },
      { uri = "file:///w/b.c", range = range(1, 6) },
      { uri = "untitled:x", range = range(0, 1) },
    } }
    assert.equal("b.c:2:7\nb.c:5:1\na.c:10:3\n/usr/include/stdio.h:1:1\nuntitled:x:1:2", text)
    assert.equal("No results.", tool.render { kind = "locations", resolvedWorkspaceUri = ws, locations = {} })
    local many = {}
    for i = 1, 103 do many[i] = { uri = "file:///w/a.c", range = range(i - 1, 0) } end
    text = tool.render { kind = "locations", resolvedWorkspaceUri = ws, locations = many }
    local lines = {}
    for l in text:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.equal(101, #lines)
    assert.equal("… 3 more location(s) omitted (limit 100).", lines[101])
  end)

  it("renders hover, diagnostics, symbols and calls, and cuts on characters", function()
    assert.equal("No hover information.", tool.render { kind = "hover" })
    assert.equal("`int x`", tool.render { kind = "hover", hover = { contents = "`int x`" } })
    local long = ("你"):rep(tool.maxResultChars + 5)
    local out = tool.render { kind = "hover", hover = { contents = long } }
    assert.equal(("你"):rep(tool.maxResultChars) .. "\n… hover truncated (limit 16000 characters).", out)
    local d = tool.render { kind = "diagnostics", uri = "file:///w/a.c", settled = false, diagnostics = {
      { range = range(5, 2), severity = "warning", message = "unused\nvariable", source = "clang" },
      { range = range(1, 0), severity = "error", message = "boom", code = "E1" },
    } }
    assert.equal("/w/a.c:2:1: error: boom [E1]\n/w/a.c:6:3: warning: unused; variable (clang)\n"
      .. "(The language server had not finished analysing the latest version within 5000 ms; this may be stale.)", d)
    assert.equal("No diagnostics.", tool.render { kind = "diagnostics", uri = "file:///w/a.c", settled = true,
      diagnostics = {} })
    local s = tool.render { kind = "symbols", resolvedWorkspaceUri = "file:///w", symbols = {
      { name = "area", kind = 6, container = "Square", detail = "int () const", uri = "file:///w/s.cpp",
        range = range(2, 35) },
      { name = "use", kind = 12, uri = "file:///w/s.cpp", range = range(3, 4) },
    } }
    assert.equal("s.cpp:3:36 method Square.area — int () const\ns.cpp:4:5 function use", s)
    local c = tool.render { kind = "calls", direction = "incoming", resolvedWorkspaceUri = "file:///w",
      item = { name = "area" }, calls = { { name = "use", kind = 12, uri = "file:///w/s.cpp", range = range(3, 4),
        fromRanges = { range(3, 57) } } } }
    assert.equal("Incoming calls to area:\ns.cpp:4:5 use (calls at 4:58)", c)
  end)

  it("says what went wrong in words", function()
    assert.equal("Error: the language server did not answer in time (timed out after 5 ms).",
      tool.render_error { code = "TIMEOUT", message = "timed out after 5 ms" })
    assert.equal("Error: no workspace is known for this session, so the language server cannot be asked.",
      tool.render_error { code = "LSP_WORKSPACE_REQUIRED", message = "x" })
    assert.equal('Error: no language server handles ".txt" files (a.txt)',
      tool.render_error { code = "LSP_UNAVAILABLE", message = 'no language server handles ".txt" files (a.txt)' })
  end)

  it("runs against clangd: lines of context, 1-based UTF-16 columns, timeouts", function()
    helpers.run(function()
      local root = helpers.tmpdir()
      local src = 'static int 你好_count = 0; /* 🙂 */\nint bump(void) { return ++你好_count; }\n'
      helpers.write_file(root .. "/a.c", src)
      helpers.write_file(root .. "/s.fx", "silent\n")
      local ok, err0 = pcall(helpers.with_context, {
        { require "dsh.providers.fs_local", { root = root } }, require "dsh.providers.subprocess_local", lsp.provider,
        { require "dsh.providers.lsp_local", { servers = {
          clangd = { command = "clangd", args = { "--log=error" }, extensionToLanguage = { [".c"] = "c" } },
          fx = { command = "luajit", args = { helpers.root .. "/spec/fixtures/lsp-fixture-server.lua" },
            extensionToLanguage = { [".fx"] = "fx" }, killGraceMs = 200 },
        } } },
      }, function(ctx)
        local p = io.popen("realpath " .. root)
        local real = p:read("*l")
        p:close()
        -- "++你好_count": 你 and 好 are one UTF-16 unit each; column 27 (1-based) is the identifier
        local text = assert(tool.run(ctx, { operation = "goToDefinition", file_path = "a.c", line = 2,
          character = 27, query = json.null }, { workspaceRoot = root }))
        assert.equal("a.c:1:12: static int 你好_count = 0; /* 🙂 */", text)
        text = assert(tool.run(ctx, { operation = "findReferences", file_path = real .. "/a.c", line = 1,
          character = 12 }, { workspaceRoot = real }))
        assert.equal("a.c:1:12: static int 你好_count = 0; /* 🙂 */\na.c:2:27: int bump(void) { return "
          .. "++你好_count; }", text)
        assert.equal("No diagnostics.", assert(tool.run(ctx, { operation = "diagnostics", file_path = "a.c" },
          { workspaceRoot = root })))
        local v, err = tool.run(ctx, { operation = "hover", file_path = "a.c", line = 1, character = 1 })
        assert.is_nil(v)
        assert.equal("LSP_WORKSPACE_REQUIRED", err.code)
        v, err = tool.run(ctx, { operation = "hover", file_path = "s.fx", line = 1, character = 2 },
          { workspaceRoot = root, timeoutMs = 150 })
        assert.is_nil(v)
        assert.equal("TIMEOUT", err.code)
        assert.equal("Error: the language server did not answer in time (timed out after 150 ms).",
          tool.render_error(err))
        async.sleep(10)
      end)
      helpers.rm_rf(root)
      assert(ok, err0)
    end)
  end)
  it("renders the new kinds compactly: edits, actions, completions, signatures, symbols, types", function()
    local ws = "file:///w"
    assert.equal("Applied 3 edit(s) to 2 file(s):\n  a.py (2 edit(s))\n  /etc/x (1 edit(s))\n"
      .. "Read the files again before editing them further.",
      tool.render { kind = "edit", applied = true, resolvedWorkspaceUri = ws,
        files = { { path = "/w/a.py", edits = 2 }, { path = "/etc/x", edits = 1 } } })
    assert.equal("No change made: the server proposed no change.",
      tool.render { kind = "edit", applied = false, files = {}, reason = "the server proposed no change" })
    assert.equal("1. Add import [quickfix] (preferred)\n2. Extract (disabled: no selection)\n"
      .. "(apply one with operation applyCodeAction and its title)",
      tool.render { kind = "actions", actions = { { title = "Add import", kind = "quickfix", isPreferred = true },
        { title = "Extract", disabled = "no selection" } } })
    local many = {}
    for i = 1, 60 do many[i] = { label = "item" .. i, kind = 3, detail = "() -> int" } end
    local c = tool.render { kind = "completion", items = many, isIncomplete = true }
    assert.matches("^item1 %(function%) — %(%) %-> int\n", c)
    assert.matches("… 10 more completion%(s%) omitted %(limit 50%)%.", c)
    assert.matches("type more of the name", c)
    assert.equal("* parse(text: str) [parameter: text: str]\n  Split it.", tool.render { kind = "signatures",
      activeSignature = 0, activeParameter = 0, signatures = { { label = "parse(text: str)",
        documentation = "Split it.", parameters = { { label = "text: str" } } } } })
    assert.equal("method Parser/parse at p.py:8:5-9:32\n     8\tdef parse(self):\n     9\t        return 1",
      tool.render { kind = "symbol", namePath = "Parser/parse", resolvedWorkspaceUri = ws, matches = { {
        namePath = "Parser/parse", kind = 6, uri = "file:///w/p.py", body = "def parse(self):\n        return 1",
        bodyRange = range(7, 4, 8, 31) } } })
    assert.equal('No symbol "Nope" in this file.', tool.render { kind = "symbol", namePath = "Nope", matches = {} })
    assert.equal("Supertypes of Square:\na.cpp:2:8 Shape", tool.render { kind = "types", direction = "supertypes",
      resolvedWorkspaceUri = ws, item = { name = "Square" },
      types = { { name = "Shape", uri = "file:///w/a.cpp", range = range(1, 7) } } })
    assert.equal("a.c:1:1: error: bad [E1] (cc)\nb.c:2:3: warning: meh", tool.render { kind = "workspaceDiagnostics",
      settled = true, resolvedWorkspaceUri = ws, files = {
        { uri = "file:///w/a.c", diagnostics = { { range = range(0, 0), severity = "error", message = "bad",
          code = "E1", source = "cc" } } },
        { uri = "file:///w/b.c", diagnostics = { { range = range(1, 2), severity = "warning", message = "meh" } } } } })
    -- what the server showed as an error comes after the answer
    assert.equal("No hover information.\n[language server error: the project failed to load]",
      tool.render { kind = "hover", serverMessages = { { type = "error", text = "the project  failed\nto load" } } })
  end)

  it("tells the model which extensions have servers", function()
    local reg = lsp.new()
    assert(reg:register { id = "c", extensionToLanguage = { [".c"] = "c", [".h"] = "c" }, query = function() end })
    assert(reg:register { id = "rs", extensionToLanguage = { [".rs"] = "rust" }, query = function() end,
      unavailable = { code = "LSP_UNAVAILABLE", message = "missing" } })
    local d = tool.describe(reg)
    assert.matches("Files with a language server here: %.c %.h%. Configured but not installed: %.rs%.$", d)
    assert.matches("No language server is configured%.$", tool.describe(lsp.new()))
  end)
end)
