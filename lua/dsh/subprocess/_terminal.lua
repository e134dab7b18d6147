--- dsh.subprocess._terminal: a process on a new PTY (spawnTerminal), over
-- the backend contract of dsh.subprocess._handle (with pty = {rows=, cols=}).
--
-- One stream (the terminal's output) read with read(); input typed with
-- write(); closing hangs up, terminates the group (TERM, KILL after graceMs),
-- kills what is left of the session and waits until it is gone.
local async = require "dsh.async"
local errors = require "dsh.errors"
local handle = require "dsh.subprocess._handle"
local output = require "dsh.subprocess._output"

local M = {}
local MOD = "dsh.subprocess"

---@class dsh.subprocess.Terminal
---@field pid integer  the session's process group id
---@field lost integer  bytes of output lost across reconnects (beyond the daemon's replay window)
---@field done dsh.Future resolves {exitCode=, signal=}, or nil, err when the outcome was lost
local Terminal = {}
Terminal.__index = Terminal
Terminal.__tostring = function(t)
  return string.format("dsh.subprocess.terminal(%s, pid %d%s)", t._argv[1], t.pid,
    t._closed and ", closed" or (t.done:done() and ", ended" or ""))
end

function Terminal.start(svc, o)
  local t = setmetatable({ pid = -1, done = async.future(), _svc = svc, _argv = o.argv, _grace = o.grace,
    _out = output.pipe(), _released = async.future(), lost = 0, _gaps = {}, _pushed = 0, _read = 0 }, Terminal)
  local bp, err = svc._backend:start {
    argv = o.argv, cwd = o.cwd, env = o.env, pty = o.pty, stdin = "pipe",
    stdout = { mode = "pipe" }, stderr = { mode = "pipe" },
    on_data = function(_, bytes)
      t._pushed = t._pushed + #bytes
      t._out:push(bytes)
    end,
    on_gap = function(_, n) -- a reconnect past the daemon's replay window
      t.lost = t.lost + n
      t._gaps[#t._gaps + 1] = { at = t._pushed, bytes = n }
    end,
  }
  if not bp then return nil, err end
  t._bp, t.pid = bp, bp.pid
  svc._live[t] = true
  async.run(function()
    local res, werr = bp:wait()
    t._out:finish(not res and werr or nil)
    if res then t.done:resolve(res) else t.done:resolve(nil, werr) end
  end)
  return t
end

local function open(t, what)
  if t._closed then errors.misuse(MOD, "terminal:%s: the terminal is closed", what) end
  return t._bp
end

--- The next bytes the terminal printed; nil at end; nil, err on failure.
-- When output was lost before them (a reconnect past the replay window),
-- first "", nil, <bytes lost>.
function Terminal:read()
  local g = self._gaps[1]
  if g and g.at <= self._read then
    table.remove(self._gaps, 1)
    return "", nil, g.bytes
  end
  local s, err = self._out:read()
  if s then self._read = self._read + #s end
  return s, err
end

--- The terminal's foreground process group (the shell's running job, or
-- the shell at its prompt), or nil, err.
function Terminal:foreground()
  return open(self, "foreground"):foreground()
end

--- Type bytes into the terminal.
function Terminal:write(s)
  errors.check(MOD, "terminal:write", s, "string")
  return open(self, "write"):write(s)
end

function Terminal:resize(rows, cols)
  for what, v in pairs { rows = rows, cols = cols } do
    if type(v) ~= "number" or v < 1 or v > 65535 or v % 1 ~= 0 then
      errors.misuse(MOD, "terminal:resize: %s must be an integer in [1, 65535]", what)
    end
  end
  return open(self, "resize"):resize(rows, cols)
end

--- Send a signal ("SIGINT", "INT", 2, ...) to the terminal's foreground
-- process group (a shell's running job), as a keyboard would. Returns the
-- pgid it was delivered to, or nil, err.
function Terminal:signal(sig)
  return open(self, "signal"):signal_foreground(sig)
end

--- Wait for the leader's exit: {exitCode=, signal=}, or nil, err (aborted, lost).
function Terminal:wait(signal)
  return async.await(self.done, signal)
end

function Terminal:_dispose_start()
  if self._closing then return end
  self._closing = true
  async.run(function()
    -- a hangup is what closing a terminal means (shells exit on it and pass
    -- it to their jobs); TERM then KILL after graceMs for whatever stays
    self._bp:signal("SIGHUP")
    self._bp:terminate(self._grace)
    self._out:close()
    -- a job still holding the terminal keeps the stream open on a daemon
    -- that does not end it with the leader (stock envd): kill it after the grace
    async.timeout(self._grace, function(sig) return async.race_signal(self.done, sig) end)
    if not self.done:done() then self._bp:kill_session() end
    self.done:await()
    self._bp:kill_session() -- job groups of the session outlive the leader's group
    local ok, err = handle.until_gone(function() return self._bp:wait_quiescent() end)
    self._bp:close()
    self._closed = true
    self._svc._live[self] = nil
    if ok then self._released:resolve(true) else self._released:resolve(nil, err) end
  end)
end

function Terminal:_join()
  return self._released:await()
end

--- SIGHUP, then TERM the group and KILL after graceMs, kill what is left of
-- the session, wait until the group is gone, release.
-- Idempotent. Returns true, or nil, err when the group's end could not be confirmed.
function Terminal:close()
  self:_dispose_start()
  return self:_join()
end

M.Terminal = Terminal
return M
