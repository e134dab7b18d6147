-- A local sandbox cannot exhaust the host (issue 7, isolation item 2): its
-- user is an unprivileged host uid of its own when the host runs as root;
-- processes and threads, memory and CPU are limited as create asks (with
-- defaults); a fork bomb stays inside its limit while the host keeps forking;
-- pause and kill return only once every process of the sandbox is gone.
-- Processes are found from the host by the sandbox's pid namespace, so these
-- checks do not depend on how the sandbox is built.
local async = require "dsh.async"
local D = require "helpers.dshd"
local helpers = require "helpers"
local lfs = require "lfs"
local limits = require "dsh.sandbox.limits"
local proc = require "dsh.core.proc"
local sandbox = require "dsh.sandbox"
local state = require "dsh.sandbox.state"
local sys = require "dsh.core.sysutil"

local function sh(client, script)
  local p = assert(client:start { cmd = "/bin/bash", args = { "-c", script } })
  local r = assert(p:wait())
  p:close()
  return r.exit_code, r.stdout, r.stderr
end

-- The sandbox's pid namespace ("pid:[N]"), as seen from inside.
local function pidns(client)
  local code, out = sh(client, "readlink /proc/self/ns/pid")
  assert.equal(0, code)
  return (out:gsub("\n$", ""))
end

-- Host pids in pid namespace ns.
local function members(ns)
  local out = {}
  for name in lfs.dir("/proc") do
    if name:match("^%d+$") and lfs.symlinkattributes("/proc/" .. name .. "/ns/pid", "target") == ns then
      out[#out + 1] = tonumber(name)
    end
  end
  return out
end

-- Tasks (threads) of the given pids, or of the whole host.
local function tasks(pids)
  local n = 0
  local function count(pid)
    local ok, iter, dir = pcall(lfs.dir, "/proc/" .. pid .. "/task")
    if not ok then return end
    for t in iter, dir do
      if t:match("^%d+$") then n = n + 1 end
    end
  end
  if pids then
    for _, pid in ipairs(pids) do count(pid) end
  else
    for name in lfs.dir("/proc") do
      if name:match("^%d+$") then count(name) end
    end
  end
  return n
end

local function real_uid(pid)
  return tonumber((sys.read_file("/proc/" .. pid .. "/status") or ""):match("\nUid:%s*(%d+)"))
end

-- Host uid of the sandbox user: the owner of a file it creates.
local function host_uid(sb)
  assert.equal(0, (sh(sb.envd, "touch /home/user/.mine")))
  return lfs.attributes(D.inside(sb.id, "/home/user/.mine"), "uid")
end

-- Largest number of tasks seen in ns over ms, sampled every 50 ms; also
-- the largest host total.
local function watch(ns, ms)
  local most, host_most = 0, 0
  for _ = 1, ms / 50 do
    most = math.max(most, tasks(members(ns)))
    host_most = math.max(host_most, tasks())
    async.sleep(50)
  end
  return most, host_most
end

describe("local sandbox limits", function()
  setup(D.isolate_state)
  teardown(D.restore_state)
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("runs dshd as the sandbox's root and commands as `user`: two host uids of its own", function()
    helpers.run(function()
      local a = assert(sandbox.create { network = false })
      local b = assert(sandbox.create { network = false })
      finally(function()
        a:kill()
        b:kill()
      end)
      local ma, mb = assert(state.read_meta(a.id)), assert(state.read_meta(b.id))
      local ua, ub = host_uid(a), host_uid(b)
      assert.same({ ma.uid, mb.uid }, { ua, ub })
      if sys.getuid() == 0 then
        assert.same({ "dedicated", "separate" }, { ma.identities, a.limits.identities })
        local all = { ma.root_uid, ma.uid, mb.root_uid, mb.uid }
        for i = 1, 4 do
          assert.is_true(all[i] ~= 0 and all[i] >= 0x70000000, "host uid " .. all[i])
          for j = i + 1, 4 do assert.is_not.equal(all[i], all[j]) end
        end
      else
        assert.equal(sys.getuid(), ma.root_uid)
      end
      -- dshd runs as the root uid, every command as the user's
      local ns = pidns(a.envd)
      local sleeper = assert(a.envd:start { cmd = "sleep", args = { "60" } })
      local pids = members(ns)
      assert.is_true(#pids >= 3)
      local seen = {}
      for _, pid in ipairs(pids) do
        local comm = (sys.read_file("/proc/" .. pid .. "/comm") or ""):gsub("\n$", "")
        seen[comm] = real_uid(pid)
      end
      assert.equal(ma.root_uid, seen.dshd)
      assert.equal(ma.root_uid, seen.bwrap)
      assert.equal(ua, seen.sleep)
      assert(a.envd:send_signal(sleeper.pid, "SIGKILL", { group = true }))
      sleeper:close()
    end)
  end)

  it("claims each sandbox's host uids machine-wide and takes over only a stale claim", function()
    local uids = require "dsh.sandbox.uids"
    if sys.getuid() ~= 0 then
      assert.is_false(uids.dedicated()) -- the sandbox's ids are this user's (subordinate or shared)
      return
    end
    helpers.run(function()
      local sb = assert(sandbox.create { network = false })
      finally(function() sb:kill() end)
      local meta = assert(state.read_meta(sb.id))
      local key = meta.root_uid
      assert.is_true(uids.ours(key) and uids.ours(meta.uid))
      assert.equal(key + 1, meta.uid)
      assert.equal(state.dir(sb.id) .. "\n", helpers.read_file(uids.CLAIMS .. "/" .. key .. "/owner"))
      -- held by a live sandbox: refused to anyone else
      local ok, why = uids.claim(key, "/nonexistent/other", meta.uid)
      assert.is_nil(ok)
      assert.equal("uid " .. key .. " is held by " .. state.dir(sb.id), why)
      -- a claim whose sandbox is gone is taken over, and released by its new owner
      local stale = key + 2 < uids.BASE + uids.COUNT and key + 2 or key - 2
      assert(uids.claim(stale, "/nonexistent/gone", stale + 1))
      assert(uids.claim(stale, "/nonexistent/next", stale + 1))
      assert.equal("/nonexistent/next\n", helpers.read_file(uids.CLAIMS .. "/" .. stale .. "/owner"))
      uids.release(stale, "/nonexistent/gone") -- not its claim any more: kept
      assert.is_true(sys.exists(uids.CLAIMS .. "/" .. stale))
      uids.release(stale, "/nonexistent/next")
      assert.is_false(sys.exists(uids.CLAIMS .. "/" .. stale))
      local dir = state.dir(sb.id)
      assert(sb:kill())
      assert.is_false(sys.exists(uids.CLAIMS .. "/" .. key), "claim of " .. dir .. " left after kill")
    end)
  end)

  it("keeps a fork bomb inside maxProcesses while the host forks, and kill leaves no process", function()
    helpers.run(function()
      local sb = assert(sandbox.create { maxProcesses = 64, network = false })
      local id = sb.id
      finally(function() sandbox.kill(id) end)
      assert.equal(64, sb.limits.maxProcesses)
      local ns, uid = pidns(sb.envd), host_uid(sb)
      local groups = assert(state.read_runtime(id)).cgroups
      -- first a bounded probe (harmless without a limit): 100 sleepers
      local probe = assert(sb.envd:start { cmd = "/bin/bash", args = { "-c", "seq 100 | xargs -P 100 -n 1 sleep 30" } })
      local most = watch(ns, 1000)
      assert(sb.envd:send_signal(probe.pid, "SIGKILL", { group = true }))
      probe:close()
      assert.is_true(most <= 64, most .. " tasks in a sandbox limited to 64")
      assert.is_truthy(helpers.eventually(function() return tasks(members(ns)) <= 8 end, 5000))
      -- then the real thing
      local before = tasks()
      local bomb = assert(sb.envd:start { cmd = "/bin/bash", args = { "-c", ":(){ :|:& };:" } })
      local host_proc = assert(proc.spawn { argv = { "/bin/true" } })
      assert.equal(0, host_proc:wait().exit_code)
      host_proc:close()
      local host_most
      most, host_most = watch(ns, 1500)
      bomb:close()
      sb:close()
      assert.is_true(most <= 64, most .. " tasks in a sandbox limited to 64")
      -- other work on this machine moves the host's count too: a wide margin,
      -- still far below what an unbounded bomb reaches (thousands)
      assert.is_true(host_most <= before + 64 + 400, "host tasks went from " .. before .. " to " .. host_most)
      assert.is_true(sandbox.kill(id))
      assert.same({}, members(ns))
      if sys.getuid() == 0 then
        for name in lfs.dir("/proc") do
          if name:match("^%d+$") then assert.is_not.equal(uid, real_uid(name), "process " .. name) end
        end
      end
      for c, dir in pairs(groups) do assert.is_false(sys.is_dir(dir), c .. " group left: " .. dir) end
    end)
  end)

  it("pauses only once every process is gone, and resumes", function()
    helpers.run(function()
      local sb = assert(sandbox.create { network = false })
      local id = sb.id
      finally(function() sandbox.kill(id) end)
      local ns = pidns(sb.envd)
      assert.equal(0, (sh(sb.envd, "for i in $(seq 50); do setsid sleep 300 >/dev/null 2>&1 & done")))
      assert.is_true(#members(ns) >= 50)
      sb:close()
      assert.is_true(sandbox.pause(id))
      assert.same({}, members(ns))
      local again = assert(sandbox.connect(id))
      assert.same({ 0, "back\n", "" }, { sh(again.envd, "echo back") })
      again:close()
    end)
  end)

  it("limits memory: a process over memoryMb is killed, the sandbox lives on", function()
    helpers.run(function()
      local small = assert(sandbox.create { memoryMb = 64, network = false })
      local big = assert(sandbox.create { network = false })
      finally(function()
        small:kill()
        big:kill()
      end)
      assert.equal(64, small.limits.memoryMb)
      -- bash keeps 200 MB in a variable
      local hog = "x=$(head -c 200000000 /dev/zero | tr '\\0' x); echo ${#x}"
      assert.same({ 0, "200000000\n", "" }, { sh(big.envd, hog) })
      local p = assert(small.envd:start { cmd = "/bin/bash", args = { "-c", hog } })
      local r = assert(p:wait())
      p:close()
      assert.same({ "", "SIGKILL" }, { r.stdout, r.signal }, "exit " .. tostring(r.exit_code))
      assert.same({ 0, "alive\n", "" }, { sh(small.envd, "echo alive") })
    end)
  end)

  it("limits CPU time to cpus", function()
    helpers.run(function()
      local sb = assert(sandbox.create { cpus = 0.2, network = false })
      finally(function() sb:kill() end)
      assert.equal(0.2, sb.limits.cpus)
      -- one busy second of wall time gets about 0.2 s of CPU
      local code, _, err = sh(sb.envd, "TIMEFORMAT=%U; time timeout 1 sh -c 'while :; do :; done'")
      assert.equal(124, code)
      local used = assert(tonumber(err:match("([%d.]+)%s*$")), err)
      assert.is_true(used <= 0.45, used .. " CPU seconds in 1 s with cpus = 0.2")
    end)
  end)

  it("reports its limits, with defaults that keep the host usable, and refuses bad ones", function()
    helpers.run(function()
      local sb = assert(sandbox.create { network = false })
      finally(function() sb:kill() end)
      local host, d = limits.host(), limits.defaults()
      local want = { maxProcesses = 1024, memoryMb = d.memoryMb, cpus = d.cpus, maxOpenFiles = d.maxOpenFiles,
        identities = sys.getuid() == 0 and "separate" or sb.limits.identities, diskMb = sb.limits.diskMb }
      assert.same(want, sb.limits)
      assert.is_true(d.maxOpenFiles * 1024 <= host.file_max / 4)
      if sys.getuid() == 0 then assert.is_true(sb.limits.diskMb >= 64 and sb.limits.diskMb <= 10240) end
      assert.is_true(d.memoryMb <= math.max(64, host.memory_mb / 2))
      assert.is_true(d.cpus <= math.max(1, host.cpus - 1))
      local listed
      for _, s in ipairs(sandbox.list()) do
        if s.id == sb.id then listed = s end
      end
      assert.same(sb.limits, listed.limits)
    end)
    for _, case in ipairs {
      { { maxProcesses = 3 }, "maxProcesses must be an integer from 16 to 4194304" },
      { { maxProcesses = 64.5 }, "maxProcesses must be an integer from 16 to 4194304" },
      { { memoryMb = "1G" }, "memoryMb must be an integer from 64 to 1099511627776" },
      { { cpus = 0 }, "cpus must be a number from 0.01 to 4096" },
      { { cpus = 0 / 0 }, "cpus must be a number from 0.01 to 4096" },
      { { network = "yes" }, "network: expected boolean, got string" },
    } do
      assert.has_error(function() sandbox.create(case[1]) end, "dsh.sandbox: create: " .. case[2])
    end
  end)

  it("takes the limits on the command line", function()
    helpers.run(function()
      local function dsh(...)
        local p = assert(proc.spawn {
          argv = { helpers.root .. "/bin/dsh", ... },
          env = { PATH = os.getenv("PATH"), HOME = os.getenv("HOME") or "/root", DSH_STATE_DIR = sys.state_dir(),
            DSH_BUILD_DIR = helpers.build, LUA_PATH = package.path, LUA_CPATH = package.cpath },
        })
        local err_task = async.run(function() return p:read_all("stderr") end)
        local out = p:read_all()
        local err = err_task:await()
        local st = p:wait()
        p:close()
        return st.exit_code, out, err
      end
      local code, out, err = dsh("sandbox", "create", "--no-network", "--max-processes", "100", "--memory-mb", "256",
        "--cpus", "0.5")
      assert.same({ 0, "" }, { code, err })
      local id = assert(out:match("^([a-z0-9]+)\n$"), out)
      finally(function() sandbox.kill(id) end)
      local listed
      for _, s in ipairs(sandbox.list()) do
        if s.id == id then listed = s end
      end
      assert.same({ 100, 256, 0.5 }, { listed.limits.maxProcesses, listed.limits.memoryMb, listed.limits.cpus })
      -- bad usage: status 2
      assert.same({ 2, "", "dsh: --max-processes must be an integer from 16 to 4194304\n" },
        { dsh("sandbox", "create", "--max-processes", "3") })
      assert.same({ 2, "", "dsh: --cpus must be a positive number\n" }, { dsh("sandbox", "create", "--cpus", "x") })
    end)
  end)
end)
