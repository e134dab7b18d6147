--- pty-e2b: persistent terminals in the sandbox of ctx.e2b (reference §2.4).
--
-- Registers a backend type (default "shell") on ctx.pty. Each session is a
-- shell started with ctx.subprocess:spawnTerminal — the one way dsh runs a
-- terminal — so it lives in the same sandbox as fs and Bash; the session
-- logic (readiness, scrollback, screen, signals) is the seam's
-- (dsh.pty.session), shared with pty-local.
--
-- On dshd the subprocess backend uses its native process groups: the
-- foreground job is signalled and the terminal's session killed and waited
-- for by dshd itself (extension terminal-sessions), output and exit arrive as
-- events, and a dropped connection resumes by byte offset (a gap past the
-- replay window is reported in the scrollback). On a stock envd the
-- subprocess backend falls back to ps/pkill run in the sandbox.
--
-- Sessions live no longer than ctx.e2b: this provider injects it, so it is
-- disposed first, and disposal closes every session of its type.
local errors = require "dsh.errors"
local pty = require "dsh.pty"
local ptyenv = require "dsh.pty.env"
local session = require "dsh.pty.session"
local schema = require "dsh.providers.pty_e2b.schema"

local M = {
  name = "pty-e2b",
  inject = { "e2b", "subprocess", "pty" },
  validate = schema.validate,
}
local NAME, LABEL = M.name, "E2B PTY"
local codes = pty.codes

-- Drivers: a subprocess terminal, as dsh.pty.session wants it ---------------------------

local Drv = {}
Drv.__index = Drv
Drv.__tostring = function(d) return "pty-e2b.terminal(" .. d.pid .. ")" end

local function gone()
  return nil, errors.new(codes.PTY_CLOSING, NAME .. ": the terminal is closed")
end

function Drv:read() return self._t:read() end
function Drv:wait() return self._t:wait() end

function Drv:write(s)
  if self._closing then return gone() end
  return self._t:write(s)
end

function Drv:resize(rows, cols)
  if self._closing then return gone() end
  return self._t:resize(rows, cols)
end

function Drv:foreground()
  if self._closing then return gone() end
  return self._t:foreground()
end

function Drv:signal_foreground(sig)
  if self._closing then return gone() end
  return self._t:signal(sig)
end

function Drv:close(_, reason)
  self._closing = true
  local ok, err = self._t:close()
  if ok then return true end
  self._closing = false -- closing it again retries
  return nil, errors.new(codes.PTY_CLEANUP, string.format("%s: %s cleanup failed (%s); %s", NAME, LABEL, reason,
    tostring(err and (err.survivors or err.message) or err)), { cause = err })
end

-- The backend -------------------------------------------------------------------------------

local Backend = {}
Backend.__index = Backend

-- POSIX resolve of path against base (no symlinks: a sandbox path is a string here).
local function resolve(base, path)
  local full = (path and path:sub(1, 1) == "/") and path or (base .. "/" .. (path or ""))
  local parts = {}
  for seg in full:gmatch("[^/]+") do
    if seg == ".." then
      parts[#parts] = nil
    elseif seg ~= "." then
      parts[#parts + 1] = seg
    end
  end
  return "/" .. table.concat(parts, "/")
end
M.resolve = resolve

function Backend:_open(req, cwd)
  local cfg = self.cfg
  local t, err = self.subprocess:spawnTerminal {
    argv = cfg.shell, cwd = cwd, rows = cfg.rows, cols = cfg.cols, graceMs = cfg.disposeGraceMs,
    env = ptyenv.explicit { owner_id = req.owner.id, session_id = req.id, term = cfg.term, env = req.env },
  }
  if not t then return nil, err end
  if type(t.pid) ~= "number" or t.pid <= 0 then
    t:close()
    return nil, errors.new(codes.PTY_STARTUP, NAME .. ": E2B returned invalid PTY pid " .. tostring(t.pid))
  end
  return setmetatable({ pid = t.pid, _t = t }, Drv)
end

function Backend:spawn(req, signal)
  ptyenv.check(NAME, req.env)
  local sb, err = self.e2b:getSandbox()
  if not sb then return nil, err end
  local cwd = resolve(self.e2b.cwd, req.cwd)
  return session.spawn({
    id = req.id, name = req.name, type = self.type, owner_id = req.owner.id, cwd = cwd,
    cfg = self.cfg, prefix = NAME, label = LABEL,
    open = function() return self:_open(req, cwd) end,
  }, signal)
end

function M.setup(scope, cfg)
  local ctx = scope.ctx
  local backend = setmetatable({ cfg = cfg, type = cfg.backendType, e2b = ctx.e2b, subprocess = ctx.subprocess },
    Backend)
  local ok, err = ctx.pty:registerBackend(cfg.backendType, backend)
  if not ok then return nil, err end
  scope:on_dispose(function() return ctx.pty:closeBackend(cfg.backendType, backend) end)
  return backend
end

M.Backend = Backend
return M
