-- cgroup v2 (issue 18, item 3): a sandbox gets one group in the unified
-- hierarchy, which holds every process of it (whatever it forks or detaches),
-- stops it from outside (cgroup.freeze) and ends it with pause and kill. On
-- a hybrid host (v1 controllers, a unified hierarchy without them, as here)
-- DSH_CGROUP=v2 takes that path; its limits need controllers delegated to
-- the group, so asking for one where there are none is a clear error. On a
-- host whose v2 hierarchy has the controllers, the limits are checked too.
local D = require "helpers.dshd"
local helpers = require "helpers"
local cgroups = require "dsh.sandbox.cgroups"
local sandbox = require "dsh.sandbox"
local state = require "dsh.sandbox.state"
local sys = require "dsh.core.sysutil"

local function sh(client, script)
  local p = assert(client:start { cmd = "/bin/bash", args = { "-c", script } })
  local r = assert(p:wait())
  p:close()
  return r.exit_code, r.stdout, r.stderr
end

local function pids_of(dir)
  local out = {}
  for pid in (sys.read_file(dir .. "/cgroup.procs") or ""):gmatch("%d+") do out[#out + 1] = tonumber(pid) end
  return out
end

describe("local sandboxes on cgroup v2", function()
  D.use_state()
  local saved
  before_each(function()
    saved = os.getenv("DSH_CGROUP")
    sys.setenv("DSH_CGROUP", "v2")
  end)
  after_each(function() sys.setenv("DSH_CGROUP", saved) end)

  local outer = os.getenv("DSH_CGROUP")
  sys.setenv("DSH_CGROUP", "v2")
  local version, controllers, own = cgroups.available()
  sys.setenv("DSH_CGROUP", outer)
  if sys.getuid() ~= 0 or version ~= "v2" then
    it("needs root and a cgroup v2 hierarchy dsh may create groups in", function()
      print("\n  [39-sandbox_cgroup_v2] this host: " .. tostring(version) .. " (root: " .. tostring(sys.getuid() == 0)
        .. "): the v2 path cannot run here")
    end)
    return
  end

  it("keeps every process in the sandbox's group, freezes it from outside, and pause and kill empty it", function()
    helpers.run(function()
      local sb = assert(sandbox.create { network = false })
      finally(function() sandbox.kill(sb.id) end)
      local rt = assert(state.read_runtime(sb.id))
      local dir = assert(rt.cgroups.unified, "the runtime record names no v2 group")
      assert.equal(own.v2 .. "/dsh-" .. sb.id, dir)
      -- detached, double-forked, in a new session: still in the group
      assert.equal(0, (sh(sb.envd, "setsid sh -c 'sleep 300 & sleep 300 &' >/dev/null 2>&1 &")))
      assert.is_truthy(helpers.eventually(function() return #pids_of(dir) >= 4 end, 5000))
      -- stopped from outside: a command waits (frozen), and answers once thawed
      helpers.write_file(dir .. "/cgroup.freeze", "1")
      assert.is_truthy(helpers.eventually(function()
        return (sys.read_file(dir .. "/cgroup.events") or ""):match("frozen 1") ~= nil
      end, 5000))
      assert.is_true(cgroups.is_frozen(rt.cgroups))
      helpers.write_file(dir .. "/cgroup.freeze", "0")
      assert.same({ 0, "thawed\n", "" }, { sh(sb.envd, "echo thawed") })
      local before = pids_of(dir)
      sb:close()
      -- pause ends every process, the group goes with them
      assert.is_true(sandbox.pause(sb.id))
      for _, pid in ipairs(before) do assert.is_false(helpers.pid_alive(pid), "survived pause: " .. pid) end
      assert.is_false(sys.is_dir(dir))
      -- resumed: a group again, and kill empties and removes it
      local again = assert(sandbox.connect(sb.id))
      local dir2 = assert(state.read_runtime(sb.id)).cgroups.unified
      assert.is_true(#pids_of(dir2) >= 2)
      again:close()
      assert.is_true(sandbox.kill(sb.id))
      assert.is_false(sys.is_dir(dir2))
    end)
  end)

  it("takes its limits where the controllers are delegated, and refuses them where not", function()
    helpers.run(function()
      if controllers.memory and controllers.pids and controllers.cpu then
        local sb = assert(sandbox.create { network = false, maxProcesses = 64, memoryMb = 128, cpus = 0.5 })
        finally(function() sandbox.kill(sb.id) end)
        local dir = assert(state.read_runtime(sb.id)).cgroups.unified
        assert.same({ "64\n", tostring(128 * 1048576) .. "\n", "50000 100000\n" },
          { sys.read_file(dir .. "/pids.max"), sys.read_file(dir .. "/memory.max"), sys.read_file(dir .. "/cpu.max") })
        sb:close()
      else
        local ok, err = sandbox.create { network = false, memoryMb = 128 }
        assert.is_nil(ok)
        assert.same({ "failed_precondition", "memoryMb cannot be enforced here: dsh needs a cgroup memory controller "
          .. "it may create groups in (cgroup v1, or v2 with the controller delegated)" }, { err.code, err.message })
        -- the defaults it cannot enforce are absent, the process limit holds by RLIMIT_NPROC
        local plain = assert(sandbox.create { network = false })
        finally(function() sandbox.kill(plain.id) end)
        assert.same({ 1024 }, { plain.limits.maxProcesses, plain.limits.memoryMb, plain.limits.cpus })
        assert.same({ 0, "1024\n", "" }, { sh(plain.envd, "ulimit -u") })
        plain:close()
      end
    end)
  end)
end)
