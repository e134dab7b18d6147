-- Calls the sandbox never ends, and dispose's own deadline (issue 18, item
-- 2), on a real local sandbox.
-- A stream that never ends while dshd answers: the command's processes are
-- frozen in a freezer group of the spec's own (below the sandbox's), so no
-- signal ends them and dshd never sends the stream's end. A bash command
-- with a timeout, an exec with timeout_ms and a process asked to terminate
-- each end within their time and 2 s (with SANDBOX_UNRESPONSIVE naming the
-- sandbox and the call, where the host ended it); the sandbox itself answers
-- throughout.
-- Dispose past disposeTimeoutMs (a command that ignores SIGTERM, and a bash
-- grace longer than the deadline): every call still waiting is given up, the
-- disposition (kill, pause; leave leaves it) is applied through the
-- supervisor, and dispose reports it as SANDBOX_UNRESPONSIVE.
local async = require "dsh.async"
local D = require "helpers.dshd"
local F = require "06-faults.support"
local T = require "06-faults.deadlines"
local helpers = require "helpers"
local loop = require "dsh.core.loop"
local sandbox = require "dsh.sandbox"
local sys = require "dsh.core.sysutil"

local function freezer_host()
  return sys.getuid() == 0 and (sys.read_file("/proc/self/cgroup") or ""):find(":freezer:", 1, true) ~= nil
end

-- Wait (eventually) for the file the command touches in the sandbox's /tmp.
local function started(id, name)
  assert(helpers.eventually(function() return sys.exists(D.inside(id, "/tmp/" .. name)) end),
    name .. " never started")
end

local function late_text(id, what, ms)
  return "sandbox " .. id .. " did not end " .. what .. " " .. ms .. " (and 1000 ms more)"
end

describe("a stream the sandbox never ends, while dshd answers", function()
  D.use_state()

  if not freezer_host() then
    pending("needs root and a cgroup v1 freezer hierarchy")
    return
  end

  it("bash with a timeout, exec with timeout_ms, a terminated process: each ends in its time and 2 s", function()
    helpers.run(function()
      local ctx = helpers.start_context {
        { require "dsh.providers.e2b", { onDispose = "kill" } }, require "dsh.providers.subprocess_e2b",
        { require "dsh.providers.bash", { graceMs = 300 } },
      }
      local id = ctx.e2b:sandboxId()
      local envd = ctx.e2b:getSandbox().envd
      local frozen = {}
      local ok, err = xpcall(function()
        -- bash: its timeout stops the command (TERM, then KILL after 300 ms), which does not end
        local t0 = loop.now_ms()
        local run = async.run(function()
          return ctx.bash:run { command = ": never-1; touch /tmp/never-1; sleep 300; true", timeout = 1500 }
        end)
        started(id, "never-1")
        frozen[#frozen + 1] = T.freeze_processes(id, "never-1")
        local r, rerr = run:await()
        local ms = loop.now_ms() - t0
        assert.is_true(ms < 1500 + 300 + T.GRACE_MS, string.format("bash ended after %.0f ms", ms))
        assert.is_nil(r)
        assert.same({ "SANDBOX_UNRESPONSIVE", late_text(id, "POST /process.Process/Start", "within 800 ms of being "
          .. "asked to stop it") }, { rerr.code, rerr.message })
        assert.is_nil(envd:unresponsive()) -- it answered the probe: only the call was given up
        assert.equal(0, assert(ctx.bash:run { command = "true" }).exitCode)

        -- exec: its deadline is dshd's too (Connect-Timeout-Ms), which ends the stream
        -- at it though the kill does not end the command (the host's own deadline,
        -- a second later, is for a daemon that does not: spec/06-faults/11)
        t0 = loop.now_ms()
        local ex = async.run(function()
          return ctx.e2b:exec({ "/bin/sh", "-c", ": never-2; touch /tmp/never-2; sleep 300; true" },
            { timeout_ms = 1000 })
        end)
        started(id, "never-2")
        frozen[#frozen + 1] = T.freeze_processes(id, "never-2")
        r, rerr = ex:await()
        ms = loop.now_ms() - t0
        assert.is_true(ms < 1000 + T.GRACE_MS, string.format("exec ended after %.0f ms", ms))
        assert.is_nil(r)
        assert.same({ "deadline_exceeded", "context deadline exceeded" }, { rerr.code, rerr.message })
        assert.is_nil(envd:unresponsive())

        -- a process asked to terminate (grace 300 ms): its outcome and its group are given up
        local h = assert(ctx.subprocess:spawn { argv = { "/bin/sh", "-c", ": never-3; sleep 300; true" },
          graceMs = 300 })
        assert(helpers.eventually(function() return h.pid > 0 end))
        frozen[#frozen + 1] = T.freeze_processes(id, "never-3")
        t0 = loop.now_ms()
        h:terminate()
        r, rerr = h.done:await()
        ms = loop.now_ms() - t0
        assert.is_true(ms < 300 + T.GRACE_MS, string.format("terminate settled after %.0f ms", ms))
        assert.is_nil(r)
        assert.same({ "SANDBOX_UNRESPONSIVE", late_text(id, "POST /process.Process/Start", "within 800 ms of being "
          .. "asked to stop it") }, { rerr.code, rerr.message })
        local gone, gerr = h:waitForExit()
        assert.same({ "SANDBOX_UNRESPONSIVE" }, { gerr and gerr.code, gone })
        assert.is_nil(envd:unresponsive())
      end, debug.traceback)
      -- thawed, the frozen processes take the SIGKILL they were sent
      for _, f in ipairs(frozen) do f.thaw() end
      if not ok then
        ctx:dispose()
        error(err, 0)
      end
      F.dispose(ctx)
    end)
  end)
end)

-- A context whose dispose outlasts disposeTimeoutMs: a background command
-- that ignores SIGTERM, and bash's default grace (3000 ms) before its KILL.
local function slow_to_dispose(on_dispose)
  local ctx = helpers.start_context {
    { require "dsh.providers.e2b", { onDispose = on_dispose, disposeTimeoutMs = 1000 } },
    require "dsh.providers.subprocess_e2b", require "dsh.providers.bash",
  }
  local id = ctx.e2b:sandboxId()
  assert(ctx.bash:start { command = "trap '' TERM; touch /tmp/ignoring; while :; do sleep 0.05; done" })
  started(id, "ignoring")
  return ctx, id
end

-- dispose within disposeTimeoutMs and 2 s, reporting what was done.
local function dispose_past_deadline(ctx, id, how)
  local t0 = loop.now_ms()
  local ok, err = ctx:dispose()
  local ms = loop.now_ms() - t0
  assert.is_true(ms < 1000 + T.GRACE_MS, string.format("dispose took %.0f ms", ms))
  assert.is_nil(ok)
  local report
  for _, e in ipairs(err.errors or { err }) do
    if e.code == "SANDBOX_UNRESPONSIVE" then report = e end
  end
  assert(report, "dispose did not report giving up: " .. tostring(err))
  assert.equal("sandbox " .. id .. ": dispose did not finish within 1000 ms; calls still waiting on it were given "
    .. "up; " .. how, report.message)
end

describe("dispose past its deadline (disposeTimeoutMs)", function()
  D.use_state()

  it("onDispose = kill: gives up on the sandbox and kills it through its supervisor; nothing is left", function()
    helpers.run(function()
      local ctx, id = slow_to_dispose("kill")
      dispose_past_deadline(ctx, id, "it was killed through its supervisor, which ended what the context had "
        .. "started there")
      F.assert_nothing_left(id)
    end)
  end)

  it("onDispose = pause: pauses it through its supervisor (files kept, no process left)", function()
    helpers.run(function()
      local ctx, id = slow_to_dispose("pause")
      dispose_past_deadline(ctx, id, "it was paused through its supervisor, which ended what the context had "
        .. "started there")
      assert.equal("paused", sandbox.status(id).state)
      assert.same({}, F.host_processes(id))
      assert.is_truthy(D.stored(id, "/tmp/ignoring")) -- paused: its files stay
      assert(sandbox.kill(id))
      F.assert_nothing_left(id)
    end)
  end)

  it("onDispose = leave: leaves it running and says what may still run", function()
    helpers.run(function()
      local ctx, id = slow_to_dispose("leave")
      dispose_past_deadline(ctx, id, "it was left running (onDispose = leave): what the context started may "
        .. "still run")
      assert.equal("running", sandbox.status(id).state)
      assert(sandbox.kill(id))
      F.assert_nothing_left(id)
    end)
  end)
end)
