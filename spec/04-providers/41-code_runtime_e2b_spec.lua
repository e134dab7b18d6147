-- The code-runtime contract in a real local sandbox: code-runtime-e2b over
-- subprocess-e2b on dshd in bubblewrap, the runners uploaded to
-- ctx.e2b.runtimeRoot, TypeScript on the Node the sandbox sees at /opt/dsh/node.
local D = require "helpers.dshd"
local helpers = require "helpers"
local node = require "dsh.node"

local provider = require "dsh.providers.code_runtime_e2b"
local E2B, SUB = require "dsh.providers.e2b", require "dsh.providers.subprocess_e2b"

D.isolated_state()

require("helpers.code_runtime_contract")("code-runtime-e2b", {
  prefix = "code-runtime-e2b", label = "E2B runtime", provider = provider,
  typescript = node.dir() ~= nil,
  new = function(cfg)
    local ctx = helpers.start_context { { E2B, {} }, SUB, { provider, cfg } }
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
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("needs subprocess-e2b as ctx.subprocess", function()
    helpers.run(function()
      local ctx = require("dsh.context").new()
      ctx:use(E2B, {})
      ctx:use(require "dsh.providers.subprocess_local")
      ctx:use(provider, {})
      local ok, err = ctx:start()
      assert.is_nil(ok)
      assert.equal("code-runtime-e2b requires subprocess-e2b as ctx.subprocess", err.message)
      assert(ctx:dispose())
    end)
  end)

  it("uploads the runner into runtimeRoot with mode 600 and runs it from there", function()
    helpers.run(function() helpers.with_context({ { E2B, {} }, SUB, { provider, {} } }, function(ctx)
      local r = ctx.codeRuntime:run { program = "return 1" }
      assert.equal(1, r.value)
      local out = assert(ctx.e2b:exec { "/bin/bash", "-c",
        "stat -c '%a %n' " .. ctx.e2b.runtimeRoot .. "/code-runtime-*" })
      for _, name in ipairs { "runner.mjs", "supervisor.lua", "wire.lua", "worker.lua" } do
        assert.truthy(out.stdout:find("600 " .. ctx.e2b.runtimeRoot .. "/code-runtime-" .. name, 1, true), out.stdout)
      end
      assert.equal("container", ctx.codeRuntime.isolation)
    end) end)
  end)
end)

-- A run in a sandbox that runs as its own uid under tight limits
-- (maxProcesses 64, memoryMb 256): Node's threads fit; a fork bomb, and a
-- Lua or Node worker beyond the sandbox's memory, end with their run,
-- nothing is left, and the next run works.
describe("code-runtime-e2b within a sandbox's limits", function()
  local async = require "dsh.async"
  local sandbox = require "dsh.sandbox"
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  -- Each run here ends in seconds; the wall clock (two minutes unless cfg
  -- says) is only the ceiling that turns a hang into a failure.
  local function with_limited(cfg, fn)
    helpers.run(function()
      local sb = assert(sandbox.create { maxProcesses = 64, memoryMb = 256, network = false })
      local id = sb.id
      sb:close()
      if cfg.maxWallMs == nil then cfg.maxWallMs = 120000 end
      helpers.with_context({ { E2B, { sandboxId = id } }, SUB, { provider, cfg } }, fn)
      assert.is_false(sandbox.exists(id))
    end)
  end

  local function ps(ctx)
    return assert(ctx.e2b:exec { "/bin/bash", "-c", "ps -eo args=" }).stdout
  end

  if node.dir() then
    it("runs TypeScript in a Node worker thread within maxProcesses 64", function()
      with_limited({}, function(ctx)
        local r = ctx.codeRuntime:run { language = "typescript", program = [[
          const { isMainThread } = process.getBuiltinModule("worker_threads");
          const threads: number = process.getBuiltinModule("fs").readdirSync("/proc/self/task").length;
          return [isMainThread, threads > 1];]] }
        assert.same({ logs = {}, value = { false, true } }, r)
      end)
    end)

    it("ends a Node worker beyond the sandbox's memory as worker-exit; the next run works", function()
      with_limited({ maxOldGenerationSizeMb = 4096 }, function(ctx)
        local r = ctx.codeRuntime:run { language = "javascript",
          program = "const keep = []; for (;;) keep.push(new Array(1e6).fill(keep.length));" }
        assert.same({ kind = "worker-exit", message = "remote worker was killed by signal 9 before completing" },
          r.error)
        assert.same({ logs = {}, value = 2 }, ctx.codeRuntime:run { language = "javascript", program = "return 2;" })
        assert.is_nil(ps(ctx):find("code-runtime-", 1, true))
      end)
    end)
  end

  it("bounds a Lua worker by maxMemoryMb, and by the sandbox's memory beyond it", function()
    local grow = "local t = {} for i = 1, 1e8 do t[i] = { i } end return #t"
    with_limited({ maxMemoryMb = 64 }, function(ctx)
      local r = ctx.codeRuntime:run { program = grow }
      assert.equal("exception", r.error.kind)
      assert.truthy(r.error.message:find("not enough memory", 1, true), r.error.message)
    end)
    with_limited({ maxMemoryMb = 4096 }, function(ctx)
      local r = ctx.codeRuntime:run { program = grow }
      assert.same({ kind = "worker-exit", message = "remote worker was killed by signal 9 before completing" },
        r.error)
      assert.same({ logs = {}, value = 2 }, ctx.codeRuntime:run { program = "return 2" })
      assert.is_nil(ps(ctx):find("code-runtime-", 1, true))
    end)
  end)

  it("ends a fork bomb with its run: nothing is left and the next run works", function()
    local E = require "helpers.e2b"
    local sys = require "dsh.core.sysutil"
    local id
    local function sleepers() -- host-side: the bomb's processes, each `sleep 100` once it forked
      local n = 0
      for _, p in ipairs(E.local_pids(id)) do
        if (sys.read_file("/proc/" .. p .. "/cmdline") or ""):find("^sleep%z100%z") then n = n + 1 end
      end
      return n
    end
    with_limited({ luaLibraries = { "os" } }, function(ctx)
      id = assert(ctx.e2b:sandboxId())
      local during
      local nap = { { global = "tools", functions = {
        nap = function() async.sleep(300) during = sleepers() return true end } } }
      -- every process forks two and becomes `sleep 100`; forks fail at maxProcesses
      local r = ctx.codeRuntime:run { bindings = nap,
        program = [[os.execute("f() { f & f & exec sleep 100; }; f 2>/dev/null &") return tools.nap()]] }
      assert.same({ logs = {}, value = true }, r)
      assert.is_true(during >= 10, "the bomb held only " .. tostring(during) .. " processes")
      assert.equal(0, sleepers())
      local left = ps(ctx)
      assert.is_nil(left:find("sleep", 1, true), left)
      assert.is_nil(left:find("code-runtime-", 1, true), left)
      assert.same({ logs = {}, value = 2 }, ctx.codeRuntime:run { program = "return 2" })
    end)
  end)
end)

-- The sandbox's daemon killed during a run (a real fault): the group's end
-- can no longer be learned, so the run says its cleanup failed; the sandbox
-- took the run's processes with it.
describe("code-runtime-e2b when the sandbox's daemon is lost mid-run", function()
  local E = require "helpers.e2b"
  local sys = require "dsh.core.sysutil"
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("reports the runtime lost, and no runner process is left on the host", function()
    helpers.run(function()
      helpers.with_context({ { E2B, {} }, { SUB, { reconnectMs = 300 } }, { provider, {} } }, function(ctx)
        local id = assert(ctx.e2b:sandboxId())
        local runner = {}
        local kill = function()
          for _, p in ipairs(E.local_pids(id)) do
            if (sys.read_file("/proc/" .. p .. "/cmdline") or ""):find("code-runtime-", 1, true) then
              runner[#runner + 1] = p
            end
          end
          assert(sys.kill(assert(D.dshd_pid(id)), 9))
          return true
        end
        local r = ctx.codeRuntime:run { program = "return tools.kill()",
          bindings = { { global = "tools", functions = { kill = kill } } } }
        assert.equal("worker-exit", r.error.kind)
        -- whichever of its pipes noticed first; its group is gone with the
        -- daemon's incarnation, so the cleanup does not fail
        assert.matches("^E2B runtime [%a ]+ failed: ", r.error.message)
        assert.truthy(r.error.message:find("process %d+ is gone: the sandbox stopped when dshd ended"), r.error.message)
        assert.equal(2, #runner) -- the supervisor and the worker were seen
        assert.same({}, E.survivors(runner))
      end)
    end)
  end)
end)

-- Where a local sandbox's /opt/dsh/node comes from: $DSH_NODE_DIR reaches
-- the sandbox's supervisor, and a directory the sandbox's own uid could not
-- reach is left out rather than stopping the sandbox.
describe("the Node a local sandbox sees", function()
  local sys = require "dsh.core.sysutil"
  local uids = require "dsh.sandbox.uids"
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  local saved = os.getenv("DSH_NODE_DIR")
  after_each(function() sys.setenv("DSH_NODE_DIR", saved) end)

  -- A Node directory whose bin/node only says where it came from.
  local function fake_node(dir)
    os.execute("mkdir -p '" .. dir .. "/bin'")
    helpers.write_file(dir .. "/bin/node", "#!/bin/sh\necho node-from-" .. dir:match("[^/]+$") .. "\n")
    assert(sys.chmod(dir .. "/bin/node", "755"))
  end

  local function in_sandbox(cmd)
    return helpers.with_context({ { E2B, {} } }, function(ctx)
      return assert(ctx.e2b:exec { "/bin/bash", "-c", cmd })
    end)
  end

  it("binds $DSH_NODE_DIR read-only at /opt/dsh/node", function()
    local tmp = helpers.tmpdir()
    assert(sys.chmod(tmp, "755"))
    fake_node(tmp .. "/custom")
    sys.setenv("DSH_NODE_DIR", tmp .. "/custom")
    helpers.run(function()
      local r = in_sandbox("/opt/dsh/node/bin/node; touch /opt/dsh/node/x 2>&1; echo $?")
      assert.equal("node-from-custom\n", r.stdout:match("^[^\n]*\n"))
      assert.truthy(r.stdout:find("Read%-only file system\n1\n$"), r.stdout)
    end)
    helpers.rm_rf(tmp)
  end)

  if uids.dedicated() then
    it("leaves out a Node directory the sandbox's own uid cannot reach; the sandbox still starts", function()
      local tmp = helpers.tmpdir() -- 0700: no other uid may enter
      fake_node(tmp .. "/private")
      sys.setenv("DSH_NODE_DIR", tmp .. "/private")
      assert.equal(tmp .. "/private", node.sandbox_source(false))
      assert.is_nil(node.sandbox_source(true))
      assert(sys.chmod(tmp, "711"))
      assert.equal(tmp .. "/private", node.sandbox_source(true))
      assert(sys.chmod(tmp .. "/private/bin/node", "700"))
      assert.is_nil(node.sandbox_source(true))
      assert(sys.chmod(tmp, "700"))
      helpers.run(function()
        local r = in_sandbox("test -e /opt/dsh/node/bin/node; echo $?")
        assert.equal("1\n", r.stdout)
      end)
      helpers.rm_rf(tmp)
    end)
  else
    pending("a sandbox has a uid of its own only on a root host")
  end
end)
