-- Routing by extension between two real language servers: clangd for C and
-- pyright (npm, installed by scripts/install-lsp-servers) for Python, on this
-- machine (lsp-local) and in a real local sandbox (lsp-e2b).
local D = require "helpers.dshd"
local helpers = require "helpers"
local lsp = require "dsh.lsp"
local servers_of = require "helpers.lsp_servers"

local PY = table.concat({
  "def greet(name: str) -> str:",
  '    """Say 你好 🙂 to name."""',
  '    return "你好 🙂 " + name',
  "",
  'message = "🙂🙂"; result = greet(message)',
  "broken = greet(42)",
  "",
}, "\n")

local C = 'static int twice(int x) { return 2 * x; }\nint main(void) { const char *s = "🙂"; return twice(s[0]); }\n'

local function servers()
  local py = servers_of.server("pyright")
  return {
    clangd = { command = "clangd", args = { "--log=error" }, extensionToLanguage = { [".c"] = "c" } },
    pyright = { command = py.command, args = py.args, extensionToLanguage = { [".py"] = "python" } },
  }
end

-- The same questions in any world: C goes to clangd, Python to pyright.
local function ask(ctx, ws)
  local function q(op, file, text, needle)
    local pos = lsp.position.from_index(text, (text:find(needle, 1, true)))
    return assert(ctx.lsp:query { operation = op, filePath = file, position = pos, workspaceRoot = ws })
  end
  local h = q("hover", "app.py", PY, "greet(message")
  assert.matches("%(function%) def greet%(name: str%) %-> str", h.hover.contents)
  assert.matches("Say 你好 🙂 to name", h.hover.contents)
  assert.same({ line = 4, character = 27 }, h.hover.range.start) -- after two emoji: 4 UTF-16 units
  local d = q("goToDefinition", "app.py", PY, "greet(message")
  assert.same({ start = { line = 0, character = 4 }, ["end"] = { line = 0, character = 9 } }, d.locations[1].range)
  local diags = assert(ctx.lsp:diagnostics("app.py", { workspaceRoot = ws, waitMs = 20000 }))
  assert.is_true(diags.settled)
  local found
  for _, x in ipairs(diags.diagnostics) do
    if x.severity == "error" and x.range.start.line == 5 then found = x end
  end
  assert.is_table(found, "pyright did not report greet(42)")
  assert.equal("Pyright", found.source)
  local ch = q("hover", "main.c", C, "twice(s")
  assert.matches("static int twice%(int x%)", ch.hover.contents)
  local cd = q("goToDefinition", "main.c", C, "twice(s")
  assert.same({ line = 0, character = 11 }, cd.locations[1].range.start)
end

describe("routing by extension between clangd and pyright", function()
  D.use_state()
  it("on this machine (lsp-local)", function()
    helpers.run(function()
      local root = helpers.tmpdir()
      helpers.write_file(root .. "/app.py", PY)
      helpers.write_file(root .. "/main.c", C)
      local ok, err = pcall(helpers.with_context, {
        require "dsh.providers.subprocess_local", lsp.provider,
        { require "dsh.providers.lsp_local", { servers = servers() } },
      }, function(ctx)
        assert.same({ "clangd", "pyright" }, ctx.lsp:providers())
        ask(ctx, root)
      end)
      helpers.rm_rf(root)
      assert(ok, err)
    end)
  end)

  it("in a local sandbox (lsp-e2b)", function()
    helpers.run(function()
      helpers.with_context({
        { require "dsh.providers.e2b", {} }, require "dsh.providers.subprocess_e2b", lsp.provider,
        { require "dsh.providers.lsp_e2b", { servers = servers() } },
      }, function(ctx)
        local envd = assert(ctx.e2b:getSandbox()).envd
        local ws = ctx.e2b.cwd
        assert(envd:write_file(ws .. "/app.py", PY))
        assert(envd:write_file(ws .. "/main.c", C))
        ask(ctx, ws)
      end)
    end)
  end)
end)
