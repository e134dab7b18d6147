-- Config mistakes are caught at ctx:use (dsh.schema, issue 9 §2): an unknown
-- key raises for every provider, naming the key and the closest known key,
-- at the caller's line, before any provider does anything.
local context = require "dsh.context"
local helpers = require "helpers"
local schema = require "dsh.schema"

-- Every provider on main, with one valid config and one misspelt key.
local PROVIDERS = {
  { "dsh.providers.e2b", "dsh-e2b", { ondispose = "leave" }, "onDispose" },
  { "dsh.providers.e2b", "dsh-e2b", { timeOutMs = 1000 }, "timeoutMs" },
  { "dsh.providers.e2b", "dsh-e2b", { maxProcess = 64 }, "maxProcesses" },
  { "dsh.providers.fs_e2b", "fs-e2b", { cwd = "/tmp" }, nil },
  { "dsh.providers.fs_local", "fs-local", { rot = "/tmp" }, "root" },
  { "dsh.providers.subprocess_e2b", "subprocess-e2b", { reconnectMS = 10 }, "reconnectMs" },
  { "dsh.providers.subprocess_local", "subprocess-local", { spilldir = "/tmp" }, "spillDir" },
  { "dsh.providers.bash", "bash", { maxTimeout = 1000 }, "maxTimeoutMs" },
  { "dsh.providers.bash", "bash", { timeout = 1000 }, "timeoutMs" },
  { "dsh.providers.pty_e2b", "pty-e2b", { timeOutMs = 1000 }, "timeoutMs" },
  { "dsh.providers.pty_e2b", "pty-e2b", { shel = { "/bin/sh" } }, "shell" },
  { "dsh.providers.pty_local", "pty-local", { idleSilenceMS = 10 }, "idleSilenceMs" },
  { "dsh.providers.pty_local", "pty-local", { ambientenv = {} }, "ambientEnv" },
  { "dsh.providers.lsp_e2b", "lsp-e2b", { server = {} }, "servers" },
  { "dsh.providers.lsp_local", "lsp-local", { servres = {} }, "servers" },
  { "dsh.providers.code_runtime_e2b", "code-runtime-e2b", { maxWallMS = 10 }, "maxWallMs" },
  { "dsh.providers.overlay", "overlay", { ptty = {} }, "pty" },
  { "dsh.providers.overlay", "overlay", { coderuntime = {} }, "codeRuntime" },
  { "dsh.providers.code_runtime_e2b", "code-runtime-e2b", { luaLibrary = { "os" } }, "luaLibraries" },
  { "dsh.providers.code_runtime_local", "code-runtime-local", { runtimedir = "/tmp" }, "runtimeDir" },
  { "dsh.providers.code_runtime_local", "code-runtime-local", { langauge = "lua" }, "language" },
}

-- Every provider directory in the tree.
local function provider_modules()
  local lfs = require "lfs"
  local root = helpers.root
  local out = {}
  for name in lfs.dir(root .. "/providers") do
    if name:sub(1, 1) ~= "." and lfs.attributes(root .. "/providers/" .. name .. "/init.lua", "mode") == "file" then
      out[#out + 1] = "dsh.providers." .. name
    end
  end
  table.sort(out)
  return out
end

-- The message ctx:use raised for provider with cfg (the position stripped
-- after checking it is this file's).
local function use_error(provider, cfg)
  local ctx = context.new()
  local ok, err = pcall(ctx.use, ctx, require(provider), cfg)
  assert.is_false(ok, provider .. " accepted " .. tostring(next(cfg)))
  assert.matches("^[^:]*50%-schema_spec%.lua:%d+: ", err)
  return (err:gsub("^[^:]*:%d+: ", ""))
end

describe("config checks (dsh.schema)", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("finds the closest known key: case, one typo, a swap, a missing letter; none when far", function()
    local known = { "timeoutMs", "maxTimeoutMs", "onDispose", "onTimeout", "cwd" }
    assert.equal("onDispose", schema.closest("ondispose", known))
    assert.equal("timeoutMs", schema.closest("timoutMs", known))
    assert.equal("timeoutMs", schema.closest("tiemoutMs", known))
    assert.equal("maxTimeoutMs", schema.closest("maxTimeout", known))
    assert.equal("cwd", schema.closest("cdw", known))
    assert.is_nil(schema.closest("network", known))
    assert.is_nil(schema.closest("x", {}))
    assert.equal(0, schema.distance("ABC", "abc"))
    assert.equal(1, schema.distance("ab", "ba"))
    assert.equal(3, schema.distance("", "abc"))
  end)

  it("raises for an unknown key with the closest one, or the known keys, or none taken", function()
    local function raised(cfg, known)
      local ok, err = pcall(schema.keys, "demo", cfg, known)
      assert.is_false(ok)
      return (tostring(err):gsub("^[^:]*:%d+: ", ""))
    end
    assert.equal('demo: unknown config key "graceMS" (did you mean "graceMs"?)',
      raised({ graceMs = 1, graceMS = 2 }, { "graceMs", "cwd" }))
    assert.equal('demo: unknown config key "zzz" (known keys: cwd, graceMs)',
      raised({ zzz = 1 }, { graceMs = true, cwd = true }))
    assert.equal('demo: unknown config key "a" (it takes no config)', raised({ a = 1 }, {}))
    assert.equal("demo: config keys must be strings, got number 1", raised({ "x" }, { "cwd" }))
    assert.equal("demo: config must be a table, got string", raised("cwd", { "cwd" }))
    local cfg = { cwd = "/" }
    assert.equal(cfg, schema.keys("demo", cfg, { "cwd" }))
  end)

  it("checks values with one wording", function()
    local function raised(fn, ...)
      local ok, err = pcall(fn, "demo", ...)
      assert.is_false(ok)
      return (tostring(err):gsub("^[^:]*:%d+: ", ""))
    end
    assert.equal(5, schema.integer("demo", {}, "n", 5, 1, 10))
    assert.equal("demo: n must be an integer in [1, 10]", raised(schema.integer, { n = 1.5 }, "n", 5, 1, 10))
    assert.equal("demo: n must be an integer in [1, 10]", raised(schema.integer, { n = 11 }, "n", 5, 1, 10))
    assert.equal("demo: x must be a number in [0.5, 2]", raised(schema.number, { x = 0 / 0 }, "x", 1, 0.5, 2))
    assert.equal('demo: mode must be "a", "b" or "c"', raised(schema.one_of, { mode = "d" }, "mode", "a",
      { "a", "b", "c" }))
    assert.equal("demo: p must be an absolute path", raised(schema.path, { p = "rel" }, "p"))
    assert.equal("demo: m must map strings to strings", raised(schema.string_map, { m = { 1 } }, "m"))
    assert.same({}, schema.string_map("demo", {}, "m"))
  end)

  for _, case in ipairs(PROVIDERS) do
    local provider, name, cfg, near = case[1], case[2], case[3], case[4]
    local key = next(cfg)
    it(provider .. " refuses the unknown key " .. key .. " at ctx:use", function()
      local msg = use_error(provider, cfg)
      if near then
        assert.equal(string.format('%s: unknown config key "%s" (did you mean "%s"?)', name, key, near), msg)
      else
        assert.equal(string.format('%s: unknown config key "%s" (it takes no config)', name, key), msg)
      end
    end)
  end

  it("covers every provider in providers/ and keeps each one's messages for known keys", function()
    local covered = {}
    for _, case in ipairs(PROVIDERS) do covered[case[1]] = true end
    local modules = provider_modules()
    assert.is_true(#modules >= 12, "found " .. #modules .. " providers")
    for _, m in ipairs(modules) do
      assert.is_true(covered[m] == true, m .. " has no unknown-key case here")
    end
    -- a known key with a bad value still says what each provider always said
    assert.equal("pty-e2b: rows must be a positive safe integer", use_error("dsh.providers.pty_e2b", { rows = 0 }))
    assert.equal("pty-local: cwd must be an absolute path", use_error("dsh.providers.pty_local", { cwd = "rel" }))
    assert.equal("lsp-e2b: servers must contain at least one server", use_error("dsh.providers.lsp_e2b", {}))
    assert.equal('lsp-local: servers.c: unknown key "comand" (did you mean "command"?)',
      use_error("dsh.providers.lsp_local", { servers = { c = { comand = "clangd", extensionToLanguage = {} } } }))
    assert.equal("code-runtime-e2b: config.luajit must be an absolute path",
      use_error("dsh.providers.code_runtime_e2b", { luajit = "luajit" }))
    assert.equal("code-runtime-local: config.computeMs must be a positive safe integer",
      use_error("dsh.providers.code_runtime_local", { computeMs = 0 }))
  end)

  it("dsh-e2b takes the local sandbox limits for the local backend only, within dsh.sandbox's bounds", function()
    local e2b = require "dsh.providers.e2b.schema"
    local cfg = e2b.validate { maxProcesses = 64, memoryMb = 256, cpus = 0.5 }
    assert.same({ 64, 256, 0.5 }, { cfg.maxProcesses, cfg.memoryMb, cfg.cpus })
    local d = e2b.validate {}
    assert.same({}, { d.maxProcesses, d.memoryMb, d.cpus }) -- the sandbox's own defaults apply
    assert.equal("dsh-e2b: maxProcesses must be an integer in [16, 4194304]",
      use_error("dsh.providers.e2b", { maxProcesses = 8 }))
    assert.equal("dsh-e2b: memoryMb must be an integer in [64, 1099511627776]",
      use_error("dsh.providers.e2b", { memoryMb = 10.5 }))
    assert.equal("dsh-e2b: cpus must be a number in [0.01, 4096]", use_error("dsh.providers.e2b", { cpus = 0 }))
    assert.equal("dsh-e2b: memoryMb applies only to the local backend (an E2B sandbox's size is its template's)",
      use_error("dsh.providers.e2b", { backend = "cloud", apiKey = "k", memoryMb = 256 }))
  end)

  it("has one onTimeout default everywhere: pause", function()
    assert.equal("pause", require("dsh.providers.e2b.schema").DEFAULTS.onTimeout)
    assert.equal("pause", require("dsh.sandbox").DEFAULT_ON_TIMEOUT)
    assert.equal("pause", require("dsh.providers.e2b.schema").validate({}).onTimeout)
  end)
end)
