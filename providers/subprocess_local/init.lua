--- ctx.subprocess on this machine (subprocess-local), over dsh.core.proc.
--
-- Each spawn is a process group of its own (pgid == the leader's pid). The
-- environment is this process's environment with the seam's scrub applied,
-- then the explicit env. Spill files are written here, by the host, while the
-- bytes pass through (at most spill.maxBytes bytes; whether a spill is
-- complete follows from the stream's total), under a private directory (0700) that disposal removes.
-- The terminate ladder and quiescence are the core's (dsh.core.proc).
--
-- Config: cwd (default: the current directory), ambientEnv (default: this
-- process's environment at each spawn), spillDir (default: a fresh
-- <TMPDIR>/dsh-<uid>/subprocess-<random>, removed on dispose).
local async = require "dsh.async"
local errors = require "dsh.errors"
local lfs = require "lfs"
local proc = require "dsh.core.proc"
local subprocess = require "dsh.subprocess"
local sysutil = require "dsh.core.sysutil"
local schema = require "dsh.providers.subprocess_local.schema"

local M = {
  name = "subprocess-local",
  provides = "subprocess",
  inject = {},
  validate = schema.validate,
}

local NAME = M.name

-- Processes ---------------------------------------------------------------------

local Proc = {}
Proc.__index = Proc
Proc.__tostring = function(bp) return "subprocess-local.proc(" .. bp.pid .. ")" end

local function open_spill(spill)
  local dir = spill.path:match("^(.*)/[^/]+$")
  local ok, err = sysutil.mkdir_p(dir, "700")
  if not ok then return nil, err end
  local f, ferr = io.open(spill.path, "wb")
  if not f then return nil, ferr end
  sysutil.chmod(spill.path, "600")
  return { f = f, left = spill.maxBytes }
end

local function spill_write(s, chunk)
  if not s or not s.f then return end
  local piece = #chunk > s.left and chunk:sub(1, s.left) or chunk
  if not s.f:write(piece) then s.left = 0 else s.left = s.left - #piece end
  if s.left <= 0 then
    s.f:close()
    s.f = nil
  end
end

local function spill_close(s)
  if s and s.f then
    s.f:close()
    s.f = nil
  end
end

function Proc:_pump(name, spill, on_data, done)
  local p = self._p
  while self._p do
    local chunk = p:read(name)
    if not chunk then break end
    spill_write(spill, chunk)
    on_data(name, chunk)
  end
  spill_close(spill)
  done:resolve(true)
end

function Proc:wait()
  for _, f in ipairs(self._pumps) do f:await() end
  if not self._p then return nil, errors.new("SUBPROCESS_CLOSED", NAME .. ": the process was released") end
  local st, err = self._p:wait()
  if not st then return nil, err end
  return st -- {exit_code=, signal=}, as dsh.core.proc says it
end

function Proc:write(s)
  if not self._p then return nil, errors.new("SUBPROCESS_CLOSED", NAME .. ": the process was released") end
  return self._p:write(s)
end

function Proc:close_stdin()
  if not self._p then return true end
  if self._pty then return self._p:write("\4") end
  return self._p:close_stdin()
end

function Proc:signal(sig)
  if not self._p then return nil, errors.new("SUBPROCESS_CLOSED", NAME .. ": the process was released") end
  return self._p:signal(sig, true)
end

-- The foreground process group of the terminal pid leads (field 8 of its /proc stat).
local function tpgid(pid)
  local st = sysutil.proc_stat(pid)
  return st and st.tpgid
end

function Proc:foreground()
  local fg = tpgid(self.pid)
  if not fg or fg <= 0 then
    return nil, errors.new("SUBPROCESS_NOT_FOUND", "the terminal has no foreground process group")
  end
  return fg
end

function Proc:signal_foreground(sig)
  if not self._p then return nil, errors.new("SUBPROCESS_CLOSED", NAME .. ": the process was released") end
  local num = proc.signum(sig)
  if not num then errors.misuse(NAME, "signal: unknown signal %s", tostring(sig)) end
  local fg = tpgid(self.pid)
  if not fg or fg <= 0 then fg = self.pid end
  if not sysutil.kill(-fg, num) then
    return nil, errors.new("SUBPROCESS_NOT_FOUND", "process group " .. fg .. " is gone")
  end
  return fg
end

local session_groups = sysutil.session_groups

--- Terminals: the process groups with a live member in the leader's session.
function Proc:session_groups()
  return session_groups(self.pid)
end

--- Terminals: sig to every process group of the session (SIGTERM also SIGCONT).
function Proc:signal_session(sig)
  local num = proc.signum(sig)
  if not num then errors.misuse(NAME, "signal_session: unknown signal %s", tostring(sig)) end
  for _, g in ipairs(session_groups(self.pid)) do
    if g > 1 then
      sysutil.kill(-g, num)
      if sig == "SIGTERM" then sysutil.kill(-g, proc.signum("SIGCONT")) end
    end
  end
  return true
end

--- SIGKILL every process left in the session the terminal's leader created.
function Proc:kill_session()
  return self:signal_session("SIGKILL")
end

function Proc:terminate(grace_ms)
  if self._p then self._p:terminate(grace_ms) end
  return true
end

function Proc:kill()
  if self._p then self._p:signal("SIGKILL", true) end
  return true
end

function Proc:wait_quiescent(signal)
  if not self._p then return true end -- released only once the group was gone (or killed by close)
  local ok, err = self._p:wait_quiescent(signal)
  if ok then return true end
  if err and err.code == "ABORTED" then return false end
  return nil, err
end

function Proc:resize(rows, cols)
  if not self._p then return nil, errors.new("SUBPROCESS_CLOSED", NAME .. ": the process was released") end
  return self._p:resize(rows, cols)
end

function Proc.spill_size(_, path)
  return lfs.attributes(path, "size")
end

function Proc.remove(_, paths, dir)
  for _, p in ipairs(paths) do os.remove(p) end
  if dir then lfs.rmdir(dir) end
end

function Proc:close()
  for _, s in pairs(self._spills) do spill_close(s) end
  if self._p then
    local p = self._p
    self._p = nil
    p:close()
  end
end

-- Backend -------------------------------------------------------------------------

local Backend = {}
Backend.__index = Backend

function Backend:state_dir(id)
  return self._spill_root .. "/" .. id
end

function Backend:start(spec)
  local spills = {}
  for _, name in ipairs { "stdout", "stderr" } do
    local s = spec[name]
    if s.spill then
      local sp, err = open_spill(s.spill)
      if not sp then
        for _, o in pairs(spills) do spill_close(o) end
        return nil, errors.new("SUBPROCESS_START", NAME .. ": cannot create spill file " .. s.spill.path
          .. ": " .. tostring(err))
      end
      spills[name] = sp
    end
  end
  local function mode(s) return s.mode == "inherit" and "inherit" or "pipe" end
  local env = subprocess.compose_env(self._ambient or sysutil.environ(), spec.env)
  local p, err = proc.spawn {
    argv = spec.argv, env = env, cwd = spec.cwd, pty = spec.pty,
    stdin = spec.stdin == "ignore" and "null" or "pipe",
    stdout = mode(spec.stdout), stderr = spec.pty and "null" or mode(spec.stderr),
  }
  if not p then
    for _, o in pairs(spills) do spill_close(o) end
    return nil, err
  end
  local bp = setmetatable({ pid = p.pid, _p = p, _pty = spec.pty ~= nil, _spills = spills, _pumps = {} },
    Proc)
  local streams = spec.pty and { "stdout" } or { "stdout", "stderr" }
  for _, name in ipairs(streams) do
    if spec.pty or spec[name].mode ~= "inherit" then
      local f = async.future()
      bp._pumps[#bp._pumps + 1] = f
      async.run(Proc._pump, bp, name, spills[name], spec.on_data, f)
    end
  end
  return bp
end

function Backend:resolveExecutable(cmd)
  if type(cmd) ~= "string" or cmd == "" then
    return nil, errors.new("SUBPROCESS_EXECUTABLE", NAME .. ": executable name must be non-empty")
  end
  local function executable(p)
    local attr = lfs.attributes(p)
    return attr and attr.mode == "file" and attr.permissions:find("x", 1, true) ~= nil
  end
  if cmd:sub(1, 1) == "/" then
    if executable(cmd) then return cmd end
    return nil, errors.new("SUBPROCESS_EXECUTABLE",
      string.format('%s: executable "%s" is not an executable file', NAME, cmd))
  end
  if not cmd:find("/", 1, true) then
    local env = self._ambient or sysutil.environ()
    for dir in (env.PATH or "/usr/bin:/bin"):gmatch("[^:]+") do
      if dir:sub(1, 1) == "/" and executable(dir .. "/" .. cmd) then return dir .. "/" .. cmd end
    end
  end
  return nil, errors.new("SUBPROCESS_EXECUTABLE",
    string.format('%s: executable "%s" did not resolve to one absolute path', NAME, cmd))
end

function Backend:dispose()
  if self._own_root then sysutil.rm_rf(self._spill_root) end
end

local function default_spill_root()
  local tmp = os.getenv("TMPDIR")
  if not tmp or tmp:sub(1, 1) ~= "/" then tmp = "/tmp" end
  return tmp .. "/dsh-" .. sysutil.getuid() .. "/subprocess-" .. sysutil.random_id(12)
end

--- A subprocess service on this machine for a validated config (what setup
-- publishes; pty-local runs its terminals on one of its own). Its dispose
-- ends every process and removes the spill directory it made.
---@return dsh.subprocess.Service
function M.service(cfg)
  local backend = setmetatable({
    name = NAME,
    cwd = cfg.cwd or lfs.currentdir(),
    _ambient = cfg.ambientEnv,
    _spill_root = cfg.spillDir or default_spill_root(),
    _own_root = cfg.spillDir == nil,
  }, Backend)
  if backend._own_root then
    -- the parent is per user and private: other users cannot read spills or plant links
    local parent = backend._spill_root:match("^(.*)/[^/]+$")
    sysutil.mkdir_p(parent, "700")
  end
  return subprocess.service(backend)
end

function M.setup(scope, cfg)
  local svc = M.service(cfg)
  scope:on_dispose(function() return svc:dispose() end)
  return svc
end

M.Backend = Backend
return M
