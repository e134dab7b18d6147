--- dsh.sandbox: local sandboxes with E2B's lifecycle.
--
-- create() starts dshd inside bubblewrap (see dsh.sandbox.bwrap) and returns a
-- handle with an envd client; the sandbox outlives this process. connect(id)
-- reattaches, restarting a paused sandbox over the same files; pause(id) stops
-- every process and keeps the files; kill(id) stops everything and deletes the
-- files; an idle timeoutMs pauses or kills it as configured. State lives under
-- the user's state directory (XDG), never in a project tree.
--
-- Containment (docs/security.md, and docs/decisions.md "Local sandboxes"):
-- the host reaches dshd only through a unix socket the sandbox cannot touch;
-- dshd runs as the sandbox's root and commands as `user`, two host uids
-- (dsh.sandbox.uids), so code in the sandbox cannot touch its daemon; a
-- system-call filter and no nested user namespaces; processes, memory, CPU,
-- open files and disk are limited (dsh.sandbox.limits, dsh.sandbox.disk);
-- every sandbox has its own network namespace (outbound only,
-- dsh.sandbox.network); pause and kill return once every process of the
-- sandbox is gone (dsh.sandbox.reap).
local async = require "dsh.async"
local envd = require "dsh.envd"
local errors = require "dsh.errors"
local lfs = require "lfs"
local loop = require "dsh.core.loop"
local proc = require "dsh.core.proc"
local sys = require "dsh.core.sysutil"
local state = require "dsh.sandbox.state"
local bwrap = require "dsh.sandbox.bwrap"
local limits = require "dsh.sandbox.limits"
local network = require "dsh.sandbox.network"
local reap = require "dsh.sandbox.reap"
local uids = require "dsh.sandbox.uids"
local disk = require "dsh.sandbox.disk"

local M = {}

M.DEFAULT_TIMEOUT_MS = 300000
-- The one default of every layer (ctx.e2b, this module, `dsh sandbox create`):
-- the reference's. E2B's SDK defaults to "kill"; a paused sandbox loses only
-- its processes, and ctx.e2b resumes it on the next call.
M.DEFAULT_ON_TIMEOUT = "pause"
M.READY_TIMEOUT_MS = 20000
M.STOP_TIMEOUT_MS = 30000

local MOD = "dsh.sandbox"

---@class dsh.Sandbox
---@field id string
---@field envd dsh.EnvdClient
---@field network boolean
local Sandbox = {}
Sandbox.__index = Sandbox
Sandbox.__tostring = function(s)
  return "dsh.sandbox(" .. s.id .. (s._closed and ", closed" or "") .. ")"
end

local function not_found(id)
  return errors.new("not_found", "sandbox " .. tostring(id) .. " not found")
end

-- Directory of this source file (…/lua/dsh/sandbox in a clone, or the
-- installed Lua tree).
local function here()
  local src = debug.getinfo(1, "S").source
  return src:sub(1, 1) == "@" and src:sub(2):match("^(.*)/[^/]*$") or "."
end

--- Path of the dshd binary to run inside sandboxes: $DSH_DSHD,
-- $DSH_BUILD_DIR/bin/dshd, this clone's build/bin/dshd, the bin directory of
-- the tree dsh is installed in (beside lib/lua/5.1/libdsh.so or
-- share/lua/5.1/dsh: cmake --install and luarocks), then $PATH.
function M.dshd_path()
  local candidates = { os.getenv("DSH_DSHD") }
  if os.getenv("DSH_BUILD_DIR") then candidates[#candidates + 1] = os.getenv("DSH_BUILD_DIR") .. "/bin/dshd" end
  candidates[#candidates + 1] = here() .. "/../../../build/bin/dshd"
  local lib = package.searchpath("libdsh", package.cpath)
  local prefix = lib and lib:match("^(.*)/lib/")
  if prefix then candidates[#candidates + 1] = prefix .. "/bin/dshd" end
  prefix = here():match("^(.*)/share/lua/")
  if prefix then candidates[#candidates + 1] = prefix .. "/bin/dshd" end
  candidates[#candidates + 1] = sys.which("dshd")
  for _, p in ipairs(candidates) do
    if p and lfs.attributes(p, "mode") == "file" then return p end
  end
  return nil
end

local function interpreter()
  return os.getenv("DSH_LUAJIT") or sys.which("luajit") or "/usr/bin/luajit"
end

-- Start the detached supervisor for id; returns once it is launched.
local function launch(id)
  local dir = state.dir(id)
  local code = string.format("require('dsh.sandbox.supervisor').run(%q)", id)
  local log = dir .. "/sandbox.log"
  if (lfs.symlinkattributes(log, "size") or 0) > state.MAX_LOG_BYTES then os.rename(log, log .. ".1") end
  if not sys.exists(log) then sys.write_file(log, "", "600") end
  local env = {
    PATH = os.getenv("PATH") or "/usr/bin:/bin",
    HOME = os.getenv("HOME") or "/",
    LUA_PATH = package.path,
    LUA_CPATH = package.cpath,
    DSH_STATE_DIR = sys.state_dir(),
  }
  -- the supervisor finds the core library as this process did
  env.DSH_LIB, env.DSH_BUILD_DIR = os.getenv("DSH_LIB"), os.getenv("DSH_BUILD_DIR")
  env.LD_LIBRARY_PATH = os.getenv("LD_LIBRARY_PATH")
  env.DSH_NODE_DIR = os.getenv("DSH_NODE_DIR") -- Code Mode's Node (dsh.node)
  local p, err = proc.spawn {
    -- setsid -f: the supervisor gets its own session and survives this process
    argv = { "setsid", "-f", "sh", "-c", 'exec "$0" -e "$1" >>"$2" 2>&1 </dev/null',
      interpreter(), code, log },
    env = env, stdin = "null", stdout = "null", stderr = "null",
  }
  if not p then return nil, errors.new("internal", "cannot launch the sandbox supervisor: " .. err.message) end
  local st = p:wait()
  -- setsid -f's child leaves our group only once it has called setsid();
  -- close() SIGKILLs whatever is left of the group, so wait for it to empty.
  p:wait_quiescent()
  p:close()
  if st.exit_code ~= 0 then
    return nil, errors.new("internal",
      "cannot launch the sandbox supervisor (setsid exit " .. tostring(st.exit_code) .. ")")
  end
  return true
end

-- Wait until the supervisor says dshd answers (its `ready` record in the
-- state directory, which only the host writes); true or nil, err.
local function wait_ready(id, timeout_ms)
  local start = loop.now_ms()
  local seen_supervisor = false
  while loop.now_ms() - start < timeout_ms do
    if lfs.symlinkattributes(state.ready_path(id), "mode") == "file" then return true end
    local alive = state.supervisor_pid(id) ~= nil
    seen_supervisor = seen_supervisor or alive
    if (seen_supervisor and not alive) or (not seen_supervisor and loop.now_ms() - start > 5000) then
      return nil, errors.new("unavailable", "sandbox " .. id .. " failed to start: " .. state.log_tail(id, 5, true))
    end
    async.sleep(2)
  end
  return nil, errors.new("deadline_exceeded", "sandbox " .. id .. " did not become ready within "
    .. timeout_ms .. " ms: " .. state.log_tail(id, 5, true))
end

-- A sandbox made before sandboxes had two identities and limits of their own
-- (or moved to another host) gets them when it next starts; it keeps its
-- files in directories (no disk image, so no disk limit).
local function upgrade(id, meta)
  local changed = false
  if not meta.limits then
    meta.limits = limits.plan {}
    changed = true
  end
  if not meta.identities then
    local dir = state.dir(id)
    local old = meta.uid
    local ids, why = uids.allocate(dir)
    if not ids then return nil, errors.new("unavailable", why) end
    if ids.mode ~= "shared" then
      for _, d in ipairs { "home", "tmp" } do sys.mkdir_p(dir .. "/" .. d, "755") end
      local ok, cerr = uids.chown(ids.uid, { dir .. "/home", dir .. "/tmp" }, true, ids.gid)
      if ok and ids.mode == "dedicated" then
        ok, cerr = uids.chown(ids.root_uid, { dir .. "/tmp" }, false, ids.root_gid)
      end
      if not ok then return nil, errors.new("internal", cerr) end
      sys.chmod(dir .. "/tmp", "1777")
    end
    if uids.ours(old) then uids.release(old, dir) end
    meta.identities, meta.root_uid, meta.root_gid, meta.uid, meta.gid =
      ids.mode, ids.root_uid, ids.root_gid, ids.uid, ids.gid
    if ids.mode == "dedicated" then sys.chmod(dir, "711") end
    changed = true
  end
  -- /etc files a newer dsh generates (resolv.conf, cmdline)
  for name, text in pairs(bwrap.etc_files(id, meta.network ~= false and network.RESOLV_CONF or nil)) do
    local path = state.dir(id) .. "/etc/" .. name
    if not sys.exists(path) then sys.write_file(path, text, "644") end
  end
  if changed then state.write_meta(id, meta) end
  return true
end

--- What is left of the sandbox's processes after its supervisor ended.
local function reap_leftovers(id, meta)
  local ok, err = reap.all(state.read_runtime(id), meta and meta.root_uid, meta and meta.uid)
  if not ok then return nil, err end
  local rt = state.read_runtime(id)
  if rt then limits.remove(rt.cgroups) end
  os.remove(state.dir(id) .. "/runtime.json")
  return true
end

-- Bring a paused sandbox up (or find the running one) and attach to it.
local function attach(id, meta)
  if not state.supervisor_pid(id) then
    -- A supervisor that died (SIGKILL, a crash) may have left processes, its
    -- groups and dshd's socket behind; the new one must not meet them.
    local ok, err = reap_leftovers(id, meta)
    if not ok then return nil, err end
    ok, err = upgrade(id, meta)
    if not ok then return nil, err end
    os.remove(state.socket(id))
    os.remove(state.ready_path(id))
    ok, err = launch(id)
    if not ok then return nil, err end
  end
  local ready, err = wait_ready(id, M.READY_TIMEOUT_MS)
  if not ready then return nil, err end
  local client = envd.client { unix_socket = state.socket(id), access_token = meta.token, user = "user",
    activity = function() return M.daemon_activity(id) end }
  local ok, herr = client:health()
  if not ok then
    client:close()
    return nil, herr
  end
  if meta.envs and next(meta.envs) then
    local _, ierr = client:init { envVars = meta.envs }
    if ierr then
      client:close()
      return nil, ierr
    end
  end
  return setmetatable({
    id = id, envd = client, network = meta.network ~= false, metadata = meta.metadata,
    timeout_ms = meta.timeout_ms, on_timeout = meta.on_timeout, limits = M.limits_of(meta),
  }, Sandbox)
end

-- The host pid of a running sandbox's dshd (its first process's child), or nil.
local function dshd_pid(rt)
  local init = rt and type(rt.init) == "string" and rt.init:match("^(%d+)")
  local children = init and sys.read_file("/proc/" .. init .. "/task/" .. init .. "/children")
  return children and tonumber(children:match("%d+")) or nil
end

--- What the host sees of a running sandbox's dshd: {cpu = clock ticks of
-- CPU it used, stopped = it is stopped or frozen}, or nil (not running).
-- The envd client asks it when a probe goes unanswered (dsh.envd._watch):
-- a dshd at work on a loaded host is slow, not frozen. Only the host's own
-- view (/proc, the freezer): nothing the sandbox writes.
function M.daemon_activity(id)
  local rt = state.read_runtime(id)
  local pid = dshd_pid(rt)
  local stat = pid and sys.read_file("/proc/" .. pid .. "/stat")
  local fields = {}
  for f in (stat and stat:match("^%d+ %b() (.*)$") or ""):gmatch("%S+") do fields[#fields + 1] = f end
  if #fields < 13 then return nil end
  local stopped = fields[1] == "T" or fields[1] == "t" or require("dsh.sandbox.cgroups").is_frozen(rt.cgroups)
  return { cpu = tonumber(fields[12]) + tonumber(fields[13]), stopped = stopped }
end

--- The limits a sandbox runs with (nil: not enforced on this host), and how
-- it is isolated: `identities` is "separate" (dshd and commands are two host
-- uids: code in the sandbox cannot touch dshd) or "shared" (a host without
-- root nor subordinate ids: they share one; see the README).
function M.limits_of(meta)
  local l = meta.limits or {}
  return {
    maxProcesses = l.maxProcesses, memoryMb = l.memoryMb, cpus = l.cpus, maxOpenFiles = l.maxOpenFiles,
    diskMb = disk.has_image(state.dir(meta.id or "")) and l.diskMb or nil,
    identities = (meta.identities == nil or meta.identities == "shared") and "shared" or "separate",
  }
end

---@class dsh.SandboxCreateOpts
---@field timeoutMs number|nil    idle time after which the sandbox pauses or is killed (default 300000)
---@field onTimeout string|nil    "pause" (default) or "kill"
---@field network boolean|nil     true (default): outbound access through slirp4netns, never the
---                               host's loopback; false: no network at all (loopback only)
---@field envs table|nil          environment variables for every process in the sandbox
---@field metadata table|nil      string map kept with the sandbox
---@field maxProcesses integer|nil processes and threads together (default 1024)
---@field memoryMb integer|nil    memory (default: half the host's, at most 4096)
---@field cpus number|nil         CPU time in CPUs (default: the host's CPUs but one, at least 1)
---@field maxOpenFiles integer|nil open files per process (default 1024, less when the host's fs.file-max is small)
---@field diskMb integer|nil      bytes written under /home/user and /tmp (root hosts; default a quarter of
---                               the free space, at most 10240)
---@field etc string[]|nil        host /etc entries to mount read-only beyond the default few ("gitconfig")

--- Create and start a local sandbox. Returns a sandbox handle or nil, err.
---@param opts dsh.SandboxCreateOpts|nil
---@return dsh.Sandbox|nil, dsh.Error|nil
function M.create(opts)
  opts = opts or {}
  errors.check(MOD, "create: opts", opts, "table")
  local timeout = opts.timeoutMs or M.DEFAULT_TIMEOUT_MS
  if type(timeout) ~= "number" or timeout <= 0 or timeout ~= timeout or timeout == math.huge then
    error(MOD .. ": create: timeoutMs must be a positive finite number", 2)
  end
  local on_timeout = opts.onTimeout or M.DEFAULT_ON_TIMEOUT
  if on_timeout ~= "pause" and on_timeout ~= "kill" then
    error(MOD .. ": create: onTimeout must be \"pause\" or \"kill\"", 2)
  end
  errors.check(MOD, "create: envs", opts.envs, "table", true)
  errors.check(MOD, "create: metadata", opts.metadata, "table", true)
  errors.check(MOD, "create: network", opts.network, "boolean", true)
  limits.check(MOD, opts)
  bwrap.check_etc(MOD, opts.etc)
  local dshd = M.dshd_path()
  if not dshd then
    return nil, errors.new("failed_precondition", "dshd not found (build with `make`, or set DSH_DSHD)")
  end
  local launcher = bwrap.launcher(dshd)
  if not launcher then
    return nil, errors.new("failed_precondition", "dsh-launch not found beside " .. dshd .. " (build with `make`)")
  end
  if not sys.which("bwrap") then
    return nil, errors.new("failed_precondition", "bubblewrap (bwrap) is not installed")
  end
  local with_network = opts.network ~= false
  if with_network and not network.available() then
    return nil, errors.new("failed_precondition",
      "slirp4netns is not installed (it gives sandboxes their outbound network; or pass network = false)")
  end
  local unusable = with_network and network.unusable()
  if unusable then return nil, errors.new("failed_precondition", unusable) end
  local id = sys.random_id(20)
  local dir = state.dir(id)
  if #state.socket(id) > 107 then
    return nil, errors.new("failed_precondition", "the sandbox state directory " .. state.root()
      .. " is too long for a unix socket path (set DSH_STATE_DIR or XDG_STATE_HOME to a shorter one)")
  end
  local rok, rerr = sys.mkdir_p(state.root(), "700")
  if not rok then
    return nil, errors.new("internal",
      "cannot create the sandbox state directory " .. state.root() .. ": " .. tostring(rerr))
  end
  local plan, perr = limits.plan(opts)
  if not plan then return nil, perr end
  plan.diskMb, perr = disk.plan(opts.diskMb, state.root())
  if perr then return nil, perr end
  for _, sub in ipairs { "", "/etc" } do
    local ok, err = sys.mkdir_p(dir .. sub, "700")
    if not ok then return nil, errors.new("internal", "cannot create " .. dir .. sub .. ": " .. tostring(err)) end
  end
  sys.chmod(dir .. "/etc", "755")
  for name, text in pairs(bwrap.etc_files(id, with_network and network.RESOLV_CONF or nil)) do
    sys.write_file(dir .. "/etc/" .. name, text, "644")
  end
  local meta = {
    id = id, created_at = os.date("!%Y-%m-%dT%H:%M:%SZ"), timeout_ms = timeout, on_timeout = on_timeout,
    network = with_network, envs = opts.envs or {}, metadata = opts.metadata or {},
    token = sys.random_hex(32), dshd = dshd, launcher = launcher, limits = plan, etc = opts.etc,
  }
  local ids, why = uids.allocate(dir)
  if not ids then
    sys.rm_rf(dir)
    return nil, errors.new("unavailable", why)
  end
  meta.identities, meta.root_uid, meta.root_gid, meta.uid, meta.gid =
    ids.mode, ids.root_uid, ids.root_gid, ids.uid, ids.gid
  state.write_meta(id, meta) -- so that kill releases the claim whatever fails next
  if ids.mode == "dedicated" then
    -- the launcher reaches the state directory (0711) as the sandbox's root;
    -- the sandbox's files live in its disk image when it has a limit
    sys.chmod(dir, "711")
    if plan.diskMb then
      local ok, derr = disk.create(dir, plan.diskMb, ids.root_uid, ids.root_gid)
      if not ok then
        M.kill(id)
        return nil, errors.new("internal", "cannot make the sandbox's disk: " .. derr)
      end
    else
      for _, d in ipairs { "home", "tmp" } do sys.mkdir_p(dir .. "/" .. d, d == "tmp" and "1777" or "755") end
      local ok, cerr = uids.chown(ids.uid, { dir .. "/home" }, false, ids.gid)
      if ok then ok, cerr = uids.chown(ids.root_uid, { dir .. "/tmp" }, false, ids.root_gid) end
      if not ok then
        M.kill(id)
        return nil, errors.new("internal", cerr)
      end
    end
  end
  local sb, err = attach(id, meta)
  if not sb then
    M.kill(id)
    return nil, err
  end
  return sb
end

--- Reattach to a sandbox, resuming it when paused.
function M.connect(id)
  errors.check(MOD, "connect: id", id, "string")
  if not state.exists(id) then return nil, not_found(id) end
  local meta = state.read_meta(id)
  if not meta then return nil, errors.new("internal", "sandbox " .. id .. " has an unreadable record") end
  return attach(id, meta)
end

-- Stop the supervisor (which ends every process of the sandbox), wait for it,
-- and make sure nothing of the sandbox is left running.
local function stop(id)
  local record = state.supervisor_record(id)
  local pid = sys.live_pid(record)
  if pid then
    sys.kill(pid, 15)
    -- the supervisor exits once every process is gone: wait for the process
    local start = loop.now_ms()
    while sys.live_pid(record) and loop.now_ms() - start < M.STOP_TIMEOUT_MS do async.sleep(2) end
    if sys.live_pid(record) then
      sys.kill(pid, 9) -- bubblewrap runs with --die-with-parent: the sandbox goes with it
      while sys.live_pid(record) do async.sleep(2) end
    end
    -- a connect may have started the sandbox again meanwhile (a context
    -- resuming it): its supervisor's record and what it runs are its own
    if state.supervisor_record(id) == record then os.remove(state.dir(id) .. "/supervisor.pid") end
  end
  if state.supervisor_pid(id) then return true end
  return reap_leftovers(id, state.read_meta(id))
end

--- Stop every process of the sandbox and keep its files. Returns once every
-- process of the sandbox is gone.
function M.pause(id)
  errors.check(MOD, "pause: id", id, "string")
  if not state.exists(id) then return nil, not_found(id) end
  return stop(id)
end

-- Without root, what `user` made (a subordinate uid's) can be removed only
-- from a user namespace that maps it: its files go through dsh-launch's.
local function remove_as_sandbox(meta, dir)
  local i = meta
  local argv = { meta.launcher or bwrap.launcher(meta.dshd) or "dsh-launch",
    "--map-uids", string.format("0 %d 1 %d %d 1", i.root_uid, bwrap.UID, i.uid),
    "--map-gids", string.format("0 %d 1 %d %d 1", i.root_gid or i.root_uid, bwrap.GID, i.gid or i.uid),
    "--", "rm", "-rf", "--", dir .. "/home", dir .. "/tmp" }
  local p, err = proc.spawn { argv = argv, env = bwrap.env(), stdout = "null", stderr = "pipe" }
  if not p then return nil, err.message end
  local out = p:read_all("stderr") or ""
  local st = p:wait()
  p:close()
  if st.exit_code ~= 0 then return nil, "removing its files: " .. out end
  return true
end

--- Stop everything and delete the sandbox's files. Returns once every
-- process of the sandbox is gone.
function M.kill(id)
  errors.check(MOD, "kill: id", id, "string")
  if not state.valid_id(id) or not sys.is_dir(state.dir(id)) then return nil, not_found(id) end
  local meta = state.read_meta(id)
  -- gone from here on: status says so, connect (a context resuming it) refuses
  state.write_gone(id, "killed")
  state.mark_killing(id)
  local sok, serr = stop(id)
  if not sok then return nil, serr end
  local ok, err = true, nil
  if meta and meta.identities == "subordinate" then ok, err = remove_as_sandbox(meta, state.dir(id)) end
  if ok then ok, err = sys.rm_rf(state.dir(id)) end
  if not ok then return nil, errors.new("internal", "cannot delete sandbox " .. id .. ": " .. tostring(err)) end
  if meta then uids.release(uids.key(meta), state.dir(id)) end
  return true
end

--- Every local sandbox: {id=, state="running"|"paused", created_at=, metadata=, network=, ...}.
function M.list()
  local out = {}
  for _, id in ipairs(state.ids()) do
    local meta = state.read_meta(id)
    if meta then
      out[#out + 1] = {
        id = id, state = state.supervisor_pid(id) and "running" or "paused",
        created_at = meta.created_at, metadata = meta.metadata, network = meta.network ~= false,
        timeout_ms = meta.timeout_ms, on_timeout = meta.on_timeout, limits = M.limits_of(meta),
      }
    end
  end
  table.sort(out, function(a, b) return (a.created_at or "") < (b.created_at or "") end)
  return out
end

function M.exists(id)
  return state.exists(id)
end

---@class dsh.SandboxStatus
---@field state "running"|"paused"|"gone"|"unknown"
---@field reason string|nil  why it paused or went ("paused by its idle timeout (300000 ms)", "killed", ...)
---@field at string|nil      when (ISO 8601, UTC)

--- Where a sandbox stands, from the host's records alone (no request): a
-- paused one says why and when it last stopped; a deleted one, why and when
-- it went (for a week after; "unknown" when there is no record at all).
---@param id string
---@return dsh.SandboxStatus
function M.status(id)
  errors.check(MOD, "status: id", id, "string")
  if state.exists(id) then
    if state.supervisor_pid(id) then return { state = "running" } end
    local stopped = state.read_stopped(id) or {}
    return { state = "paused", reason = stopped.reason, at = stopped.at }
  end
  local gone = state.read_gone(id)
  if gone then return { state = "gone", reason = gone.reason, at = gone.at } end
  return { state = "unknown" }
end

function Sandbox:pause()
  self:close()
  return M.pause(self.id)
end

function Sandbox:kill()
  self:close()
  return M.kill(self.id)
end

--- Drop the client connection (the sandbox keeps running).
function Sandbox:close()
  if self._closed then return end
  self._closed = true
  self.envd:close()
end

M.Sandbox = Sandbox
return M
