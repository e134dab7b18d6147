-- The overlay at work (providers/overlay): one ctx:use composes a world on a
-- real local sandbox (or on this machine with backend "host"); a section
-- left out leaves its service off ctx while the rest works; disposal
-- terminates and awaits every provider's process groups before ctx.e2b lets
-- the sandbox go, so with onDispose "leave" nothing any provider started is
-- left in it, and with "kill" nothing of it is left on the host; a reconnect
-- by sandboxId finds the files and nothing else (docs/overlay.md).
local async = require "dsh.async"
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local helpers = require "helpers"
local O = require "helpers.overlay"
local sandbox = require "dsh.sandbox"
local sys = require "dsh.core.sysutil"

local AGENT = { id = "overlay-spec" }
local C_SOURCE, CLANGD, start = O.C_SOURCE, O.CLANGD, O.start

-- Run fn(ctx) on a started overlay; dispose it afterwards, also when fn fails.
local function with_overlay(cfg, fn)
  local ctx = start(cfg)
  local ok, err = xpcall(fn, debug.traceback, ctx)
  local dok, derr = ctx:dispose()
  if not ok then error(err, 0) end
  assert(dok, "dispose failed: " .. tostring(derr))
end

local function send(ctx, id, text) return O.send(ctx, AGENT, id, text) end

-- The sandbox's processes (args), but for its daemon and the ps that lists them.
local function sandbox_processes(id)
  local sb = assert(sandbox.connect(id))
  local r = assert(assert(sb.envd:start { cmd = "ps", args = { "-eo", "args=" } }):wait())
  sb:close()
  return O.processes(r.stdout)
end

describe("the overlay", function()
  D.use_state()

  it("composes one world on a local sandbox: fs, Bash, a terminal, clangd and Code Mode share its cwd", function()
    helpers.run(function()
      with_overlay({ e2b = { onTimeout = "kill" }, lsp = { servers = CLANGD },
        codeRuntime = { luaLibraries = { "io" } } }, function(ctx)
        assert.equal("local", ctx.e2b.backend)
        assert.equal("/home/user/workspace", ctx.e2b.cwd)
        assert(ctx.fs:writeText("world.c", C_SOURCE))
        assert.equal(C_SOURCE, assert(ctx.bash:run { command = "cat world.c" }).stdout.text)
        local s = assert(ctx.pty:spawn(AGENT, { type = "shell" }))
        local r = send(ctx, s.id, "wc -c < world.c; pwd")
        assert.truthy(r.viewport:find(#C_SOURCE .. "\n/home/user/workspace\n", 1, true), r.viewport)
        local code = ctx.codeRuntime:run { program = 'local f = io.open("world.c") return f:read("*a")' }
        assert.same({ logs = {}, value = C_SOURCE }, code)
        local d = assert(ctx.lsp:query { operation = "goToDefinition", filePath = "world.c",
          position = { line = 1, character = 25 }, workspaceRoot = ctx.e2b.cwd })
        assert.same({ start = { line = 0, character = 11 }, ["end"] = { line = 0, character = 16 } },
          d.locations[1].range)
      end)
    end)
  end)

  for _, case in ipairs {
    { section = "fs", key = "fs" },
    { section = "bash", key = "bash" },
    { section = "pty", key = "pty" },
    { section = "codeRuntime", key = "codeRuntime" },
  } do
    it("leaves " .. case.section .. " out when it is false; the rest works", function()
      helpers.run(function()
        with_overlay({ [case.section] = false }, function(ctx)
          assert.is_nil(ctx[case.key])
          assert.is_nil(ctx.lsp) -- no servers named: no ctx.lsp
          assert.is_table(ctx.e2b)
          assert.is_table(ctx.subprocess)
          if ctx.fs then assert(ctx.fs:writeText("kept.txt", "kept\n")) end
          if ctx.bash then
            local r = assert(ctx.bash:run { command = "echo bash; cat kept.txt 2>/dev/null || echo no-fs" })
            assert.equal(ctx.fs and "bash\nkept\n" or "bash\nno-fs\n", r.stdout.text)
          end
          if ctx.pty then
            local s = assert(ctx.pty:spawn(AGENT, { type = "shell" }))
            assert.truthy(send(ctx, s.id, "echo from-the-pty").viewport:find("\nfrom%-the%-pty\n"))
          end
          if ctx.codeRuntime then
            assert.same({ logs = {}, value = 42 }, ctx.codeRuntime:run { program = "return 42" })
          end
        end)
      end)
    end)
  end

  it("leaves subprocess out with everything that needs it; files still work", function()
    helpers.run(function()
      with_overlay({ subprocess = false, bash = false, pty = false, codeRuntime = false }, function(ctx)
        for _, key in ipairs { "subprocess", "bash", "pty", "lsp", "codeRuntime" } do assert.is_nil(ctx[key], key) end
        assert(ctx.fs:writeText("only-files.txt", "files\n"))
        assert.equal("files\n", assert(ctx.fs:readText("only-files.txt")).text)
      end)
    end)
  end)

  it("on the host (backend \"host\"): no sandbox, the same capabilities on this machine", function()
    local dir = helpers.tmpdir()
    helpers.run(function()
      with_overlay({ backend = "host", fs = { root = dir }, subprocess = { cwd = dir }, lsp = { servers = CLANGD },
        pty = { idleSilenceMs = 500 } }, function(ctx)
        assert.is_nil(ctx.e2b)
        assert.same({}, sandbox.list())
        assert(ctx.fs:writeText("host.c", C_SOURCE))
        assert.equal(C_SOURCE, helpers.read_file(dir .. "/host.c")) -- a file of this machine
        assert.equal(dir .. "\n" .. #C_SOURCE .. "\n",
          assert(ctx.bash:run { command = "pwd; wc -c < host.c" }).stdout.text)
        local s = assert(ctx.pty:spawn(AGENT, { type = "shell", cwd = dir }))
        assert.truthy(send(ctx, s.id, "cat host.c").viewport:find("static int twice", 1, true))
        local r = ctx.codeRuntime:run { program = "return 6 * 7" }
        assert.same({ logs = {}, value = 42 }, r)
        local d = assert(ctx.lsp:query { operation = "goToDefinition", filePath = dir .. "/host.c",
          position = { line = 1, character = 25 }, workspaceRoot = dir })
        assert.same({ line = 0, character = 11 }, d.locations[1].range.start)
      end)
    end)
    helpers.rm_rf(dir)
  end)

  -- Pids below this process whose command line contains s (not other tests' on this machine).
  local function ours(s)
    local out = {}
    for _, p in ipairs(E.tree(helpers.pid())) do
      if (sys.read_file("/proc/" .. p .. "/cmdline") or ""):find(s, 1, true) then out[#out + 1] = p end
    end
    return out
  end

  it("on the host: disposal ends every provider's work, a TERM-immune terminal job included", function()
    local dir = helpers.tmpdir()
    helpers.run(function()
      local ctx = start { backend = "host", fs = { root = dir }, subprocess = { cwd = dir },
        lsp = { servers = CLANGD }, pty = { idleSilenceMs = 500, disposeGraceMs = 300 } }
      local run, job
      local napping = 0 -- binding calls still running here
      local ok, err = xpcall(function()
        assert(ctx.bash:start { command = "exec -a dsh-host-bash-job sleep 312" })
        local s = assert(ctx.pty:spawn(AGENT, { type = "shell", cwd = dir }))
        local r = send(ctx, s.id, "(trap '' TERM HUP; exec -a dsh-host-pty-job sleep 313) & echo job=$!")
        job = assert(tonumber(r.viewport:match("job=(%d+)")))
        assert(ctx.fs:writeText("busy.c", C_SOURCE))
        assert(ctx.lsp:query { operation = "hover", filePath = dir .. "/busy.c",
          position = { line = 0, character = 12 }, workspaceRoot = dir })
        run = async.run(function()
          return ctx.codeRuntime:run { program = "while true do bridge.nap() end", bindings = { { global = "bridge",
            functions = { nap = function()
              napping = napping + 1
              async.sleep(20)
              napping = napping - 1
              return true
            end } } } }
        end)
        assert.is_truthy(helpers.eventually(function()
          return #ours("dsh-host-bash-job") == 1 and helpers.pid_alive(job) and #ours("code-runtime-") > 0
            and #ours("clangd") > 0
        end))
      end, debug.traceback)
      local started = E.tree(helpers.pid()) -- every process below this one, the job's shell's included
      assert(ctx:dispose())
      assert(ok, err)
      assert.same({ kind = "abort", message = "runtime disposed" }, run:await().error)
      -- the binding (this test's host code) may be mid-nap when the run is aborted: let it end
      assert.is_truthy(helpers.eventually(function() return napping == 0 end))
      assert.is_false(helpers.pid_alive(job))
      table.remove(started, 1) -- this process
      assert.same({}, E.survivors(started, 0))
    end)
    helpers.rm_rf(dir)
  end)

  -- Work in flight in every provider: a command, a Bash background job, a
  -- terminal with a TERM-immune job, a language server, a code run.
  local function busy(ctx)
    local h = assert(ctx.subprocess:spawn { argv = { "bash", "-c", "trap '' TERM; exec sleep 301" }, graceMs = 300 })
    assert(ctx.bash:start { command = "sleep 302" })
    local s = assert(ctx.pty:spawn(AGENT, { type = "shell" }))
    send(ctx, s.id, "(trap '' TERM HUP; exec -a dsh-overlay-job sleep 303) &")
    assert(ctx.fs:writeText("busy.c", C_SOURCE))
    assert(ctx.lsp:query { operation = "hover", filePath = "busy.c", position = { line = 0, character = 12 },
      workspaceRoot = ctx.e2b.cwd })
    local run = async.run(function()
      return ctx.codeRuntime:run { program = "while true do bridge.nap() end", bindings = { { global = "bridge",
        functions = { nap = function() async.sleep(20) return true end } } } }
    end)
    assert.is_truthy(helpers.eventually(function()
      local ps = table.concat(sandbox_processes(ctx.e2b:sandboxId()), "\n")
      return h.pid > 0 and ps:find("sleep 302", 1, true) and ps:find("dsh-overlay-job", 1, true)
        and ps:find("clangd", 1, true) and ps:find("code-runtime-", 1, true)
    end))
    return run
  end

  it("disposes every provider's groups before it leaves the sandbox: nothing any provider started is left", function()
    helpers.run(function()
      local ctx = start { e2b = { onDispose = "leave" }, lsp = { servers = CLANGD } }
      local id = assert(ctx.e2b:sandboxId())
      local ok, err = xpcall(busy, debug.traceback, ctx)
      local run = ok and err
      assert(ctx:dispose())
      assert(ok, err)
      assert.same({ kind = "abort", message = "runtime disposed" }, run:await().error)
      assert.is_true(sandbox.exists(id)) -- left, as configured
      assert.same({}, sandbox_processes(id))
      assert(sandbox.kill(id))
    end)
  end)

  it("with onDispose \"kill\": no process of the sandbox is left on the host, and no fd here", function()
    helpers.run(function()
      local ctx = start { lsp = { servers = CLANGD } }
      local id = assert(ctx.e2b:sandboxId())
      local ok, err = xpcall(busy, debug.traceback, ctx)
      local pids = E.local_pids(id)
      assert(ctx:dispose())
      assert(ok, err)
      assert.is_true(#pids >= 5)
      assert.same({}, E.survivors(pids, 0)) -- gone when dispose returned
      assert.is_false(sandbox.exists(id))
    end)
    -- and D.use_state's assert_clean: no fd, dsh object or host process group left here
  end)

  it("reconnects by sandboxId to the files only: no terminal, no background job, no process of before", function()
    helpers.run(function()
      local ctx = start { e2b = { onDispose = "pause" } }
      local id = assert(ctx.e2b:sandboxId())
      assert(ctx.fs:writeText("kept.txt", "kept across the pause\n"))
      local job = assert(ctx.bash:start { command = "sleep 304" })
      local s = assert(ctx.pty:spawn(AGENT, { type = "shell" }))
      send(ctx, s.id, "echo before > from-pty.txt")
      assert(ctx:dispose())
      assert.equal("paused", sandbox.list()[1].state)

      -- (no code runtime: its setup would run commands of its own while we look)
      local again = start { e2b = { sandboxId = id, onDispose = "kill" }, codeRuntime = false }
      local fok, ferr = xpcall(function()
        assert.is_false(again.e2b.created)
        assert.equal("kept across the pause\n", assert(again.fs:readText("kept.txt")).text)
        assert.equal("before\n", assert(again.fs:readText("from-pty.txt")).text)
        assert.same({}, again.pty:list(AGENT))
        assert.same({}, again.bash:list())
        local r, rerr = again.bash:readOutput(job.id)
        assert.is_nil(r)
        assert.equal("BASH_UNKNOWN_PROCESS", rerr.code)
        assert.same({}, sandbox_processes(id))
      end, debug.traceback)
      assert(again:dispose())
      assert(fok, ferr)
      assert.is_false(sandbox.exists(id))
    end)
  end)
end)
