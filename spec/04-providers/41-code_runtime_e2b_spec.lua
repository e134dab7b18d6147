-- The code-runtime contract in a real local sandbox: code-runtime-e2b over
-- subprocess-e2b on dshd in bubblewrap, the runners uploaded to
-- ctx.e2b.runtimeRoot, TypeScript on the Node the sandbox sees at /opt/dsh/node.
local context = require "dsh.context"
local E = require "helpers.e2b"
local node = require "dsh.code_runtime.node"

local provider = require "dsh.providers.code_runtime_e2b"

setup(function() E.isolate_state() end)
teardown(function() E.restore_state() end)

require("helpers.code_runtime_contract")("code-runtime-e2b", {
  prefix = "code-runtime-e2b", label = "E2B runtime", provider = provider,
  typescript = node.dir() ~= nil,
  new = function(cfg)
    local ctx = context.new()
    ctx:use(require "dsh.providers.e2b", {})
    ctx:use(require "dsh.providers.subprocess_e2b")
    ctx:use(provider, cfg)
    local ok, err = ctx:start()
    if not ok then
      ctx:dispose()
      error("cannot start the context: " .. tostring(err), 0)
    end
    local e2b = ctx.e2b
    return {
      ctx = ctx, tag = e2b.runtimeRoot,
      sh = function(cmd)
        local r, rerr = e2b:exec { "/bin/bash", "-c", cmd }
        if not r then return -1, tostring(rerr) end
        return r.exit_code, r.stdout
      end,
      dispose = function() assert(ctx:dispose()) end,
    }
  end,
})

describe("code-runtime-e2b", function()
  local helpers = require "helpers"
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("needs subprocess-e2b as ctx.subprocess", function()
    helpers.run(function()
      local ctx = context.new()
      ctx:use(require "dsh.providers.e2b", {})
      ctx:use(require "dsh.providers.subprocess_local")
      ctx:use(provider, {})
      local ok, err = ctx:start()
      assert.is_nil(ok)
      assert.equal("code-runtime-e2b requires subprocess-e2b as ctx.subprocess", err.message)
      assert(ctx:dispose())
    end)
  end)

  it("uploads the runner into runtimeRoot with mode 600 and runs it from there", function()
    helpers.run(function()
      local ctx = context.new()
      ctx:use(require "dsh.providers.e2b", {})
      ctx:use(require "dsh.providers.subprocess_e2b")
      ctx:use(provider, {})
      assert(ctx:start())
      local r = ctx.codeRuntime:run { program = "return 1" }
      assert.equal(1, r.value)
      local out = assert(ctx.e2b:exec { "/bin/bash", "-c",
        "stat -c '%a %n' " .. ctx.e2b.runtimeRoot .. "/code-runtime-*" })
      for _, name in ipairs { "runner.mjs", "supervisor.lua", "wire.lua", "worker.lua" } do
        assert.truthy(out.stdout:find("600 " .. ctx.e2b.runtimeRoot .. "/code-runtime-" .. name, 1, true), out.stdout)
      end
      assert.equal("container", ctx.codeRuntime.isolation)
      assert(ctx:dispose())
    end)
  end)
end)
