-- Cleanups that fail, for real: a process frozen by the cgroup v1 freezer
-- does not die of SIGKILL until it is thawed (it stays in state D), so a
-- terminal whose job is frozen cannot be closed. pty-local on this machine,
-- and pty-e2b on a local sandbox (its job frozen from here, by its host pid)
-- (they need root and the freezer hierarchy; without them the specs say so
-- as pending). Reference §6.5 items 4, 16, 17, 18 and the registry's cleanup
-- error: a failed close is reported, the session kept, and a retry succeeds.
local async = require "dsh.async"
local D = require "helpers.dshd"
local helpers = require "helpers"
local lfs = require "lfs"
local pty = require "dsh.pty"
local sys = require "dsh.core.sysutil"

-- This process's own freezer group (cgroup v1), or nil. The spec's group is
-- made below it, as dsh.sandbox makes a sandbox's (dsh-<id>), under a name no
-- sandbox takes, and only the spec's own jobs ever enter it.
local function own_freezer()
  local rel = (sys.read_file("/proc/self/cgroup") or ""):match("%d+:[^:\n]*freezer[^:\n]*:([^\n]*)")
  if not rel then return nil end
  for line in (sys.read_file("/proc/self/mountinfo") or ""):gmatch("[^\n]+") do
    local root, point, rest = line:match("^%S+ %S+ %S+ (%S+) (%S+) .- %- (.*)$")
    local fstype, opts = (rest or ""):match("^(%S+) %S+ (%S+)")
    if fstype == "cgroup" and ("," .. opts .. ","):find(",freezer,", 1, true) then
      if root == "/" then return (point .. rel):gsub("/+$", "") end
      if rel:sub(1, #root) == root then return (point .. rel:sub(#root + 1)):gsub("/+$", "") end
    end
  end
  return nil
end

local FREEZER = own_freezer()

local function freezer_usable()
  return sys.getuid() == 0 and FREEZER ~= nil and lfs.attributes(FREEZER, "mode") == "directory"
end

local function put(path, text) -- cgroup files take plain writes (no temp file and rename)
  local f = assert(io.open(path, "w"))
  assert(f:write(text))
  assert(f:close())
end

-- A freezer group of the spec's own: freeze(pid) moves pid into it and
-- freezes it; remove() thaws, moves every member back to this process's
-- group and removes it.
local function cgroup()
  local dir = FREEZER .. "/pty-cleanup-spec-" .. sys.random_hex(4)
  assert(lfs.mkdir(dir))
  local cg = {}
  function cg.freeze(pid)
    put(dir .. "/cgroup.procs", tostring(pid))
    put(dir .. "/freezer.state", "FROZEN")
  end
  function cg.thaw() put(dir .. "/freezer.state", "THAWED") end
  function cg.remove()
    cg.thaw()
    for pid in (sys.read_file(dir .. "/cgroup.procs") or ""):gmatch("%d+") do
      put(FREEZER .. "/cgroup.procs", pid)
    end
    assert(lfs.rmdir(dir))
  end
  return cg
end

local function with_env(cfg, fn)
  helpers.run(function()
    local dir = helpers.tmpdir()
    cfg.cwd = dir
    cfg.ambientEnv = { PATH = os.getenv("PATH") or "/usr/bin:/bin", HOME = dir, LANG = "C.UTF-8" }
    local ctx = helpers.start_context { pty.provider, { require "dsh.providers.pty_local", cfg } }
    local cg = cgroup()
    local ok, err = xpcall(fn, debug.traceback, ctx, cg, dir)
    cg.thaw()
    local dok, derr = ctx:dispose()
    cg.remove()
    helpers.rm_rf(dir)
    if not ok then error(err, 0) end
    assert(dok, tostring(derr))
  end)
end

describe("pty cleanups that fail", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  if not freezer_usable() then
    pending("needs root and a cgroup v1 freezer hierarchy")
    return
  end

  it("a job that survives KILL fails the close, naming its group; a retry after it is thawed succeeds", function()
    with_env({ pollIntervalMs = 25, idleSilenceMs = 1000, disposeGraceMs = 200 }, function(ctx, cg)
      local agent = { id = "a" }
      local s = assert(ctx.pty:spawn(agent, { type = "shell" }))
      local r = assert(assert(ctx.pty:startSend(agent, s.id, { text = "sleep 300 & echo job=$!", submit = true }))
        :wait())
      local job = assert(tonumber(r.viewport:match("job=(%d+)")))
      cg.freeze(job)
      local ok, err = ctx.pty:kill(agent, s.id)
      assert.is_nil(ok)
      assert.equal("PTY_CLEANUP", err.code)
      assert.equal("pty-local: local PTY cleanup failed (killed); surviving process groups: " .. job, err.message)
      assert.equal(1, #ctx.pty:list(agent)) -- still there, to be retried
      cg.thaw()
      assert.is_true(ctx.pty:kill(agent, s.id))
      assert.is_false(helpers.pid_alive(job))
      assert.same({}, ctx.pty:list(agent))
    end)
  end)

  it("a startup that fails and cannot be cleaned up keeps both errors; the owner's close reports it", function()
    with_env({ shell = { "/bin/bash", "-c", "echo $$ > shell.pid; exec sleep 300" }, timeoutMs = 300,
      disposeGraceMs = 200 }, function(ctx, cg, dir)
      local agent = { id = "a" }
      local spawning = async.run(function() return ctx.pty:spawn(agent, { type = "shell" }) end)
      local pid
      assert.truthy(helpers.eventually(function()
        pid = tonumber(helpers.read_file(dir .. "/shell.pid") or "")
        return pid
      end))
      cg.freeze(pid)
      local s, err = spawning:await()
      assert.is_nil(s)
      assert.equal("PTY_BACKEND_CLEANUP", err.code)
      assert.equal("PTY_STARTUP", err.spawnError.code)
      assert.equal("pty-local: local PTY shell did not reach readiness before startup timeout", err.spawnError.message)
      assert.equal("PTY_CLEANUP", err.cleanupError.code)
      assert.matches("^pty%-local: local PTY cleanup failed %(local PTY startup failed%); surviving ",
        err.cleanupError.message)
      assert.equal("pty-local: local PTY startup failed (" .. err.spawnError.message .. ") and its cleanup failed ("
        .. err.cleanupError.message .. ")", err.message)
      -- it is the owner's until a close gets rid of it
      local ok, derr = ctx.pty:closeOwner(agent)
      assert.is_nil(ok)
      assert.equal("PTY_DISPOSE", derr.code)
      assert.equal(1, #derr.errors)
      assert.equal(err, derr.errors[1])
      cg.thaw()
      assert.is_true(ctx.pty:closeOwner(agent))
      assert.is_false(helpers.pid_alive(pid))
    end)
  end)
end)

-- The host pid of the one process whose command line starts with marker.
local function host_pid(marker)
  for name in lfs.dir("/proc") do
    if name:match("^%d+$") then
      local cmd = sys.read_file("/proc/" .. name .. "/cmdline") or ""
      if cmd:sub(1, #marker) == marker then return tonumber(name) end
    end
  end
end

describe("pty-e2b cleanups that fail", function()
  D.use_state()

  if not freezer_usable() then
    pending("needs root and a cgroup v1 freezer hierarchy")
    return
  end

  it("a frozen job fails the close, naming its group; the session stays; a retry after the thaw succeeds", function()
    helpers.run(function()
      local ctx = helpers.start_context {
        { require "dsh.providers.e2b", {} }, require "dsh.providers.subprocess_e2b", pty.provider,
        { require "dsh.providers.pty_e2b", { pollIntervalMs = 25, idleSilenceMs = 1000, disposeGraceMs = 200 } },
      }
      local cg = cgroup()
      local ok, err = xpcall(function()
        local agent = { id = "a" }
        local s = assert(ctx.pty:spawn(agent, { type = "shell" }))
        local marker = "dsh-frozen-" .. sys.random_hex(4)
        local r = assert(assert(ctx.pty:startSend(agent, s.id, { text = "bash -c 'exec -a " .. marker
          .. " sleep 300' & echo job=$!", submit = true })):wait())
        local job = assert(tonumber(r.viewport:match("job=(%d+)")), r.viewport)
        local pid
        assert.truthy(helpers.eventually(function()
          pid = host_pid(marker)
          return pid
        end, 10000))
        cg.freeze(pid)
        local kok, kerr = ctx.pty:kill(agent, s.id)
        assert.is_nil(kok)
        assert.equal("PTY_CLEANUP", kerr.code)
        assert.equal("pty-e2b: E2B PTY cleanup failed (killed); surviving process groups: " .. job, kerr.message)
        assert.equal(1, #ctx.pty:list(agent)) -- still there, to be retried
        cg.thaw()
        assert.is_true(ctx.pty:kill(agent, s.id))
        assert.is_false(helpers.pid_alive(pid))
        assert.same({}, ctx.pty:list(agent))
      end, debug.traceback)
      cg.thaw()
      local dok, derr = ctx:dispose()
      cg.remove()
      if not ok then error(err, 0) end
      assert(dok, tostring(derr))
    end)
  end)
end)
