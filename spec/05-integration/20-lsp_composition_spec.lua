-- Language servers in the full composition (reference §6.2 B, steps 6–8):
-- ctx.e2b on a real local sandbox, fs-e2b, subprocess-e2b, bash, ctx.lsp and
-- lsp-e2b with the fixture server for .ts (shutdown 1000, kill grace 500) and
-- real clangd for C, all on the one sandbox: what fs writes and Bash edits is
-- what the servers analyse, and the model-facing tool sees it the same way.
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local helpers = require "helpers"
local lsp = require "dsh.lsp"
local lsp_e2b = require "dsh.providers.lsp_e2b"
local sys = require "dsh.core.sysutil"
local tool = require "dsh.tools.lsp"

local C_SOURCE = table.concat({
  "/* 计数器 🙂 */",
  'static const char *label = "数え 🚀";',
  "static int counter(int step) { return step + 1; }",
  "int run(void) { const char *e = \"🙂\"; return counter(2) + (e[0] == 0) + (label[0] == 0); }",
  "",
}, "\n")

describe("language servers in the composition", function()
  D.isolated_state()
  local ctx, fixture
  before_each(function()
    helpers.snapshot()
    helpers.run(function()
      fixture = "/tmp/lsp-fixture-" .. sys.random_hex(6) .. ".lua"
      ctx = helpers.start_context {
        { require "dsh.providers.e2b", { timeoutMs = 180000, onTimeout = "kill", onDispose = "kill" } },
        require "dsh.providers.fs_e2b", require "dsh.providers.subprocess_e2b",
        { require "dsh.providers.bash", { timeoutMs = 30000 } }, lsp.provider,
        { lsp_e2b, { servers = {
          fixture = { command = "luajit", args = { fixture }, extensionToLanguage = { [".ts"] = "typescript" },
            shutdownTimeoutMs = 1000, killGraceMs = 500 },
          clangd = { command = "clangd", args = { "--log=error" }, extensionToLanguage = { [".c"] = "c" } },
        } } },
      }
      local envd = assert(ctx.e2b:getSandbox()).envd
      local program = assert(helpers.read_file(helpers.root .. "/spec/fixtures/lsp-fixture-server.lua"))
      assert(envd:write_file(fixture, program))
    end)
  end)
  after_each(function()
    helpers.run(function()
      local registry = ctx:get("lsp")
      if registry then registry:injectFault("beforeRead", nil) end
      assert(ctx:dispose())
      -- every server ran in the sandbox, whose processes the host sees: none is left
      assert.same({}, E.survivors(E.procs_with(fixture), 3000))
    end)
    helpers.assert_clean()
  end)

  local function q(req)
    req.workspaceRoot = req.workspaceRoot or ctx.e2b.cwd
    return ctx.lsp:query(req)
  end

  it("hovers and finds definitions across multibyte text in a file named with a space and a # (step 6)", function()
    helpers.run(function()
      assert(ctx.fs:writeText("multibyte # file.ts", 'const multibyte = "你好 café";\n'))
      local h = assert(q { operation = "hover", filePath = "multibyte # file.ts",
        position = { line = 0, character = 7 } })
      assert.equal("**remote hover** 你好 café", h.hover.contents)
      local d = assert(q { operation = "goToDefinition", filePath = "multibyte # file.ts",
        position = { line = 0, character = 7 } })
      assert.same({ start = { line = 0, character = 6 }, ["end"] = { line = 0, character = 15 } }, d.locations[1].range)
      assert.equal(lsp.uri.from_path(ctx.e2b.cwd .. "/multibyte # file.ts"), d.locations[1].uri)
    end)
  end)

  it("refuses a source swapped for a symlink to /etc/hosts right before the read (step 7)", function()
    helpers.run(function()
      assert(ctx.fs:writeText("swapped.ts", "const x = 1;\n"))
      ctx.lsp:injectFault("beforeRead", function(path)
        ctx.lsp:injectFault("beforeRead", nil)
        local r = assert(ctx.bash:run { command = "rm " .. path .. " && ln -s /etc/hosts " .. path })
        assert.equal(0, r.exitCode)
      end)
      local v, err = q { operation = "hover", filePath = "swapped.ts", position = { line = 0, character = 6 } }
      assert.is_nil(v)
      assert.equal("LSP_INVALID_SOURCE", err.code)
      assert.matches('^source "swapped.ts" could not be opened safely: ', err.message)
    end)
  end)

  it("refuses a 4,000,001-byte source over the 4000000-byte limit (step 8)", function()
    helpers.run(function()
      local envd = assert(ctx.e2b:getSandbox()).envd
      assert(envd:write_file(ctx.e2b.cwd .. "/big.ts", ("a"):rep(4000001)))
      local v, err = q { operation = "hover", filePath = "big.ts", position = { line = 0, character = 0 } }
      assert.is_nil(v)
      assert.equal("LSP_INVALID_SOURCE", err.code)
      assert.equal('source "big.ts" is 4000001 bytes, over the 4000000-byte limit', err.message)
      -- exactly at the limit is fine
      assert(envd:write_file(ctx.e2b.cwd .. "/big.ts", ("a"):rep(4000000)))
      assert(q { operation = "hover", filePath = "big.ts", position = { line = 0, character = 0 } })
    end)
  end)

  it("sees what fs writes and Bash edits, through the seam and through the tool (clangd)", function()
    helpers.run(function()
      local ws = ctx.e2b.cwd
      assert(ctx.fs:writeText("count.c", C_SOURCE))
      local col = lsp.position.from_index(C_SOURCE, (C_SOURCE:find("counter(2)", 1, true))).character
      local text = assert(tool.run(ctx, { operation = "goToDefinition", file_path = "count.c", line = 4,
        character = col + 1 }, { workspaceRoot = ws }))
      assert.equal("count.c:3:12: static int counter(int step) { return step + 1; }", text)
      assert.equal("No diagnostics.", assert(tool.run(ctx, { operation = "diagnostics", file_path = "count.c" },
        { workspaceRoot = ws })))
      -- Bash breaks it; the server sees the new text on the next question
      local r = assert(ctx.bash:run { command = "sed -i 's/return step + 1;/return step + missing;/' count.c" })
      assert.equal(0, r.exitCode)
      text = assert(tool.run(ctx, { operation = "diagnostics", file_path = "count.c" }, { workspaceRoot = ws }))
      assert.matches("^count%.c:3:46: error: Use of undeclared identifier 'missing'", text)
      -- fs repairs it
      assert(ctx.fs:writeText("count.c", C_SOURCE))
      assert.equal("No diagnostics.", assert(tool.run(ctx, { operation = "diagnostics", file_path = "count.c" },
        { workspaceRoot = ws })))
      local hover = assert(tool.run(ctx, { operation = "hover", file_path = "count.c", line = 4,
        character = col + 1 }, { workspaceRoot = ws }))
      assert.matches("static int counter%(int step%)", hover)
    end)
  end)
end)
