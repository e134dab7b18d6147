--- dsh.pty.backend: the one PTY backend — persistent terminals started with
-- spawnTerminal of a subprocess service, registered on ctx.pty as a type.
--
-- Owns: the provider every PTY world uses (pty-e2b over ctx.subprocess in the
-- sandbox, pty-local over a subprocess-local service of its own), and the
-- driver dsh.pty.session wants over a subprocess terminal. Never runs a
-- process itself and knows no world: the subprocess service decides where
-- the shell runs, its environment scrub and its close ladder (TERM every
-- group of the terminal's session, the grace for the jobs, then a hangup or
-- KILL, and back once nothing of the session is left); the session logic
-- (readiness, scrollback, screen, signals) is dsh.pty.session's.
--
--   return require("dsh.pty.backend").provider {
--     name = "pty-e2b", label = "E2B PTY", inject = { "e2b", "subprocess", "pty" },
--     validate = schema.validate,
--     subprocess = function(scope, cfg) return scope.ctx.subprocess end,
--   }
local errors = require "dsh.errors"
local lexical = require "dsh.path"
local pty = require "dsh.pty"
local ptyenv = require "dsh.pty.env"
local session = require "dsh.pty.session"

local M = {}
local codes = pty.codes

-- Drivers: a subprocess terminal, as dsh.pty.session wants it ---------------------------

local Drv = {}
Drv.__index = Drv
Drv.__tostring = function(d) return d._name .. ".terminal(" .. d.pid .. (d._closing and ", closing" or "") .. ")" end

local function gone(d)
  return nil, errors.new(codes.PTY_CLOSING, d._name .. ": the terminal is closed")
end

function Drv:read() return self._t:read() end
function Drv:wait() return self._t:wait() end

function Drv:write(s)
  if self._closing then return gone(self) end
  return self._t:write(s)
end

function Drv:resize(rows, cols)
  if self._closing then return gone(self) end
  return self._t:resize(rows, cols)
end

function Drv:foreground()
  if self._closing then return gone(self) end
  return self._t:foreground()
end

function Drv:signal_foreground(sig)
  if self._closing then return gone(self) end
  return self._t:signal(sig)
end

function Drv:close(_, reason)
  self._closing = true
  local ok, err = self._t:close()
  if ok then return true end
  self._closing = false -- closing it again retries
  return nil, errors.new(codes.PTY_CLEANUP, string.format("%s: %s cleanup failed (%s); %s", self._name,
    self._label, reason, tostring(err and (err.survivors or err.message) or err)), { cause = err })
end

-- The backend ---------------------------------------------------------------------------

local Backend = {}
Backend.__index = Backend

function Backend:_open(req, cwd)
  local cfg = self.cfg
  local t, err = self.subprocess:spawnTerminal {
    argv = cfg.shell, cwd = cwd, rows = cfg.rows, cols = cfg.cols, graceMs = cfg.disposeGraceMs,
    env = ptyenv.explicit { owner_id = req.owner.id, session_id = req.id, term = cfg.term, env = req.env },
  }
  if not t then return nil, err end
  if type(t.pid) ~= "number" or t.pid <= 0 then
    t:close()
    return nil, errors.new(codes.PTY_STARTUP, self.name .. ": the terminal has an invalid pid " .. tostring(t.pid))
  end
  return setmetatable({ pid = t.pid, _t = t, _name = self.name, _label = self.label }, Drv)
end

--- A session for req = {id, owner, name, cwd, env} (see dsh.pty's registerBackend).
function Backend:spawn(req, signal)
  ptyenv.check(self.name, req.env)
  local cwd = lexical.resolve(self.subprocess.cwd, req.cwd)
  return session.spawn({
    id = req.id, name = req.name, type = self.type, owner_id = req.owner.id, cwd = cwd,
    cfg = self.cfg, prefix = self.name, label = self.label,
    open = function() return self:_open(req, cwd) end,
  }, signal)
end

---@class dsh.pty.BackendDecl
---@field name string        the provider's name, the prefix of its messages ("pty-e2b")
---@field label string       what its messages call a terminal's world ("E2B PTY")
---@field inject string[]    the services it injects (ctx.pty among them)
---@field validate fun(cfg:table):table  its config check (dsh.pty.config's keys, plus its own)
---@field subprocess fun(scope:dsh.Scope, cfg:table):dsh.subprocess.Service  where its shells run

--- The provider of a PTY world: it registers a backend of cfg.backendType on
--- ctx.pty and, when disposed, closes every session of that type. Its
--- resolve(base, path) says where a session's cwd lands: the POSIX
--- resolution of path against the subprocess service's cwd (dsh.path).
---@param decl dsh.pty.BackendDecl
---@return dsh.Provider
function M.provider(decl)
  local p = { name = decl.name, inject = decl.inject, validate = decl.validate, resolve = lexical.resolve }
  function p.setup(scope, cfg)
    local svc = scope.ctx.pty
    local sub, serr = decl.subprocess(scope, cfg)
    if not sub then return nil, serr end
    local backend = setmetatable({ name = decl.name, label = decl.label, cfg = cfg, type = cfg.backendType,
      subprocess = sub }, Backend)
    local ok, err = svc:registerBackend(cfg.backendType, backend)
    if not ok then return nil, err end
    scope:on_dispose(function() return svc:closeBackend(cfg.backendType, backend) end)
    return backend
  end
  return p
end

M.Backend = Backend
return M
