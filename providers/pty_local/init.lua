--- pty-local: persistent terminals on this machine's PTYs (dsh.proc), for
-- hosts without a sandbox. Registers a backend type (default "shell") on
-- ctx.pty; the session logic is the seam's (dsh.pty.session), shared with
-- pty-e2b.
--
-- The shell leads a new session on a new PTY. Its environment is the ambient
-- one through the project's scrub rule, then the explicit and fixed values
-- (dsh.pty.env). The foreground process group is the terminal's (field 8 of
-- /proc/<pid>/stat); closing is the session ladder (dsh.subprocess.session_ladder:
-- TERM every group, disposeGraceMs for the jobs, then hang up or KILL) and
-- returns once the session is empty: the leader's group through the core's
-- quiescence event, the other groups (jobs) by looking at /proc, with a
-- backoff, since nothing reports them.
local async = require "dsh.async"
local errors = require "dsh.errors"
local lfs = require "lfs"
local proc = require "dsh.proc"
local pty = require "dsh.pty"
local ptyenv = require "dsh.pty.env"
local session = require "dsh.pty.session"
local subprocess = require "dsh.subprocess"
local ladder = require "dsh.subprocess.session_ladder"
local sysutil = require "dsh.sysutil"
local schema = require "dsh.providers.pty_local.schema"

local M = {
  name = "pty-local",
  inject = { "pty" },
  validate = schema.validate,
}
local NAME, LABEL = M.name, "local PTY"
local codes = pty.codes
-- this host's numbers (a local backend: the core's table, dsh.proc)
local SIGHUP, SIGTERM, SIGCONT = proc.signum("SIGHUP"), proc.signum("SIGTERM"), proc.signum("SIGCONT")

-- /proc: fields of a process's stat after its command name.
local function stat_fields(pid)
  local stat = sysutil.read_file("/proc/" .. pid .. "/stat")
  local rest = stat and stat:match("^%d+ %b() (.*)$")
  if not rest then return nil end
  local f = {}
  for x in rest:gmatch("%S+") do
    f[#f + 1] = x
    if #f == 6 then break end
  end
  return f -- 1 state, 2 ppid, 3 pgrp, 4 session, 5 tty, 6 tpgid
end

--- Process groups (pgid -> true) and pids with a member alive in session sid.
local function session_members(sid)
  local groups, pids = {}, {}
  local want = tostring(sid)
  for name in lfs.dir("/proc") do
    if name:match("^%d+$") then
      local f = stat_fields(name)
      if f and f[4] == want and f[1] ~= "Z" and f[1] ~= "X" then
        groups[tonumber(f[3])] = true
        pids[#pids + 1] = tonumber(name)
      end
    end
  end
  return groups, pids
end

-- Drivers ---------------------------------------------------------------------------

local Drv = {}
Drv.__index = Drv
Drv.__tostring = function(d) return "pty-local.terminal(" .. d.pid .. (d._closed and ", closed" or "") .. ")" end

function Drv:read()
  if self._closed then return nil end
  local s, err = self._p:read()
  if self._closed then return s end
  return s, err
end

function Drv:write(s)
  if self._closed then return nil, errors.new(codes.PTY_CLOSING, NAME .. ": the terminal is closed") end
  return self._p:write(s)
end

function Drv:resize(rows, cols)
  if self._closed then return nil, errors.new(codes.PTY_CLOSING, NAME .. ": the terminal is closed") end
  return self._p:resize(rows, cols)
end

function Drv:foreground()
  local f = stat_fields(self.pid)
  local fg = f and tonumber(f[6])
  if not fg or fg <= 0 then
    return nil, errors.new(codes.PTY_SIGNAL, NAME .. ": the terminal has no foreground group")
  end
  return fg
end

function Drv:signal_foreground(sig)
  local fg, err = self:foreground()
  if not fg then return nil, err end
  if not sysutil.kill(-fg, proc.signum(sig)) then
    return nil, errors.new(codes.PTY_SIGNAL, NAME .. ": process group " .. fg .. " is gone")
  end
  return fg
end

function Drv:wait()
  return self._exit:await()
end

-- The process groups with a live member in the session, as a list.
local function groups_of(sid)
  local out = {}
  for g in pairs((session_members(sid))) do out[#out + 1] = g end
  return out
end

-- The session's close ladder (dsh.subprocess.session_ladder) over /proc and
-- the core's quiescence event for the shell's group.
function Drv:close(grace_ms, reason)
  if self._closed then return true end
  local sid = self.pid
  local ok, survivors = ladder.close(sid, grace_ms, {
    groups = function() return groups_of(sid) end,
    signal = function(sig)
      local num = proc.signum(sig)
      for _, g in ipairs(groups_of(sid)) do
        sysutil.kill(-g, num)
        if num == SIGTERM then sysutil.kill(-g, SIGCONT) end -- a stopped job would never see the TERM
      end
    end,
    hangup = function() sysutil.kill(-sid, SIGHUP) end,
    ended = function(ms)
      async.timeout(ms, function(signal) return async.race_signal(self._exit, signal) end)
      return self._exit:done()
    end,
    quiet = function(ms)
      if self._p:quiescent() then return true end
      return async.timeout(ms, function(signal) return self._p:wait_quiescent(signal) end) == true
    end,
  })
  if not ok then
    return nil, errors.new(codes.PTY_CLEANUP, string.format("%s: %s cleanup failed (%s); %s", NAME, LABEL, reason,
      survivors))
  end
  self._closed = true
  self._p:close()
  return true
end

-- The backend --------------------------------------------------------------------------

local Backend = {}
Backend.__index = Backend

local function resolve(base, path)
  if not path then return base end
  if path:sub(1, 1) == "/" then return path end
  return base .. "/" .. path
end

function Backend:_open(req)
  local cfg = self.cfg
  local env = subprocess.compose_env(cfg.ambientEnv or sysutil.environ(),
    ptyenv.explicit { owner_id = req.owner.id, session_id = req.id, term = cfg.term, env = req.env })
  local p, err = proc.spawn { argv = cfg.shell, env = env, cwd = resolve(self.cwd, req.cwd),
    pty = { rows = cfg.rows, cols = cfg.cols } }
  if not p then
    return nil, errors.new(codes.PTY_STARTUP, NAME .. ": cannot start the shell: " .. tostring(err.message))
  end
  local d = setmetatable({ pid = p.pid, _p = p, _exit = async.future() }, Drv)
  async.run(function()
    local st, werr = p:wait()
    if not st then return d._exit:resolve(nil, werr) end
    d._exit:resolve({ exitCode = st.exit_code, signal = st.signal })
  end)
  return d
end

function Backend:spawn(req, signal)
  ptyenv.check(NAME, req.env)
  return session.spawn({
    id = req.id, name = req.name, type = self.type, owner_id = req.owner.id, cwd = resolve(self.cwd, req.cwd),
    cfg = self.cfg, prefix = NAME, label = LABEL,
    open = function() return self:_open(req) end,
  }, signal)
end

function M.setup(scope, cfg)
  local svc = scope.ctx.pty
  local backend = setmetatable({ cfg = cfg, type = cfg.backendType, cwd = cfg.cwd or lfs.currentdir() }, Backend)
  local ok, err = svc:registerBackend(cfg.backendType, backend)
  if not ok then return nil, err end
  scope:on_dispose(function() return svc:closeBackend(cfg.backendType, backend) end)
  return backend
end

M.Backend = Backend
return M
