-- Routing by extension between two real language servers: clangd for C and
-- pyright (npm, pinned in spec/fixtures/pyright) for Python, on this machine
-- (lsp-local) and in a real local sandbox (lsp-e2b, pyright copied in).
--
-- Needs node and pyright in spec/fixtures/pyright/node_modules: installed here
-- with `npm ci` (the committed lock) when missing.
local async = require "dsh.async"
local D = require "helpers.dshd"
local helpers = require "helpers"
local lsp = require "dsh.lsp"
local proc = require "dsh.proc"
local sys = require "dsh.sysutil"

local PYRIGHT = helpers.root .. "/spec/fixtures/pyright"

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

local function run(argv, dir)
  local p = assert(proc.spawn { argv = argv, cwd = dir, stdout = "pipe", stderr = "pipe" })
  local err_task = async.run(function() return p:read_all("stderr") end)
  local out = p:read_all()
  local err = err_task:await()
  local st = p:wait()
  p:wait_quiescent()
  p:close()
  return st.exit_code, out, err
end

local function servers(pyright_js)
  return {
    clangd = { command = "clangd", args = { "--log=error" }, extensionToLanguage = { [".c"] = "c" } },
    pyright = { command = "node", args = { pyright_js, "--stdio" }, extensionToLanguage = { [".py"] = "python" } },
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
  setup(function()
    assert(sys.which("node"), "node is not installed (scripts/install-deps installs it)")
    if not sys.exists(PYRIGHT .. "/node_modules/pyright/package.json") then
      helpers.run(function()
        local code, out, err = run({ "npm", "ci", "--no-audit", "--no-fund" }, PYRIGHT)
        assert(code == 0, "npm ci in spec/fixtures/pyright failed: " .. out .. err)
      end)
    end
  end)

  it("on this machine (lsp-local)", function()
    helpers.run(function()
      local root = helpers.tmpdir()
      helpers.write_file(root .. "/app.py", PY)
      helpers.write_file(root .. "/main.c", C)
      local js = PYRIGHT .. "/node_modules/pyright/langserver.index.js"
      local ok, err = pcall(helpers.with_context, {
        require "dsh.providers.subprocess_local", lsp.provider,
        { require "dsh.providers.lsp_local", { servers = servers(js) } },
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
        { require "dsh.providers.lsp_e2b", { servers = servers("/home/user/pyright/langserver.index.js") } },
      }, function(ctx)
        -- pyright goes into the sandbox as a tarball; nothing of the host is visible there
        local tmp = helpers.tmpdir()
        local code, out, terr = run({ "tar", "czf", tmp .. "/pyright.tgz", "-C", PYRIGHT .. "/node_modules",
          "pyright" }, tmp)
        assert(code == 0, out .. terr)
        local envd = assert(ctx.e2b:getSandbox()).envd
        assert(envd:write_file("/home/user/pyright.tgz", assert(helpers.read_file(tmp .. "/pyright.tgz"))))
        helpers.rm_rf(tmp)
        local r = assert(ctx.e2b:exec { "tar", "xzf", "/home/user/pyright.tgz", "-C", "/home/user" })
        assert.equal(0, r.exit_code)
        local ws = ctx.e2b.cwd
        assert(envd:write_file(ws .. "/app.py", PY))
        assert(envd:write_file(ws .. "/main.c", C))
        ask(ctx, ws)
      end)
    end)
  end)
end)
