--- dsh.sandbox: local sandboxes with E2B's lifecycle.
--
-- create() starts dshd inside bubblewrap (see dsh.sandbox.bwrap) and returns a
-- handle with an envd client; the sandbox outlives this process. connect(id)
-- reattaches, restarting a paused sandbox over the same files; pause(id) stops
-- every process and keeps the files; kill(id) stops everything and deletes the
-- files; an idle timeoutMs pauses or kills it as configured. State lives under
-- the user's state directory (XDG), never in a project tree.
local async = require "dsh.async"
local envd = require "dsh.envd"
local errors = require "dsh.errors"
local proc = require "dsh.proc"
local sys = require "dsh.sysutil"
local F = require "dsh._ffi"
local state = require "dsh.sandbox.state"
local bwrap = require "dsh.sandbox.bwrap"

local M = {}

M.DEFAULT_TIMEOUT_MS = 300000
M.READY_TIMEOUT_MS = 20000

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

--- Path of the dshd binary to run inside sandboxes.
function M.dshd_path()
  local candidates = { os.getenv("DSH_DSHD") }
  if os.getenv("DSH_BUILD_DIR") then candidates[#candidates + 1] = os.getenv("DSH_BUILD_DIR") .. "/bin/dshd" end
  -- beside the library: <build>/lib/libdsh.so or <prefix>/lib/lua/5.1/libdsh.so
  local prefix = F.path:match("^(.*)/lib/")
  if prefix then candidates[#candidates + 1] = prefix .. "/bin/dshd" end
  candidates[#candidates + 1] = sys.which("dshd")
  for _, p in ipairs(candidates) do
    if p and sys.exists(p) then return p end
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
  local env = {
    PATH = os.getenv("PATH") or "/usr/bin:/bin",
    HOME = os.getenv("HOME") or "/",
    LUA_PATH = package.path,
    LUA_CPATH = package.cpath,
    DSH_LIB = F.path,
    DSH_STATE_DIR = sys.state_dir(),
  }
  local p, err = proc.spawn {
    -- setsid -f: the supervisor gets its own session and survives this process
    argv = { "setsid", "-f", "sh", "-c", 'exec "$0" -e "$1" >>"$2" 2>&1 </dev/null',
      interpreter(), code, dir .. "/sandbox.log" },
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

-- Wait for dshd's ready file; returns the client address or nil, err.
local function wait_ready(id, timeout_ms)
  local dir = state.dir(id)
  local waited, seen_supervisor = 0, false
  while waited < timeout_ms do
    local ready = sys.read_file(dir .. "/run/ready")
    if ready and ready:sub(-1) == "\n" then return (ready:gsub("%s+$", "")) end
    local alive = state.supervisor_pid(id) ~= nil
    seen_supervisor = seen_supervisor or alive
    if (seen_supervisor and not alive) or (not seen_supervisor and waited > 5000) then
      return nil, errors.new("unavailable", "sandbox " .. id .. " failed to start: " .. state.log_tail(id, 5))
    end
    async.sleep(5)
    waited = waited + 5
  end
  return nil, errors.new("deadline_exceeded", "sandbox " .. id .. " did not become ready within "
    .. timeout_ms .. " ms: " .. state.log_tail(id, 5))
end

local function client_for(id, meta, address)
  local opts = { access_token = meta.token, user = "user" }
  if address:sub(1, 1) == "/" then
    opts.unix_socket = state.dir(id) .. "/run/" .. address:match("[^/]+$")
  else
    opts.url = "http://" .. address
  end
  return envd.client(opts)
end

-- Bring a paused sandbox up (or find the running one) and attach to it.
local function attach(id, meta)
  if not state.supervisor_pid(id) then
    -- A supervisor that died (SIGKILL, a crash) left its dshd's ready file and
    -- socket behind; the new one must not be mistaken for them.
    os.remove(state.dir(id) .. "/run/ready")
    os.remove(state.dir(id) .. "/run/dshd.sock")
    local ok, err = launch(id)
    if not ok then return nil, err end
  end
  local address, err = wait_ready(id, M.READY_TIMEOUT_MS)
  if not address then return nil, err end
  local client = client_for(id, meta, address)
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
    timeout_ms = meta.timeout_ms, on_timeout = meta.on_timeout,
  }, Sandbox)
end

---@class dsh.SandboxCreateOpts
---@field timeoutMs number|nil    idle time after which the sandbox pauses or is killed (default 300000)
---@field onTimeout string|nil    "pause" or "kill" (default "kill", as E2B)
---@field network boolean|nil     false: no network; dshd is reached through a unix socket
---@field envs table|nil          environment variables for every process in the sandbox
---@field metadata table|nil      string map kept with the sandbox

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
  local on_timeout = opts.onTimeout or "kill"
  if on_timeout ~= "pause" and on_timeout ~= "kill" then
    error(MOD .. ": create: onTimeout must be \"pause\" or \"kill\"", 2)
  end
  errors.check(MOD, "create: envs", opts.envs, "table", true)
  errors.check(MOD, "create: metadata", opts.metadata, "table", true)
  local dshd = M.dshd_path()
  if not dshd then
    return nil, errors.new("failed_precondition", "dshd not found (build with `make`, or set DSH_DSHD)")
  end
  if not sys.which("bwrap") then
    return nil, errors.new("failed_precondition", "bubblewrap (bwrap) is not installed")
  end

  local id = sys.random_id(20)
  local dir = state.dir(id)
  local rok, rerr = sys.mkdir_p(state.root(), "700")
  if not rok then
    return nil, errors.new("internal",
      "cannot create the sandbox state directory " .. state.root() .. ": " .. tostring(rerr))
  end
  for _, sub in ipairs { "", "/home", "/tmp", "/run", "/etc" } do
    local ok, err = sys.mkdir_p(dir .. sub, sub == "/tmp" and "1777" or "700")
    if not ok then return nil, errors.new("internal", "cannot create " .. dir .. sub .. ": " .. tostring(err)) end
  end
  sys.chmod(dir .. "/home", "755")
  for name, text in pairs(bwrap.etc_files(id)) do sys.write_file(dir .. "/etc/" .. name, text, "644") end
  local meta = {
    id = id, created_at = os.date("!%Y-%m-%dT%H:%M:%SZ"), timeout_ms = timeout, on_timeout = on_timeout,
    network = opts.network ~= false, envs = opts.envs or {}, metadata = opts.metadata or {},
    token = sys.random_hex(32), dshd = dshd,
  }
  state.write_meta(id, meta)
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
  return attach(id, state.read_meta(id))
end

-- Stop the supervisor (and with it every process of the sandbox); wait for it.
local function stop(id)
  local record = sys.read_file(state.dir(id) .. "/supervisor.pid")
  local pid = sys.live_pid(record)
  if not pid then return true end
  sys.kill(pid, 15)
  -- the supervisor removes its pid file and then exits: wait for the process
  for _ = 1, 1000 do
    if not sys.live_pid(record) then return true end
    async.sleep(5)
  end
  sys.kill(pid, 9) -- bubblewrap runs with --die-with-parent: the sandbox goes with it
  for _ = 1, 200 do
    if not sys.live_pid(record) then break end
    async.sleep(5)
  end
  os.remove(state.dir(id) .. "/supervisor.pid")
  return true
end

--- Stop every process of the sandbox and keep its files.
function M.pause(id)
  errors.check(MOD, "pause: id", id, "string")
  if not state.exists(id) then return nil, not_found(id) end
  stop(id)
  return true
end

--- Stop everything and delete the sandbox's files.
function M.kill(id)
  errors.check(MOD, "kill: id", id, "string")
  if not state.valid_id(id) or not sys.is_dir(state.dir(id)) then return nil, not_found(id) end
  stop(id)
  local ok, err = sys.rm_rf(state.dir(id))
  if not ok then return nil, errors.new("internal", "cannot delete sandbox " .. id .. ": " .. tostring(err)) end
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
        timeout_ms = meta.timeout_ms, on_timeout = meta.on_timeout,
      }
    end
  end
  table.sort(out, function(a, b) return (a.created_at or "") < (b.created_at or "") end)
  return out
end

function M.exists(id)
  return state.exists(id)
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

--- Host path of a directory of the sandbox (home, tmp), for tests and tools.
function Sandbox:host_path(which)
  return state.dir(self.id) .. "/" .. which
end

M.Sandbox = Sandbox
return M
