--- dsh.sandbox.supervisor: the one host process that keeps a local sandbox up.
--
-- Started detached (its own session) by create/connect. It claims the
-- sandbox's identities, creates its cgroups and runs dsh-launch, which starts
-- bubblewrap (dsh.sandbox.bwrap) with --die-with-parent; it hands the access
-- token to the launcher on stdin, learns the sandbox's first process from the
-- launcher's stdout, and drains the sandbox's stderr (dshd's and
-- bubblewrap's) into the log, bounded, each line marked as the sandbox's and
-- never taken for the host's own words (dsh.sandbox.state.log_tail). dshd
-- listens on a socket the launcher bound in the state directory; once it
-- answers there and the network is attached (when asked for), the supervisor
-- writes the `ready` record the host waits for. Nothing the host uses to find
-- or trust a sandbox is writable from inside, and the host never reads a file
-- the sandbox can write. On SIGTERM (pause or kill from the host) it kills
-- every process of the sandbox and exits only once all are gone
-- (dsh.sandbox.reap); files stay. When dshd exits on its idle timeout,
-- onTimeout decides: "pause" keeps the files, "kill" deletes the sandbox. If
-- this process dies, bubblewrap (and so the sandbox) dies with it.
local async = require "dsh.async"
local bwrap = require "dsh.sandbox.bwrap"
local envd = require "dsh.envd"
local limits = require "dsh.sandbox.limits"
local loop = require "dsh.core.loop"
local network = require "dsh.sandbox.network"
local proc = require "dsh.core.proc"
local reap = require "dsh.sandbox.reap"
local state = require "dsh.sandbox.state"
local sys = require "dsh.core.sysutil"
local uids = require "dsh.sandbox.uids"
local disk = require "dsh.sandbox.disk"

local M = {}

M.EXIT_IDLE = 3 -- dshd's exit status after --idle-timeout-ms
M.START_TIMEOUT_MS = 20000
M.MAX_SANDBOX_LOG_BYTES = 256 * 1024 -- of the sandbox's stderr per start; the rest is dropped

local function log(fmt, ...)
  io.stderr:write(state.now(), " ", string.format(fmt, ...), "\n")
  io.stderr:flush()
end

-- Remove dshd's socket and the ready record (only when nothing runs).
local function clear(id)
  os.remove(state.socket(id))
  os.remove(state.ready_path(id))
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

--- The sandbox's stderr (p's) into the log (out, default this process's
-- stderr): each line marked as the sandbox's, its control bytes escaped (a
-- line can never pass for one of the host's), cut at 1 KiB, and at most
-- MAX_SANDBOX_LOG_BYTES of it in all (the rest is dropped, once said so).
-- Returns at the end of the stream.
function M.drain(p, id, out)
  out = out or io.stderr
  local seen, dropped, rest = 0, false, ""
  local function line(s)
    if seen >= M.MAX_SANDBOX_LOG_BYTES then
      if not dropped then
        out:write(state.now(), " ", string.format("sandbox %s: further output of the sandbox dropped (%d bytes "
          .. "logged)", id, seen), "\n")
      end
      dropped = true
      return
    end
    seen = seen + #s + 1
    s = s:sub(1, 1024):gsub("[%c\127]", function(c) return string.format("\\x%02x", c:byte()) end)
    out:write(state.now(), " ", state.SANDBOX_TAG, " ", s, "\n")
  end
  while true do
    local chunk = p:read("stderr")
    if not chunk then break end
    local at = 1
    while true do
      local nl = chunk:find("\n", at, true)
      if not nl then break end
      line(rest .. chunk:sub(at, nl - 1))
      rest, at = "", nl + 1
    end
    rest = rest .. chunk:sub(at)
    if #rest > 4096 then -- a line that never ends is logged in pieces
      line(rest)
      rest = ""
    end
    out:flush()
  end
  if rest ~= "" then line(rest) end
  out:flush()
end

-- "command M" and "pid N" from the launcher's stdout: M, N (nil at EOF).
local function read_pids(p)
  local seen = ""
  while true do
    local cmd, pid = seen:match("command (%d+)\npid (%d+)\n")
    if pid then return tonumber(cmd), tonumber(pid) end
    local chunk = p:read()
    if not chunk or #seen > 4096 then return nil end
    seen = seen .. chunk
  end
end

-- Wait for the sandbox's first process, attach the network, and wait for
-- dshd to answer. Returns the slirp4netns process (or false without network),
-- or nil, why.
local function start(id, meta, p, rt, stopping)
  local deadline = loop.now_ms() + M.START_TIMEOUT_MS
  local tag, cmd, pid = async.timeout(M.START_TIMEOUT_MS, function() return "pids", read_pids(p) end)
  if tag ~= "pids" or not pid then
    return nil, stopping() and "stopped while starting" or "the launcher did not start the sandbox"
  end
  rt.init = sys.pid_record(pid)
  state.write_runtime(id, rt)
  -- dshd listens on the launcher's socket: its first answer says bubblewrap
  -- is done setting the sandbox up (the network namespace's loopback too,
  -- which slirp4netns must not race)
  local client = envd.client { unix_socket = state.socket(id), access_token = meta.token }
  local ok, herr
  while loop.now_ms() < deadline and not stopping() do
    -- short tries, so that a stop (pause or kill) while starting is seen at once
    ok, herr = client:health { timeout_ms = math.max(1, math.min(250, math.floor(deadline - loop.now_ms()))) }
    if ok or not p:status().running then break end
    async.sleep(5)
  end
  client:close()
  if not ok then
    if stopping() then return nil, "stopped while starting" end
    return nil, "dshd did not answer within " .. M.START_TIMEOUT_MS .. " ms (" .. tostring(herr and herr.message) .. ")"
  end
  local net = false
  if meta.network ~= false then
    local target = { pid = pid }
    if meta.identities == "dedicated" then
      target.owner, target.launcher = meta.root_uid, meta.launcher or bwrap.launcher(meta.dshd)
    elseif bwrap.netns_made { network = true, separate = meta.identities == "subordinate" } then
      target.userns_of = cmd
    end
    local err
    net, err = network.start(target)
    if not net then return nil, err.message end
  end
  assert(sys.write_file(state.ready_path(id), "", "600"))
  return net
end

-- Identities: claimed again at every start (a claim outlives only the sandbox).
local function claim(meta, dir)
  local key = uids.key(meta)
  if not key then return true end
  return uids.claim(key, dir, meta.identities == "dedicated" and meta.uid or nil)
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

  local ok, why = claim(meta, dir)
  if not ok then return give_up("%s", why) end
  if meta.identities == "dedicated" then sys.mkdir_p(bwrap.STAGE, "755") end
  local plan = meta.limits or {}
  local groups, gerr = limits.create(id, plan)
  if not groups then
    limits.remove(limits.paths(id, plan))
    return give_up("%s", gerr)
  end
  local rt = { cgroups = groups }
  state.write_runtime(id, rt)
  local nproc = plan.maxProcesses or limits.DEFAULT_MAX_PROCESSES
  if meta.identities == "shared" then nproc = nproc + tasks_of(sys.getuid()) end

  local argv = bwrap.launch_argv {
    id = id, dir = dir, dshd = meta.dshd, launcher = meta.launcher, network = meta.network ~= false,
    idle_timeout_ms = meta.timeout_ms,
    ids = { mode = meta.identities or "shared", root_uid = meta.root_uid, root_gid = meta.root_gid or meta.root_uid,
      uid = meta.uid, gid = meta.gid or meta.uid },
    image = disk.has_image(dir), nproc = nproc,
    max_open_files = plan.maxOpenFiles or limits.DEFAULT_MAX_OPEN_FILES,
    dshd_open_files = limits.dshd_open_files(nproc),
    cgroup_procs = require("dsh.sandbox.cgroups").procs_files(groups),
    sysctls = limits.ns_sysctls(), etc = meta.etc,
  }
  local p, err = proc.spawn { argv = argv, env = bwrap.env(), stdin = "pipe", stdout = "pipe", stderr = "pipe" }
  if not p then
    limits.remove(groups)
    return give_up("cannot start the sandbox's launcher: %s", tostring(err and err.message or err))
  end
  rt.bwrap = sys.pid_record(p.pid)
  state.write_runtime(id, rt)
  log("sandbox %s started (pid %d, uids %s/%s, %s identities)", id, p.pid, tostring(meta.root_uid or sys.getuid()),
    tostring(meta.uid or sys.getuid()), tostring(meta.identities or "shared"))
  p:write(meta.token)
  p:close_stdin()
  local drained = async.run(M.drain, p, id)

  local stopping = false
  local watchers = {}
  for _, sig in ipairs { 15, 2, 1 } do
    watchers[#watchers + 1] = loop.on_signal(sig, function()
      stopping = true
      p:signal("SIGKILL", true)
      -- a frozen sandbox (stopped from outside) dies only once thawed
      limits.freeze(groups, false)
    end)
  end
  local net, serr = start(id, meta, p, rt, function() return stopping end)
  if not net and net ~= false then
    log("sandbox %s failed to start: %s", id, serr)
    p:signal("SIGKILL", true)
  end
  local st = p:wait()
  os.remove(state.ready_path(id))
  network.kill(net or nil) -- its exit overlaps the sandbox's
  local rok, rerr = reap.all(rt, meta.root_uid, meta.uid)
  if not rok then log("sandbox %s: %s", id, rerr.message) end
  network.stop(net or nil)
  p:wait_quiescent()
  drained:await()
  p:close()
  for _, w in ipairs(watchers) do w:close() end
  if rok then -- else the record stays, for the host to finish the job
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
    uids.release(uids.key(meta), dir)
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
