-- A sandbox's lifetime never surprises the host (issue 9 §1), on local
-- sandboxes and on cloud ones through the E2B stand-in: a paused sandbox is
-- resumed by the next call (files kept, processes gone, and what waited on
-- one says so), work through the context keeps it from pausing, a sandbox
-- gone for good makes every call return SANDBOX_GONE saying why and when,
-- and a disposed context and its services say DISPOSED.
local async = require "dsh.async"
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local helpers = require "helpers"
local sandbox = require "dsh.sandbox"

local S -- the stand-in

local BACKENDS = {
  {
    name = "local sandboxes",
    cloud = false,
    config = function(extra) return extra or {} end,
    state = function(id) return sandbox.status(id).state end,
    pause = function(id) assert(sandbox.pause(id)) end,
    kill = function(id) assert(sandbox.kill(id)) end,
  },
  {
    name = "the E2B cloud (stand-in)",
    cloud = true,
    config = function(extra) return S:config(extra) end,
    state = function(id) return S:state(id) or "gone" end,
    pause = function(id) assert.equal(204, S:request("POST", "/sandboxes/" .. id .. "/pause").status) end,
    kill = function(id) assert.equal(204, S:request("DELETE", "/sandboxes/" .. id).status) end,
  },
}

local function compose(cfg)
  return helpers.start_context {
    { require "dsh.providers.e2b", cfg }, require "dsh.providers.fs_e2b", require "dsh.providers.subprocess_e2b",
    { require "dsh.providers.bash", { graceMs = 300 } },
  }
end

local function with_composition(cfg, fn)
  local ctx = compose(cfg)
  local ok, err = xpcall(fn, debug.traceback, ctx)
  local dok, derr = ctx:dispose()
  if not ok then error(err, 0) end
  assert(dok, tostring(derr))
end

local function only(calls, method, pattern)
  local out = {}
  for _, c in ipairs(calls) do
    if c.method == method and c.path:match(pattern) then out[#out + 1] = c end
  end
  return out
end

local ISO = "%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ"

describe("ctx.e2b's sandbox lifetime", function()
  D.use_state()
  S = E.use_standin()

  for _, B in ipairs(BACKENDS) do
    describe("on " .. B.name, function()
      it("resumes a sandbox paused behind its back on the next call; files stay", function()
        helpers.run(function()
          with_composition(B.config {}, function(ctx)
            local id = ctx.e2b:sandboxId()
            assert(ctx.fs:writeText("kept.txt", "kept"))
            B.pause(id)
            assert.equal("paused", B.state(id))
            local mark = S:mark()
            assert.equal("kept", assert(ctx.fs:readText("kept.txt")).text)
            assert.equal("running", B.state(id))
            local r = assert(ctx.bash:run { command = "cat kept.txt; echo more >> kept.txt" })
            assert.same({ 0, "kept" }, { r.exitCode, r.stdout.text })
            assert.equal("keptmore\n", assert(ctx.fs:readText("kept.txt")).text)
            if B.cloud then
              local c = only(S:calls(mark), "POST", "/connect$")
              assert.equal(1, #c) -- one resume, by the first call
              assert.equal(201, c[1].status)
            end
          end)
        end)
      end)

      it("resumes a sandbox its own timeout paused", function()
        helpers.run(function()
          with_composition(B.config { timeoutMs = 1000 }, function(ctx)
            local id = ctx.e2b:sandboxId()
            assert(ctx.fs:writeText("f.txt", "x"))
            assert.is_truthy(helpers.eventually(function() return B.state(id) == "paused" end, 10000, 100))
            if not B.cloud then
              local st = sandbox.status(id)
              assert.equal("paused by its idle timeout (1000 ms)", st.reason)
              assert.matches("^" .. ISO .. "$", st.at)
            end
            local r = assert(ctx.bash:run { command = "cat f.txt" })
            assert.same({ 0, "x" }, { r.exitCode, r.stdout.text })
          end)
        end)
      end)

      it("counts work through the context as activity: it does not pause while used", function()
        helpers.run(function()
          local timeout = B.cloud and 2000 or 1500
          with_composition(B.config { timeoutMs = timeout }, function(ctx)
            local id = ctx.e2b:sandboxId()
            -- a process that holds nothing open: it survives only if nothing pauses
            local r = assert(ctx.bash:run { command = "setsid -f sleep 60 >/dev/null 2>&1 </dev/null; sleep 0.2;"
              .. " pgrep -x -n sleep" })
            local pid = r.stdout.text:match("%d+")
            assert.is_truthy(pid, r.stdout.text)
            local mark = S:mark()
            for _ = 1, 10 do
              async.sleep(timeout / 4)
              assert(ctx.fs:stat("."))
              assert.equal("running", B.state(id))
            end
            -- a command that runs longer than the timeout is activity too
            r = assert(ctx.bash:run { command = "sleep " .. (timeout * 1.6 / 1000) .. "; kill -0 " .. pid })
            assert.equal(0, r.exitCode)
            assert.equal("running", B.state(id))
            if B.cloud then
              assert.same({}, only(S:calls(mark), "POST", "/connect$")) -- never resumed
              assert.is_true(#only(S:calls(mark), "POST", "/timeout$") >= 3) -- the timeout was extended
            end
          end)
        end)
      end)

      it("ends what waited on a process when the sandbox paused under it, saying so", function()
        helpers.run(function()
          with_composition(B.config {}, function(ctx)
            local id = ctx.e2b:sandboxId()
            local h = assert(ctx.subprocess:spawn { argv = { "bash", "-c", "echo up; exec sleep 100" },
              stdio = { stdout = { maxBytes = 100 } } })
            local run = async.run(function() return ctx.bash:run { command = "exec sleep 101" } end)
            assert.is_truthy(helpers.eventually(function() return h.stdout:readFrom(0).text == "up\n" end))
            assert.is_truthy(helpers.eventually(function() -- the Bash command runs too
              return assert(ctx.e2b:exec { "pgrep", "-f", "^sleep 101" }).exit_code == 0
            end, 5000, 20))
            B.pause(id)
            local ok, err = h.done:await()
            assert.is_nil(ok)
            assert.equal("SUBPROCESS_LOST", err.code)
            local story = B.cloud and ": the sandbox had paused %(its timeout, or a pause from elsewhere%) and was"
              .. " resumed at " .. ISO .. "$"
              or "process %d+ is gone: the sandbox paused at " .. ISO .. " and was resumed at " .. ISO
              .. "; processes do not survive a pause$"
            assert.matches(story, err.message)
            local r, rerr = run:await()
            assert.is_nil(r)
            assert.equal("SUBPROCESS_LOST", rerr.code)
            assert.matches(story, rerr.message)
            assert.equal("running", B.state(id)) -- resumed by the reconnection
            local again = assert(ctx.bash:run { command = "echo fine" })
            assert.equal("fine\n", again.stdout.text)
          end)
        end)
      end)

      it("returns SANDBOX_GONE from every call once the sandbox was killed, saying why and when", function()
        helpers.run(function()
          local ctx = compose(B.config {})
          finally(function() ctx:dispose() end) -- also when the test fails
          local id = ctx.e2b:sandboxId()
          local fs, sub, bash, e2b = ctx.fs, ctx.subprocess, ctx.bash, ctx.e2b
          local envd = assert(e2b:getSandbox()).envd
          assert(fs:writeText("f.txt", "x"))
          B.kill(id)
          local why = B.cloud and ("^sandbox " .. id .. " is gone: E2B no longer knows it %(it was killed, or its"
            .. " timeout ended it; last call at " .. ISO .. ", noticed at " .. ISO .. "%)$")
            or ("^sandbox " .. id .. " is gone: killed at " .. ISO .. "$")
          local text, err = fs:readText("f.txt")
          assert.is_nil(text)
          assert.equal("SANDBOX_GONE", err.code)
          assert.matches('^cannot read "/home/user/workspace/f.txt": ' .. why:sub(2), err.message)
          local r
          r, err = bash:run { command = "true" }
          assert.is_nil(r)
          assert.equal("SANDBOX_GONE", err.code)
          assert.matches(why, err.message)
          r, err = e2b:exec { "true" }
          assert.same({ "SANDBOX_GONE" }, { err.code, r })
          assert.matches(why, err.message)
          local h = assert(sub:spawn { argv = { "true" } })
          r, err = h.done:await()
          assert.same({ "SANDBOX_GONE" }, { err.code, r })
          r, err = envd:stat("/")
          assert.same({ "SANDBOX_GONE" }, { err.code, r })
          r, err = e2b:getSandbox()
          assert.same({ "SANDBOX_GONE" }, { err.code, r })
          assert.is_true(ctx:dispose()) -- nothing left to kill
        end)
      end)

      it("says when its own timeout killed it", function()
        helpers.run(function()
          local ctx = compose(B.config { timeoutMs = 1000, onTimeout = "kill" })
          finally(function() ctx:dispose() end) -- also when the test fails
          local id = ctx.e2b:sandboxId()
          assert.is_truthy(helpers.eventually(function() return B.state(id) == "gone" end, 10000, 100))
          local r, err = ctx.bash:run { command = "true" }
          assert.is_nil(r)
          assert.equal("SANDBOX_GONE", err.code)
          if B.cloud then
            assert.matches("^sandbox " .. id .. " is gone: E2B no longer knows it %(its timeout %(1000 ms, then kill%)"
              .. " had passed since this context last set it; last call at " .. ISO, err.message)
          else
            assert.matches("^sandbox " .. id .. " is gone: killed by its idle timeout %(1000 ms%) at " .. ISO .. "$",
              err.message)
          end
          assert.is_true(ctx:dispose())
        end)
      end)

      it("says DISPOSED after dispose: start, ctx.<key>, and every service held in a variable", function()
        helpers.run(function()
          local ctx = compose(B.config {})
          finally(function() ctx:dispose() end) -- also when the test fails
          local fs, sub, bash, e2b = ctx.fs, ctx.subprocess, ctx.bash, ctx.e2b
          local envd = assert(e2b:getSandbox()).envd
          assert.is_true(ctx:dispose())
          local ok, err = ctx:start()
          assert.same({ "DISPOSED", "dsh.context: start: the context was disposed" }, { err.code, err.message, ok })
          for _, key in ipairs { "fs", "bash", "e2b", "anything" } do
            assert.has_error(function() return ctx[key] end,
              "dsh.context: ctx." .. key .. ": DISPOSED: the context was disposed; its services went with it")
          end
          assert.has_error(function() ctx:get("fs") end)
          local r
          r, err = fs:readText("f.txt")
          assert.same({ "DISPOSED", "dsh.fs: readText: ctx.fs is disposed" }, { err.code, err.message, r })
          r, err = fs:writeText("f.txt", "x")
          assert.same({ "DISPOSED" }, { err.code, r })
          r, err = bash:run { command = "true" }
          assert.same({ "DISPOSED" }, { err.code, r })
          r, err = sub:spawn { argv = { "true" } }
          assert.same({ "DISPOSED" }, { err.code, r })
          r, err = e2b:getSandbox()
          assert.same({ "DISPOSED", "E2B sandbox service is disposing" }, { err.code, err.message, r })
          r, err = envd:stat("/")
          assert.same({ "DISPOSED" }, { err.code, r })
        end)
      end)
    end)
  end

  describe("on local sandboxes only", function()
    it("never sends a call about a process of the paused incarnation to the resumed one (pids are reused)",
      function()
        helpers.run(function()
          with_composition({}, function(ctx)
            local id = ctx.e2b:sandboxId()
            local envd = assert(ctx.e2b:getSandbox()).envd
            local old = assert(envd:start { cmd = "sleep", args = { "100" } })
            local pid = old.pid
            old:close()
            assert(sandbox.pause(id))
            assert(envd:stat("/")) -- resumes (and starts no process: the context's own would take pids)
            -- start processes, not through the context, until one has the old
            -- pid again (a fresh pid namespace counts alike)
            local raw = assert(sandbox.connect(id))
            local same
            for _ = 1, 20 do
              local p = assert(raw.envd:start { cmd = "sleep", args = { "100" } })
              p:close()
              if p.pid == pid then
                same = p
                break
              end
            end
            raw:close()
            local ok, err = envd:send_signal(pid, "SIGKILL")
            assert.is_nil(ok)
            assert.equal("not_found", err.code)
            assert.matches("^process " .. pid .. " is gone: the sandbox paused at " .. ISO
              .. " and was resumed at " .. ISO .. "; processes do not survive a pause$", err.message)
            if same then
              local r = assert(ctx.e2b:exec { "kill", "-0", tostring(pid) })
              assert.equal(0, r.exit_code) -- the new process with that pid was not touched
            end
            assert(ctx.e2b:exec { "pkill", "-x", "sleep" })
          end)
        end)
      end)

    it("makes cwd and the runtime root again after a resume (what lived outside /home/user did not survive)",
      function()
        helpers.run(function()
          with_composition({ cwd = "/srv/dsh-ws", runtimeRoot = "/srv/dsh-root" }, function(ctx)
            local id = ctx.e2b:sandboxId()
            assert(ctx.fs:writeText("lost.txt", "in memory"))
            assert(ctx.fs:writeText("/home/user/kept.txt", "on disk"))
            assert(sandbox.pause(id))
            local r = assert(ctx.bash:run { command = "pwd; ls -A; stat -c %a /srv/dsh-root; cat /home/user/kept.txt" })
            assert.same({ 0, "/srv/dsh-ws\n700\non disk" }, { r.exitCode, r.stdout.text })
          end)
        end)
      end)

    it("takes the local sandbox limits from its config", function()
      helpers.run(function()
        with_composition({ maxProcesses = 64, memoryMb = 256, cpus = 0.5, maxOpenFiles = 256, diskMb = 128 },
          function(ctx)
          local st = sandbox.list()[1]
          assert.equal(ctx.e2b:sandboxId(), st.id)
          local l = st.limits
          assert.same({ 64, 256, 0.5, 256 }, { l.maxProcesses, l.memoryMb, l.cpus, l.maxOpenFiles })
          if require("dsh.core.sysutil").getuid() == 0 then assert.equal(128, l.diskMb) end
          assert.equal("pause", st.on_timeout) -- the one default
        end)
      end)
    end)
  end)
end)
