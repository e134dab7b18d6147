-- Local sandboxes behave like E2B sandboxes: create -> list (running) ->
-- pause (every process gone, files kept) -> connect (resumed: files there,
-- old pids gone) -> kill (state gone, not_found after); an idle timeoutMs
-- pauses or deletes as onTimeout says (an open stream is not idle); bin/dsh
-- prints short output with meaningful exit codes. Isolation: host files
-- outside the sandbox's directories are invisible inside, host processes
-- cannot be signalled, and network=false has only loopback, cannot reach a
-- host listener and is served on its unix socket.
local async = require "dsh.async"
local D = require "helpers.dshd"
local helpers = require "helpers"
local loop = require "dsh.core.loop"
local proc = require "dsh.core.proc"
local sandbox = require "dsh.sandbox"
local state = require "dsh.sandbox.state"
local sys = require "dsh.core.sysutil"

-- The sandbox's entry in sandbox.list(), or nil.
local function listed(id)
  for _, s in ipairs(sandbox.list()) do
    if s.id == id then return s end
  end
end

-- Run a command in the sandbox; returns exit code, stdout, stderr.
local function sh(client, script)
  local p = assert(client:start { cmd = "/bin/bash", args = { "-c", script } })
  local r = assert(p:wait())
  p:close()
  return r.exit_code, r.stdout, r.stderr
end

describe("local sandbox lifecycle", function()
  D.use_state()

  it("creates, lists, pauses, resumes and kills a sandbox", function()
    helpers.run(function()
      local sb = assert(sandbox.create { metadata = { owner = "spec" }, envs = { GREETING = "hi there" } })
      finally(function() sandbox.kill(sb.id) end)
      local id = sb.id
      assert.matches("^[a-z0-9]+$", id)
      assert.equal(20, #id)
      assert.same({ id = id, state = "running", metadata = { owner = "spec" }, network = true,
        timeout_ms = 300000, on_timeout = "pause", created_at = listed(id).created_at,
        limits = sb.limits }, listed(id))
      assert.equal(1024, listed(id).limits.maxProcesses)
      assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$", listed(id).created_at)
      local c = sb.envd
      assert.same({ 0, "hi there\n", "" }, { sh(c, "echo $GREETING") })
      assert(c:write_file("/home/user/keep.txt", "kept"))
      assert(c:write_file("/tmp/scratch.txt", "tmp too"))
      local p = assert(c:start { cmd = "sleep", args = { "300" } })
      local old_pid = p.pid
      p:close()
      -- the host processes of the running sandbox: supervisor, bwrap, dshd, sleep
      local sup = assert(state.supervisor_pid(id))
      local tree = D.descendants(sup)
      assert.is_true(#tree >= 3, "sandbox processes on the host: " .. #tree)
      local function cmd(pid) return (sys.read_file("/proc/" .. pid .. "/cmdline") or ""):gsub("%z", " ") end

      assert.is_true(sb:pause())
      assert.equal("paused", listed(id).state)
      for _, pid in ipairs(tree) do assert.is_false(helpers.pid_alive(pid), "survived pause: " .. cmd(pid)) end
      -- the supervisor finishes right after
      assert.is_truthy(helpers.eventually(function() return not helpers.pid_alive(sup) end, 2000))
      assert.equal("kept", D.stored(id, "/home/user/keep.txt"))
      assert.equal("tmp too", D.stored(id, "/tmp/scratch.txt"))

      local sb2 = assert(sandbox.connect(id))
      assert.equal(id, sb2.id)
      assert.equal("running", listed(id).state)
      local c2 = sb2.envd
      assert.equal("kept", assert(c2:read_file("/home/user/keep.txt")))
      assert.same({}, assert(c2:list()))
      local q, err = c2:connect(old_pid)
      assert.is_nil(q)
      assert.same({ "not_found", "process with pid " .. old_pid .. " not found" }, { err.code, err.message })
      assert.same({ 0, "hi there\n", "" }, { sh(c2, "echo $GREETING") }) -- envs survive a resume
      -- connecting to a running sandbox attaches without restarting it
      local dshd_pid = D.dshd_pid(id)
      local sb3 = assert(sandbox.connect(id))
      assert.equal(dshd_pid, D.dshd_pid(id))
      sb3:close()

      local tree2 = D.descendants(assert(state.supervisor_pid(id)))
      assert.is_true(sb2:kill())
      assert.is_false(sys.is_dir(state.dir(id)))
      for _, pid in ipairs(tree2) do assert.is_false(helpers.pid_alive(pid), "survived kill: " .. cmd(pid)) end
      assert.is_nil(listed(id))
      for _, fn in ipairs { sandbox.connect, sandbox.pause, sandbox.kill } do
        local ok, kerr = fn(id)
        assert.is_nil(ok)
        assert.same({ "not_found", "sandbox " .. id .. " not found" }, { kerr.code, kerr.message })
      end
    end)
  end)

  it("pauses an idle sandbox with onTimeout=pause, but not while a stream is open", function()
    helpers.run(function()
      local t0 = loop.now_ms()
      local sb = assert(sandbox.create { timeoutMs = 1500, onTimeout = "pause" })
      finally(function() sandbox.kill(sb.id) end)
      assert(sb.envd:write_file("/home/user/note.txt", "still here"))
      -- a 2.5 s stream keeps the sandbox busy past its 1.5 s idle timeout
      local p = assert(sb.envd:start { cmd = "/bin/bash", args = { "-c", "sleep 2.5; echo done" } })
      local r = assert(p:wait())
      p:close()
      assert.same({ "done\n", 0 }, { r.stdout, r.exit_code })
      assert.equal("running", listed(sb.id).state)
      local idle_from = loop.now_ms()
      sb:close()
      assert.is_truthy(helpers.eventually(function() return listed(sb.id).state == "paused" end, 8000))
      local idle = loop.now_ms() - idle_from
      assert.is_true(idle >= 1300, "paused after " .. idle .. " ms of idleness")
      assert.is_true(loop.now_ms() - t0 >= 2500 + 1300)
      assert.is_nil(state.supervisor_pid(sb.id))
      assert.equal("still here", D.stored(sb.id, "/home/user/note.txt"))
      local sb2 = assert(sandbox.connect(sb.id))
      assert.equal("still here", assert(sb2.envd:read_file("/home/user/note.txt")))
      assert.is_true(sb2:kill())
    end)
  end)

  it("takes the whole sandbox down with its supervisor, and resumes it on connect", function()
    helpers.run(function()
      local sb = assert(sandbox.create {})
      finally(function() sandbox.kill(sb.id) end)
      assert(sb.envd:write_file("/home/user/survives.txt", "files stay"))
      local p = assert(sb.envd:start { cmd = "sleep", args = { "300" } })
      p:close()
      local sup = assert(state.supervisor_pid(sb.id))
      local tree = D.descendants(sup)
      assert.is_true(#tree >= 3, "sandbox processes on the host: " .. #tree)
      sb:close()
      assert.is_true(sys.kill(sup, 9))
      -- bubblewrap runs with --die-with-parent: nothing of the sandbox outlives it
      for _, pid in ipairs(tree) do
        assert.is_truthy(helpers.eventually(function() return not helpers.pid_alive(pid) end, 3000),
          "survived its supervisor: " .. pid)
      end
      assert.equal("paused", listed(sb.id).state)
      local sb2 = assert(sandbox.connect(sb.id))
      assert.equal("files stay", assert(sb2.envd:read_file("/home/user/survives.txt")))
      assert.is_true(sb2:kill())
    end)
  end)

  it("deletes an idle sandbox with onTimeout=kill", function()
    helpers.run(function()
      local sb = assert(sandbox.create { timeoutMs = 1500, onTimeout = "kill" })
      finally(function() sandbox.kill(sb.id) end)
      local id = sb.id
      assert(sb.envd:write_file("/home/user/gone.txt", "x"))
      sb:close()
      local t0 = loop.now_ms()
      assert.is_truthy(helpers.eventually(function() return not sys.is_dir(state.dir(id)) end, 8000))
      assert.is_true(loop.now_ms() - t0 >= 1300)
      assert.is_nil(listed(id))
      local ok, err = sandbox.connect(id)
      assert.is_nil(ok)
      assert.equal("not_found", err.code)
    end)
  end)
end)

describe("bin/dsh", function()
  D.use_state()

  -- Run bin/dsh with args; returns exit code, stdout, stderr. With a
  -- number first: under `timeout` that many seconds (a ceiling: a hang fails).
  local function dsh(...)
    local argv = { helpers.root .. "/bin/dsh", ... }
    if type(argv[2]) == "number" then
      argv = { "timeout", "-k", "5", tostring(table.remove(argv, 2)), unpack(argv) }
    end
    local p = assert(proc.spawn {
      argv = argv,
      env = { PATH = os.getenv("PATH"), HOME = os.getenv("HOME") or "/root", DSH_STATE_DIR = helpers.state_dir,
        DSH_BUILD_DIR = helpers.build, LUA_PATH = package.path, LUA_CPATH = package.cpath },
    })
    local err_task = async.run(function() return p:read_all("stderr") end)
    local out = p:read_all()
    local err = err_task:await()
    local st = p:wait()
    p:wait_quiescent()
    p:close()
    return st.exit_code, out, err
  end

  it("manages a sandbox with short output and meaningful exit codes", function()
    helpers.run(function()
      local code, out, err = dsh("sandbox", "create", "--metadata", "owner=cli", "--timeout-ms", "60000")
      assert.same({ 0, "" }, { code, err })
      local id = out:match("^([a-z0-9]+)\n$")
      assert.is_truthy(id, out)
      finally(function() sandbox.kill(id) end)
      assert.equal("pause", listed(id).on_timeout) -- the one default everywhere

      code, out, err = dsh("sandbox", "list")
      assert.same({ 0, "" }, { code, err })
      local header, row = out:match("^([^\n]*)\n([^\n]*)\n$")
      assert.matches("^ID%s+STATE%s+CREATED%s+METADATA$", header)
      assert.matches("^" .. id .. "%s+running%s+%d%d%d%d%-%d%d%-%d%dT[%d:]+Z%s+owner=cli$", row)

      code, out, err = dsh("exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
      assert.same({ 7, "out\n", "err\n" }, { code, out, err })
      code, out, err = dsh("exec", "--cwd", "/tmp", "--env", "A=b", id, "--", "sh", "-c", 'echo "$A $(pwd)"')
      assert.same({ 0, "b /tmp\n", "" }, { code, out, err })
      code = dsh("exec", id, "--", "sh", "-c", "kill -TERM $$")
      assert.equal(128 + 15, code)

      assert.same({ 0, id .. " paused\n", "" }, { dsh("sandbox", "pause", id) })
      assert.matches(id .. "%s+paused", (select(2, dsh("sandbox", "list"))))
      assert.same({ 0, id .. " running\n", "" }, { dsh("sandbox", "connect", id) })
      assert.same({ 0, id .. " killed\n", "" }, { dsh("sandbox", "kill", id) })
      assert.same({ 0, "(no sandboxes)\n", "" }, { dsh("sandbox", "list") })
      for _, sub in ipairs { "connect", "pause", "kill" } do
        assert.same({ 1, "", "dsh: not_found: sandbox " .. id .. " not found\n" }, { dsh("sandbox", sub, id) })
      end
      assert.same({ 1, "", "dsh: not_found: sandbox " .. id .. " not found\n" }, { dsh("exec", id, "--", "true") })
    end)
  end)

  it("rejects bad usage with status 2, saying what was wrong", function()
    helpers.run(function()
      local code, out, err = dsh("sandbox")
      assert.same({ 2, "" }, { code, out })
      assert.matches("^usage: dsh sandbox create", err)
      assert.is_nil(err:find("dsh exec", 1, true)) -- the usage of what was asked for
      assert.same({ 2, "", "dsh: unknown option --bogus\n" }, { dsh("sandbox", "create", "--bogus") })
      assert.same({ 2, "", "dsh: --on-timeout must be pause or kill\n" },
        { dsh("sandbox", "create", "--on-timeout", "later") })
      assert.same({ 2, "", "dsh: --timeout-ms must be a positive integer\n" },
        { dsh("sandbox", "create", "--timeout-ms", "-5") })
      assert.same({ 2, "", "dsh: usage: dsh sandbox kill ID\n" }, { dsh("sandbox", "kill") })
      assert.same({ 2, "", "dsh: option --cwd needs a value\n" }, { dsh("exec", "--cwd") })
      code, out, err = dsh("exec", "someid", "true")
      assert.same({ 2, "", "usage: dsh exec [--cwd DIR] [--env K=V]... [--timeout-ms N] ID -- CMD [ARGS...]\n" },
        { code, out, err })
      code, out, err = dsh("frobnicate")
      assert.same({ 2, "" }, { code, out })
      assert.matches("^dsh: unknown command frobnicate %(sandbox, exec, shell, poc or help%)\nusage: dsh sandbox", err)
      code, out, err = dsh("sandbox", "frobnicate")
      assert.same({ 2, "" }, { code, out })
      assert.matches("^dsh: unknown sandbox command frobnicate %(create, list, metrics, connect, pause or kill%)\n"
        .. "usage: dsh sandbox create", err)
      assert.same({}, sandbox.list()) -- nothing was created
    end)
  end)

  it("lists every flag in its usage, on help's stdout", function()
    helpers.run(function()
      local code, out, err = dsh("help")
      assert.same({ 0, "" }, { code, err })
      local cli = require "dsh.app.cli"
      assert.equal(cli.USAGE, out)
      local n = 0
      for cmd, flags in pairs(cli.FLAGS) do
        -- the lines of the command: from "dsh <cmd> " to the next "dsh "
        local text = out:match("dsh " .. cmd:gsub("%-", "%%-") .. " (.-)\n%s+dsh ")
        assert.is_string(text, cmd)
        for flag in pairs(flags) do
          n = n + 1
          assert.truthy(text:find("[--" .. flag, 1, true), cmd .. " --" .. flag .. " is not in the usage")
        end
      end
      assert.is_true(n >= 11)
      assert.truthy(out:find(require("dsh.app.shell").USAGE:gsub("^usage: ", ""), 1, true))
      assert.truthy(out:find("dsh poc [--cloud]", 1, true))
    end)
  end)

  it("exec exits as a shell would: 124 on its timeout, 127, 126, 128+N, each with one line saying why", function()
    helpers.run(function()
      local code, out, err = dsh("sandbox", "create", "--no-network")
      assert.same({ 0, "" }, { code, err })
      local id = out:match("^([a-z0-9]+)\n$")
      finally(function() sandbox.kill(id) end)
      assert.same({ 124, "started\n", "dsh: exec: timed out after 300 ms; the command's processes were killed\n" },
        { dsh("exec", "--timeout-ms", "300", id, "--", "sh", "-c", "echo started; exec sleep 30") })
      assert.same({ 127, "", "dsh: exec: no-such-command: command not found\n" },
        { dsh("exec", id, "--", "no-such-command") })
      assert.same({ 126, "", "dsh: exec: /etc/hostname: permission denied (not an executable file)\n" },
        { dsh("exec", id, "--", "/etc/hostname") })
      assert.same({ 128 + 11, "", "dsh: exec: the command was killed by SIGSEGV\n" },
        { dsh("exec", id, "--", "sh", "-c", "kill -SEGV $$") })
      assert.same({ 128 + 2, "", "" }, { dsh("exec", id, "--", "sh", "-c", "kill -INT $$") }) -- as bash: quiet
      code, out, err = dsh("exec", id, "--", "sh", "-c", "kill -KILL $$")
      local mem = listed(id).limits.memoryMb
      assert.same({ 128 + 9, "", "dsh: exec: the command was killed by SIGKILL"
        .. (mem and " (also how a process over the sandbox's " .. mem .. " MiB of memory ends)" or "") .. "\n" },
        { code, out, err })
      assert.same({ 1, "", "dsh: exec: cwd '/no-such-dir' does not exist\n" },
        { dsh("exec", "--cwd", "/no-such-dir", id, "--", "true") })
    end)
  end)

  it("exec returns at the command's exit; what it left in the background keeps running", function()
    helpers.run(function()
      local code, out, err = dsh("sandbox", "create", "--no-network")
      assert.same({ 0, "" }, { code, err })
      local id = out:match("^([a-z0-9]+)\n$")
      finally(function() sandbox.kill(id) end)
      assert.same({ 7, "before\n", "" }, { dsh(120, "exec", id, "--", "bash", "-c",
        "sleep 1000 & echo $! > /tmp/bg.pid; echo before; exit 7") })
      assert.same({ 0, "alive\n", "" },
        { dsh("exec", id, "--", "sh", "-c", "kill -0 $(cat /tmp/bg.pid) && echo alive") })
      -- and so does the raw envd client's wait()
      local sb = assert(sandbox.connect(id))
      local p = assert(sb.envd:start { cmd = "/bin/bash", args = { "-c", "echo again; sleep 1000 & exit 3" } })
      local r = assert(async.timeout(120000, function() return p:wait() end)) -- a ceiling: a hang fails
      p:close()
      assert.same({ 3, "again\n" }, { r.exit_code, r.stdout })
      p = assert(sb.envd:start { cmd = "/usr/bin/pgrep", args = { "-c", "-x", "sleep" } })
      assert.equal("2\n", assert(p:wait()).stdout)
      p:close()
      sb:close()
    end)
  end)
end)

describe("local sandbox isolation", function()
  local S = D.use_sandbox()
  local secret_dir
  setup(function()
    secret_dir = helpers.tmpdir()
    helpers.write_file(secret_dir .. "/secret.txt", "host secret")
  end)
  teardown(function()
    helpers.rm_rf(secret_dir)
  end)

  it("shows nothing of the host outside the sandbox's own directories", function()
    helpers.run(function()
      local c = S:test_client()
      local readme = helpers.root .. "/README.md"
      assert.is_truthy(helpers.read_file(readme)) -- it is there on the host
      for _, path in ipairs { secret_dir .. "/secret.txt", readme, "/etc/shadow" } do
        local code, out, err = sh(c, "cat '" .. path .. "'")
        assert.same({ 1, "", "cat: " .. path .. ": No such file or directory\n" }, { code, out, err })
        local ok, ferr = c:read_file(path)
        assert.is_nil(ok)
        assert.same({ "not_found", "path '" .. path .. "' does not exist" }, { ferr.code, ferr.message })
        local st, serr = c:stat(path)
        assert.is_nil(st)
        assert.equal("not_found", serr.code)
      end
      local names = {}
      for _, e in ipairs(assert(c:list_dir("/"))) do names[e.name] = true end
      assert.is_nil(names.work)
      -- /root is the sandbox root's own home, empty: not the host's
      assert.same({}, assert(c:list_dir("/root", 1, { user = "root" })))
      assert.is_true(names.home and names.usr and names.tmp)
      -- the host's /tmp is not the sandbox's /tmp
      local code, listing = sh(c, "ls -A /tmp")
      assert.equal(0, code)
      assert.is_nil(listing:find(secret_dir:match("[^/]+$"), 1, true))
      c:close()
    end)
  end)

  it("cannot signal a host process", function()
    helpers.run(function()
      local c = S:test_client()
      local host = assert(proc.spawn { argv = { "sleep", "30" }, env = { PATH = "/usr/bin:/bin" } })
      finally(function() host:close() end)
      local code, out, err = sh(c, "kill -TERM " .. host.pid .. "; echo rc=$?")
      assert.same({ 0, "rc=1\n" }, { code, out })
      assert.matches("No such process", err)
      async.sleep(200)
      assert.is_true(helpers.pid_alive(host.pid))
      assert.is_true(host:status().running)
      host:close()
      c:close()
    end)
  end)

  it("with network=false has only loopback, cannot reach a host listener, and is served on a unix socket", function()
    helpers.run(function()
      local closed = assert(sandbox.create { network = false })
      local cc = closed.envd
      assert.is_false(closed.network)
      assert.equal(state.socket(closed.id), cc.unix_socket)
      assert.is_false(listed(closed.id).network)
      local open = S:test_client()
      -- the host's loopback, with a dshd without a token on it
      local host = D.bare()
      finally(function() -- busted keeps one finally per test: this one, the last
        open:close()
        closed:close()
        sandbox.kill(closed.id)
        host.stop()
      end)
      local function ifaces(client)
        local _, out = sh(client, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort")
        return out
      end
      assert.equal("lo\n", ifaces(cc))
      assert.is_truthy(ifaces(open):find("\n", 4, true)) -- the shared sandbox sees more than lo
      -- the host's loopback is reachable from neither sandbox
      local probe = "exec 3<>/dev/tcp/" .. host.addr:gsub(":", "/") .. " && echo connected"
      for _, c in ipairs { open, cc } do
        local code, out, err = sh(c, probe)
        assert.same({ 1, "" }, { code, out })
        assert.matches("Connection refused", err)
      end
      open:close()
      assert.is_true(closed:kill())
    end)
  end)
end)
