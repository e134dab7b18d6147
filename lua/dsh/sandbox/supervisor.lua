--- dsh.sandbox.supervisor: the one host process that keeps a local sandbox up.
--
-- Started detached (its own session) by create/connect. It creates the
-- sandbox's cgroups, runs bubblewrap under the launcher (dsh.sandbox.bwrap)
-- with --die-with-parent, hands dshd its access token on stdin and waits for
-- dshd to listen on its unix socket inside the sandbox's /run/dsh. Then it
-- attaches the network (when asked for), and only then moves the socket out
-- of the sandbox's reach into the state directory, where the host finds it:
-- nothing the host uses to find or trust a sandbox stays writable from
-- inside. On SIGTERM (pause or kill from the host) it kills every process of
-- the sandbox and exits only once all are gone (dsh.sandbox.reap); files
-- stay. When dshd exits on its idle timeout, onTimeout decides: "pause" keeps
-- the files, "kill" deletes the sandbox. If this process dies, bubblewrap
-- (and so the sandbox) dies with it.
local async = require "dsh.async"
local bwrap = require "dsh.sandbox.bwrap"
local limits = require "dsh.sandbox.limits"
local loop = require "dsh.loop"
local network = require "dsh.sandbox.network"
local proc = require "dsh.proc"
local reap = require "dsh.sandbox.reap"
local state = require "dsh.sandbox.state"
local sys = require "dsh.sysutil"
local uids = require "dsh.sandbox.uids"
local lfs = require "lfs"

local M = {}

M.EXIT_IDLE = 3 -- dshd's exit status after --idle-timeout-ms
M.START_TIMEOUT_MS = 20000

local function log(fmt, ...)
  io.stderr:write(os.date("!%Y-%m-%dT%H:%M:%SZ "), string.format(fmt, ...), "\n")
  io.stderr:flush()
end

-- Remove dshd's socket and ready file, and whatever the sandbox may have
-- left in their place (never following a link); only when nothing runs.
local function clear(id)
  local dir = state.dir(id)
  os.remove(state.socket(id))
  sys.rm_rf(dir .. "/run/ready")
  sys.rm_rf(dir .. "/run/dshd.sock")
end

-- Tasks (processes and threads) of uid on this host: RLIMIT_NPROC counts
-- them all, so a sandbox that shares the host user's uid gets this many more.
local function tasks_of(uid)
  local n = 0
  for _, pid in ipairs(uids.processes(uid)) do
    local f = io.open("/proc/" .. pid .. "/status", "rb")
    if f then
      n = n + (tonumber((f:read(4096) or ""):match("\nThreads:%s*(%d+)")) or 1)
      f:close()
    end
  end
  return n
end

-- The sandbox's first process (bubblewrap's pid 1), a child of bubblewrap.
local function first_child(pid)
  local f = io.open("/proc/" .. pid .. "/task/" .. pid .. "/children", "rb")
  if not f then return nil end
  local s = f:read(4096) or ""
  f:close()
  return tonumber(s:match("%d+"))
end

-- Wait for dshd to listen, attach the network, then publish the socket.
-- Returns the slirp4netns process (or false without network), or nil, why.
local function start(id, meta, p, rt, stopping)
  local dir = state.dir(id)
  local deadline = loop.now_ms() + M.START_TIMEOUT_MS
  -- dshd writes its ready file once it accepts connections; only its
  -- existence is looked at (a file in the sandbox's reach is never read)
  while lfs.symlinkattributes(dir .. "/run/ready", "mode") ~= "file" do
    if stopping() then return nil, "stopped while starting" end
    if not p:status().running then return nil, "bubblewrap exited while starting" end
    if loop.now_ms() > deadline then return nil, "dshd did not listen within " .. M.START_TIMEOUT_MS .. " ms" end
    async.sleep(2)
  end
  rt.init = sys.pid_record(first_child(p.pid) or 0)
  state.write_runtime(id, rt)
  local net = false
  if meta.network ~= false then
    -- bubblewrap's outer process holds the namespaces the launcher made;
    -- otherwise the sandbox's first process holds the one bubblewrap made
    local made = bwrap.netns_made { network = true, uid = meta.uid }
    local pid = made and p.pid or sys.live_pid(rt.init)
    if not pid then return nil, "the sandbox's first process is gone" end
    local err
    net, err = network.start(pid, made)
    if not net then return nil, err.message end
  end
  -- Only dshd has run so far; still, take nothing but a socket of the
  -- sandbox's own uid, and check what arrived after the move.
  local src, dst = dir .. "/run/dshd.sock", state.socket(id)
  local owner = meta.uid or sys.getuid()
  local a = lfs.symlinkattributes(src)
  if not a or a.mode ~= "socket" or a.uid ~= owner then
    network.stop(net or nil)
    return nil, "dshd's socket is missing or not the sandbox's own"
  end
  local ok, err = os.rename(src, dst)
  local b = lfs.symlinkattributes(dst)
  if not ok or not b or b.mode ~= "socket" or b.ino ~= a.ino then
    os.remove(dst)
    network.stop(net or nil)
    return nil, "cannot move dshd's socket: " .. tostring(err)
  end
  os.remove(dir .. "/run/ready")
  return net
end

local function main(id)
  local dir = state.dir(id)
  if not state.exists(id) then return 1 end -- killed while this process was being launched
  local meta = assert(state.read_meta(id), "sandbox " .. id .. " has no readable meta.json")
  assert(sys.write_file(dir .. "/supervisor.pid", sys.pid_record() .. "\n", "600"))
  clear(id)
  local function give_up(fmt, ...)
    log("sandbox %s cannot start: " .. fmt, id, ...)
    os.remove(dir .. "/supervisor.pid")
    return 1
  end

  local uid = meta.uid
  if uid then
    local ok, why = uids.claim(uid, dir)
    if not ok then return give_up("%s", why) end
    sys.mkdir_p(bwrap.STAGE, "755")
  end
  local plan = meta.limits or {}
  local groups, gerr = limits.create(id, plan)
  if not groups then
    limits.remove(limits.paths(id, plan))
    return give_up("%s", gerr)
  end
  local rt = { cgroups = groups }
  state.write_runtime(id, rt)
  local procs = {}
  for _, d in pairs(groups) do procs[#procs + 1] = d .. "/cgroup.procs" end
  local nproc = plan.maxProcesses or limits.DEFAULT_MAX_PROCESSES
  if not uid then nproc = nproc + tasks_of(sys.getuid()) end

  local argv = bwrap.launch_argv {
    id = id, dir = dir, dshd = meta.dshd, network = meta.network ~= false, idle_timeout_ms = meta.timeout_ms,
    uid = uid, nproc = nproc, cgroup_procs = procs,
  }
  local p, err = proc.spawn { argv = argv, env = bwrap.env(), stdin = "pipe", stdout = "inherit", stderr = "inherit" }
  if not p then
    limits.remove(groups)
    return give_up("cannot start bubblewrap: %s", tostring(err))
  end
  rt.bwrap = sys.pid_record(p.pid)
  state.write_runtime(id, rt)
  log("sandbox %s started (pid %d, uid %s)", id, p.pid, tostring(uid or sys.getuid()))
  p:write(meta.token)
  p:close_stdin()

  local stopping = false
  local watchers = {}
  for _, sig in ipairs { 15, 2, 1 } do
    watchers[#watchers + 1] = loop.on_signal(sig, function()
      stopping = true
      p:signal("SIGKILL", true)
    end)
  end
  local net, serr = start(id, meta, p, rt, function() return stopping end)
  if not net and net ~= false then
    log("sandbox %s failed to start: %s", id, serr)
    p:signal("SIGKILL", true)
  end
  local st = p:wait()
  network.kill(net or nil) -- its exit overlaps the sandbox's
  local ok, rerr = reap.all(rt, uid)
  if not ok then log("sandbox %s: %s", id, rerr.message) end
  network.stop(net or nil)
  p:wait_quiescent()
  p:close()
  for _, w in ipairs(watchers) do w:close() end
  if ok then -- else the record stays, for the host to finish the job
    if not limits.remove(groups) then log("sandbox %s: cannot remove its cgroups", id) end
    clear(id)
    os.remove(dir .. "/runtime.json")
  end

  local idle = not stopping and st.exit_code == M.EXIT_IDLE
  log("sandbox %s stopped (%s)", id, stopping and "requested" or (idle and "idle timeout")
    or ("exit " .. tostring(st.exit_code or st.signal)))
  local timeout = string.format("its idle timeout (%d ms)", meta.timeout_ms or 0)
  if idle and meta.on_timeout == "kill" then
    state.write_gone(id, "killed by " .. timeout)
    sys.rm_rf(dir)
    if uid then uids.release(uid, dir) end
    return 0
  end
  -- why it stopped, for the host that finds it paused (ctx.e2b resumes it)
  state.write_stopped(id, stopping and "paused" or idle and ("paused by " .. timeout)
    or ("stopped when dshd ended (" .. tostring(st.signal or ("exit " .. tostring(st.exit_code))) .. ")"))
  os.remove(dir .. "/supervisor.pid")
  return 0
end

--- Entry point of the detached supervisor process.
function M.run(id)
  assert(state.valid_id(id), "invalid sandbox id")
  local code = async.run(main, id):await()
  os.exit(code or 0)
end

return M
