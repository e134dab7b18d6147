local context = require "dsh.context"
local async = require "dsh.async"
local errors = require "dsh.errors"
local helpers = require "helpers"

local function provider(name, provides, inject, setup)
  return { name = name, provides = provides, inject = inject, setup = setup }
end

describe("dsh.context", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("sets up providers after the services they inject and publishes them", function()
    local log = {}
    local ctx = context.new()
    ctx:use(provider("fs", "fs", { "e2b" }, function(scope)
      log[#log + 1] = "fs sees " .. scope.ctx.e2b.id
      return { kind = "fs" }
    end))
    ctx:use(provider("e2b", "e2b", {}, function()
      async.sleep(5)
      log[#log + 1] = "e2b"
      return { id = "sb1" }
    end))
    assert.is_true(ctx:start())
    assert.same({ "e2b", "fs sees sb1" }, log)
    assert.equal("fs", ctx.fs.kind)
    assert.equal(ctx.fs, ctx:get("fs"))
    ctx:dispose()
  end)

  it("refuses a second implementation of a key", function()
    local ctx = context.new()
    ctx:use(provider("fs_local", "fs", {}, function() return {} end))
    local ok, err = pcall(ctx.use, ctx, provider("fs_e2b", "fs", {}, function() return {} end))
    assert.is_false(ok)
    assert.matches('service "fs" has been registered %(by fs_local%); cannot register fs_e2b', err)
    ctx:dispose()
  end)

  it("does not publish a failed service, rolls back its cleanups in reverse, and skips dependents", function()
    local log = {}
    local ctx = context.new()
    ctx:use(provider("e2b", "e2b", {}, function(scope)
      scope:on_dispose(function() log[#log + 1] = "undo sandbox" end)
      scope:on_dispose(function() log[#log + 1] = "undo dir" end)
      return nil, errors.new("E2B_SETUP", "makeDir failed")
    end))
    local dependent_ran = false
    ctx:use(provider("fs", "fs", { "e2b" }, function() dependent_ran = true return {} end))
    local ok, err = ctx:start()
    assert.is_nil(ok)
    assert.equal("E2B_SETUP", err.code)
    assert.same({ "undo dir", "undo sandbox" }, log)
    assert.is_nil(ctx:get("e2b"))
    assert.has_error(function() return ctx.e2b end,
      "dsh.context: ctx.e2b: not available: ctx:start() failed (E2B_SETUP: makeDir failed)")
    assert.is_false(dependent_ran)
    ctx:dispose()
  end)

  it("rolls back a failed start: every provider it set up, dependents first, told why", function()
    local log = {}
    local function logged(name, provides, inject, fail_with)
      return provider(name, provides, inject, function(scope)
        scope:on_dispose(function(why) log[#log + 1] = name .. " " .. why end)
        if fail_with then return nil, errors.new(fail_with, name .. " failed") end
        return { name = name }
      end)
    end
    local ctx = context.new()
    ctx:use(logged("e2b", "e2b", {}))
    assert.is_true(ctx:start()) -- committed: a later failed start leaves it
    ctx:use(logged("fs", "fs", { "e2b" }))
    ctx:use(logged("sub", "subprocess", { "e2b" }))
    ctx:use(logged("bash", "bash", { "subprocess" }))
    ctx:use(logged("lsp", "lsp", { "subprocess" }, "LSP_SERVER_FAILED"))
    local ok, err = ctx:start()
    assert.is_nil(ok)
    assert.same({ "LSP_SERVER_FAILED", "lsp failed" }, { err.code, err.message })
    -- the failed one undid itself; then the others, in reverse order of setup
    assert.same({ "lsp rollback", "bash rollback", "sub rollback", "fs rollback" }, log)
    assert.equal("e2b", ctx.e2b.name) -- set up by the start before
    for _, key in ipairs { "fs", "subprocess", "bash", "lsp" } do
      assert.is_nil(ctx:get(key))
      assert.has_error(function() return ctx[key] end,
        "dsh.context: ctx." .. key .. ": not available: ctx:start() failed (LSP_SERVER_FAILED: lsp failed)")
    end
    local again, aerr = ctx:start() -- the same answer, nothing set up again
    assert.is_nil(again)
    assert.equal(err, aerr)
    log = {}
    assert.is_true(ctx:dispose())
    assert.same({ "e2b dispose" }, log)
  end)

  it("rolls back a start that fails on a missing service, and keeps the rollback's failures", function()
    local log = {}
    local ctx = context.new()
    ctx:use(provider("e2b", "e2b", {}, function(scope)
      scope:on_dispose(function(why)
        log[#log + 1] = why
        return nil, errors.new("E2B_SETUP", "kill failed")
      end)
      return {}
    end))
    ctx:use(provider("lsp", "lsp", { "subprocess" }, function() return {} end))
    local ok, err = ctx:start()
    assert.is_nil(ok)
    assert.same({ "rollback" }, log)
    assert.equal("SETUP_FAILED", err.code)
    assert.same({ "DEPENDENCY_MISSING", "E2B_SETUP" }, { err.errors[1].code, err.errors[2].code })
    assert.matches('^dsh.context: start failed and so did its rollback: 2 failures: lsp: injects "subprocess"',
      err.message)
    assert.is_true(ctx:dispose()) -- nothing left to dispose
    assert.same({ "rollback" }, log)
  end)

  it("raises for a service used before start(), naming start(); get and unknown keys give nil", function()
    local ctx = context.new()
    ctx:use(provider("dsh-bash", "bash", {}, function() return { run = true } end))
    local ok, msg = pcall(function() return ctx.bash end)
    assert.is_false(ok)
    assert.matches("05%-context_spec%.lua:%d+: dsh%.context: ctx%.bash: not set up yet %(by dsh%-bash%): "
      .. "call ctx:start%(%) first$", msg)
    assert.is_nil(ctx:get("bash"))
    assert.is_nil(ctx.fs) -- nobody offers it
    assert.is_true(ctx:start())
    assert.is_true(ctx.bash.run)
    assert.is_true(ctx:dispose())
  end)

  it("turns a raised setup error into a failure and still rolls back", function()
    local undone = false
    local ctx = context.new()
    ctx:use(provider("p", "p", {}, function(scope)
      scope:on_dispose(function() undone = true end)
      error("setup exploded")
    end))
    local ok, err = ctx:start()
    assert.is_nil(ok)
    assert.equal("SETUP_FAILED", err.code)
    assert.matches("setup exploded", err.message)
    assert.is_true(undone)
    ctx:dispose()
  end)

  it("fails a provider whose injected service nobody offers, and a cycle, without hanging", function()
    local ctx = context.new()
    ctx:use(provider("lsp", "lsp", { "subprocess" }, function() return {} end))
    local ok, err = ctx:start()
    assert.is_nil(ok)
    assert.equal("DEPENDENCY_MISSING", err.code)
    assert.matches('injects "subprocess"', err.message)
    ctx:dispose()
    local ctx2 = context.new()
    ctx2:use(provider("a", "a", { "b" }, function() return {} end))
    ctx2:use(provider("b", "b", { "a" }, function() return {} end))
    local ok2, err2 = ctx2:start()
    assert.is_nil(ok2)
    assert.equal("DEPENDENCY_CYCLE", err2.code)
    ctx2:dispose()
  end)

  it("disposes in reverse order, dependents first, waiting for each to finish", function()
    local log = {}
    local ctx = context.new()
    ctx:use(provider("e2b", "e2b", {}, function(scope)
      scope:on_dispose(function() async.sleep(5) log[#log + 1] = "e2b gone" end)
      return {}
    end))
    ctx:use(provider("subprocess", "subprocess", { "e2b" }, function(scope)
      scope:on_dispose(function() async.sleep(20) log[#log + 1] = "subprocess gone" end)
      return {}
    end))
    ctx:use(provider("bash", "bash", { "subprocess" }, function(scope)
      scope:on_dispose(function() log[#log + 1] = "bash gone" end)
      return {}
    end))
    assert.is_true(ctx:start())
    assert.is_true(ctx:dispose())
    assert.same({ "bash gone", "subprocess gone", "e2b gone" }, log)
    assert.has_error(function() return ctx.e2b end,
      "dsh.context: ctx.e2b: DISPOSED: the context was disposed; its services went with it")
    assert.is_true(ctx:dispose()) -- idempotent
  end)

  it("aborts pending setups on dispose and waits for them", function()
    local saw_abort = false
    local ctx = context.new()
    ctx:use(provider("slow", "slow", {}, function(scope)
      local ok = async.sleep(10000, scope.signal)
      saw_abort = ok == nil
      return {}
    end))
    local starting = async.run(function() return ctx:start() end)
    async.sleep(5)
    assert.is_true(ctx:dispose())
    assert.is_true(saw_abort)
    local ok, err = starting:await()
    assert.is_nil(ok)
    assert.equal("DISPOSED", err.code)
  end)

  it("after dispose: start returns DISPOSED, ctx.<key> and get raise DISPOSED, naming the key", function()
    local ctx = context.new()
    ctx:use(provider("svc", "svc", {}, function() return {} end))
    assert.is_true(ctx:start())
    assert.is_table(ctx.svc)
    assert.is_nil(ctx.other) -- before dispose a key nobody provides is nil
    assert.is_true(ctx:dispose())
    local ok, err = ctx:start()
    assert.is_nil(ok)
    assert.same({ "DISPOSED", "dsh.context: start: the context was disposed" }, { err.code, err.message })
    for _, key in ipairs { "svc", "other" } do
      local okk, msg = pcall(function() return ctx[key] end)
      assert.is_false(okk)
      assert.matches("05%-context_spec%.lua:%d+: dsh%.context: ctx%." .. key
        .. ": DISPOSED: the context was disposed; its services went with it$", msg)
    end
    assert.has_error(function() ctx:get("svc") end,
      "dsh.context: ctx.svc: DISPOSED: the context was disposed; its services went with it")
    assert.is_true(ctx:dispose()) -- methods still work
  end)

  it("while disposing, a provider still reaches the services it injects, not those already gone", function()
    local ctx = context.new()
    local seen = {}
    ctx:use(provider("registry", "registry", {}, function() return { name = "registry" } end))
    ctx:use(provider("backend", "backend", { "registry" }, function(scope)
      scope:on_dispose(function()
        seen.registry = ctx.registry and ctx.registry.name
        seen.backend = select(2, pcall(function() return ctx.backend end))
      end)
      return {}
    end))
    assert.is_true(ctx:start())
    assert.is_true(ctx:dispose())
    assert.equal("registry", seen.registry)
    assert.matches("ctx%.backend: DISPOSED: the context is disposing; its services went with it$", seen.backend)
  end)

  it("reports a cleanup's failure (returned or raised) and runs every cleanup", function()
    local ran = {}
    local ctx = context.new()
    ctx:use(provider("p", "p", {}, function(scope)
      scope:on_dispose(function() ran[#ran + 1] = 1 end)
      scope:on_dispose(function() error("cleanup broke") end)
      return {}
    end))
    assert.is_true(ctx:start())
    local ok, err = ctx:dispose()
    assert.is_nil(ok)
    assert.equal("DISPOSE_FAILED", err.code)
    assert.matches("cleanup broke", err.message)
    assert.same({ 1 }, ran)
    local ctx2 = context.new()
    ctx2:use(provider("q", "q", {}, function(scope)
      scope:on_dispose(function() return nil, errors.new("SANDBOX_GONE", "kill failed") end)
      return {}
    end))
    assert.is_true(ctx2:start())
    ok, err = ctx2:dispose()
    assert.is_nil(ok)
    assert.same({ "SANDBOX_GONE", "kill failed" }, { err.code, err.message })
  end)

  it("keeps every cleanup failure, of every provider, in one error", function()
    local ran = {}
    local ctx = context.new()
    ctx:use(provider("e2b", "e2b", {}, function(scope)
      scope:on_dispose(function() ran[#ran + 1] = "e2b" return nil, errors.new("E2B_KILL", "kill failed") end)
      return {}
    end))
    ctx:use(provider("sub", "subprocess", { "e2b" }, function(scope)
      scope:on_dispose(function() ran[#ran + 1] = "sub 1" error("first broke") end)
      scope:on_dispose(function() ran[#ran + 1] = "sub 2" return nil, errors.new("LEFT", "a group survived") end)
      return {}
    end))
    assert.is_true(ctx:start())
    local ok, err = ctx:dispose()
    assert.is_nil(ok)
    assert.same({ "sub 2", "sub 1", "e2b" }, ran)
    assert.equal("DISPOSE_FAILED", err.code)
    assert.equal(3, #err.errors)
    assert.same({ "LEFT", "DISPOSE_FAILED", "E2B_KILL" },
      { err.errors[1].code, err.errors[2].code, err.errors[3].code })
    assert.matches("^dsh.context: dispose: 3 failures: a group survived; .*first broke; kill failed$", err.message)
    local again_ok, again = ctx:dispose() -- idempotent: the same answer
    assert.is_nil(again_ok)
    assert.equal(err, again)
  end)

  it("keeps the rollback's failures beside the setup's", function()
    local ctx = context.new()
    ctx:use(provider("e2b", "e2b", {}, function(scope)
      scope:on_dispose(function() return nil, errors.new("E2B_KILL", "kill failed") end)
      return nil, errors.new("E2B_SETUP", "makeDir failed")
    end))
    local ok, err = ctx:start()
    assert.is_nil(ok)
    assert.equal("SETUP_FAILED", err.code)
    assert.same({ "E2B_SETUP", "E2B_KILL" }, { err.errors[1].code, err.errors[2].code })
    assert.equal("e2b: setup failed and so did its rollback: 2 failures: makeDir failed; kill failed", err.message)
    ctx:dispose()
  end)

  it("does not let callers assign services directly", function()
    local ctx = context.new()
    assert.has_error(function() ctx.fs = {} end,
      "dsh.context: services are published by providers; cannot assign ctx.fs")
    ctx:dispose()
  end)
end)
