-- The overlay's config (providers/overlay): its own sections checked with
-- dsh.schema, each section handed to its provider's own validation, the
-- backend passed through to ctx.e2b, sections left out, contradictions
-- named — all when ctx:use is called, before anything is added or started.
local context = require "dsh.context"
local helpers = require "helpers"
local overlay = require "dsh.providers.overlay"

-- The error ctx:use raises for cfg; the context must have no provider then.
local function use_error(cfg)
  local ctx = context.new()
  local ok, err = pcall(ctx.use, ctx, overlay, cfg)
  assert.is_false(ok, "ctx:use accepted the config")
  assert.equal("dsh.context(0 providers)", tostring(ctx)) -- a bad config adds nothing
  return tostring(err)
end

-- The provider names the plan for cfg adds, in order.
local function names(cfg)
  local out = {}
  for _, step in ipairs(overlay.plan(cfg)) do out[#out + 1] = step.provider.name end
  return out
end

describe("the overlay's config", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("composes the sandbox's providers, or the host's, from the existing ones", function()
    local lsp = { servers = { clangd = { command = "clangd", extensionToLanguage = { [".c"] = "c" } } } }
    assert.same({ "dsh-e2b", "fs-e2b", "subprocess-e2b", "bash", "pty-e2b", "lsp-e2b", "code-runtime-e2b" },
      names { lsp = lsp })
    assert.same({ "dsh-e2b", "fs-e2b", "subprocess-e2b", "bash", "pty-e2b", "code-runtime-e2b" }, names {})
    assert.same({ "fs-local", "subprocess-local", "bash", "pty-local", "lsp-local", "code-runtime-local" },
      names { backend = "host", lsp = lsp })
    -- the registries come with their backends
    local ctx = context.new()
    ctx:use(overlay, { lsp = lsp, e2b = { cwd = "/srv" } })
    assert.equal("dsh.context(9 providers)", tostring(ctx))
  end)

  it("passes the backend through to ctx.e2b, and the e2b section untouched besides", function()
    local plan = overlay.plan { backend = "cloud", e2b = { apiKey = "k", cwd = "/srv/w" } }
    assert.same({ backend = "cloud", apiKey = "k", cwd = "/srv/w" }, plan[1].config)
    assert.equal("local", overlay.plan {}[1].config.backend)
    assert.equal("cloud", overlay.plan { e2b = { backend = "cloud", apiKey = "k" } }[1].config.backend)
  end)

  it("names an unknown section and the closest known one", function()
    assert.matches('overlay: unknown config key "ptty" %(did you mean "pty"%?%)', use_error { ptty = {} })
    assert.matches('overlay: unknown config key "code_runtime" %(did you mean "codeRuntime"%?%)',
      use_error { code_runtime = {} })
    assert.matches("^[^\n]*60%-overlay_config_spec%.lua:%d+: overlay: ", use_error { lps = {} }) -- at the caller
  end)

  it("refuses a bad backend, and a backend e2b contradicts", function()
    assert.matches('overlay: backend must be "local", "cloud" or "host"', use_error { backend = "vm" })
    assert.matches('overlay: backend is "local" but e2b.backend is "cloud": set one of them',
      use_error { backend = "local", e2b = { backend = "cloud", apiKey = "k" } })
    assert.matches('overlay: e2b.backend must be "local" or "cloud"', use_error { e2b = { backend = "host" } })
    assert.matches('overlay: e2b applies only to a sandbox %(backend "local" or "cloud"%); backend "host" has none',
      use_error { backend = "host", e2b = { cwd = "/srv" } })
    assert.matches('overlay: e2b cannot be false: every capability runs in the sandbox it owns',
      use_error { e2b = false })
  end)

  it("hands each section to its provider's own validation (its error, unchanged)", function()
    assert.matches('dsh%-e2b: unknown config key "onDisposal" %(did you mean "onDispose"%?%)',
      use_error { e2b = { onDisposal = "kill" } })
    assert.matches("dsh%-e2b: cwd must be an absolute Linux path: rel", use_error { e2b = { cwd = "rel" } })
    assert.matches('fs%-e2b: unknown config key "root" %(it takes no config%)', use_error { fs = { root = "/" } })
    assert.matches('subprocess%-e2b: unknown config key "reconectMs" %(did you mean "reconnectMs"%?%)',
      use_error { subprocess = { reconectMs = 1 } })
    assert.matches('bash: unknown config key "timeoutMS" %(did you mean "timeoutMs"%?%)',
      use_error { bash = { timeoutMS = 1 } })
    assert.matches("bash: timeoutMs must be an integer in", use_error { bash = { timeoutMs = -1 } })
    assert.matches("pty%-e2b: unknown config key", use_error { pty = { pollMs = 25 } })
    assert.matches("lsp%-e2b: servers must contain at least one server", use_error { lsp = { servers = {} } })
    assert.matches("code%-runtime%-e2b: unknown config key", use_error { codeRuntime = { wallMs = 1 } })
    -- the host's providers validate theirs
    assert.matches('fs%-local: unknown config key "cwd" %(known keys: root%)',
      use_error { backend = "host", fs = { cwd = "/" } })
    assert.matches("subprocess%-local: cwd must be an absolute path",
      use_error { backend = "host", subprocess = { cwd = "rel" } })
    assert.matches("pty%-local: unknown config key", use_error { backend = "host", pty = { pollMs = 25 } })
    assert.matches("code%-runtime%-local: unknown config key",
      use_error { backend = "host", codeRuntime = { wallMs = 1 } })
  end)

  it("refuses a section that is neither a table nor false", function()
    assert.matches("overlay: bash must be a table %(dsh.providers.bash's config%) or false, got number",
      use_error { bash = 3 })
    assert.matches("overlay: pty must be a table %(dsh.providers.pty_e2b's config%) or false, got boolean",
      use_error { pty = true })
    assert.matches("overlay: e2b must be a table %(dsh%-e2b's config%), got string", use_error { e2b = "x" })
  end)

  it("leaves a section set to false out, and lsp out unless it names servers", function()
    assert.same({ "dsh-e2b", "fs-e2b", "subprocess-e2b", "bash", "code-runtime-e2b" }, names { pty = false })
    assert.same({ "dsh-e2b", "subprocess-e2b", "bash", "pty-e2b" }, names { fs = false, codeRuntime = false })
    assert.same({ "dsh-e2b", "fs-e2b" }, names { subprocess = false, bash = false, pty = false, codeRuntime = false })
    assert.same({ "fs-local", "pty-local" },
      names { backend = "host", subprocess = false, bash = false, codeRuntime = false })
  end)

  it("names a contradiction: a capability kept whose dependency is left out", function()
    assert.matches("overlay: bash needs subprocess, which is set to false: leave bash out too %(bash = false%) "
      .. "or keep subprocess", use_error { subprocess = false })
    assert.matches("overlay: pty needs subprocess, which is set to false",
      use_error { subprocess = false, bash = false })
    assert.matches("overlay: codeRuntime needs subprocess, which is set to false",
      use_error { subprocess = false, bash = false, pty = false })
    assert.matches("overlay: lsp needs subprocess, which is set to false",
      use_error { subprocess = false, bash = false, pty = false, codeRuntime = false,
        lsp = { servers = { c = { command = "clangd", extensionToLanguage = { [".c"] = "c" } } } } })
    -- on the host a terminal needs no ctx.subprocess (pty-local runs its own PTYs)
    assert.matches("overlay: codeRuntime needs subprocess",
      use_error { backend = "host", subprocess = false, bash = false })
  end)
end)
