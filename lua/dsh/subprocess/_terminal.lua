--- dsh.subprocess._terminal: a process on a new PTY (spawnTerminal), over
-- the backend contract of dsh.subprocess._handle (with pty = {rows=, cols=}).
--
-- One stream (the terminal's output) read with read(); input typed with
-- write(); closing is the session ladder (dsh.subprocess.session_ladder:
-- TERM every group of the terminal's session, graceMs for the jobs, then a
-- hangup or KILL) and returns once nothing of the session is left. A close
-- that fails names the survivors and can be tried again.
local async = require "dsh.async"
local errors = require "dsh.errors"
local handle = require "dsh.subprocess._handle"
local ladder = require "dsh.subprocess.session_ladder"
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
    _out = output.pipe(), lost = 0, _gaps = {}, _pushed = 0, _read = 0 }, Terminal)
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
    if res then t.done:resolve(handle.outcome(res)) else t.done:resolve(nil, werr) end
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

function Terminal:_ladder()
  local bp = self._bp
  self._out:close()
  return ladder.close(self.pid, self._grace, {
    groups = function() return (bp:session_groups()) end,
    signal = function(sig) bp:signal_session(sig) end,
    hangup = function() bp:signal("SIGHUP") end,
    ended = function(ms)
      async.timeout(ms, function(sig) return async.race_signal(self.done, sig) end)
      return self.done:done()
    end,
    quiet = function(ms)
      local ok, err = async.timeout(ms, function(sig) return bp:wait_quiescent(sig) end)
      return ok == true, err
    end,
  })
end

function Terminal:_dispose_start()
  if self._closed or self._close_f then return end
  local f = async.future()
  self._close_f = f
  async.run(function()
    local ok, survivors = self:_ladder()
    if ok or self._svc._disposing then
      -- released: on success, or when the service goes (nothing could close it later)
      self._bp:close()
      self._closed = true
      self._svc._live[self] = nil
    else
      self._close_f = nil -- a later close tries again
    end
    if ok then
      f:resolve(true)
    else
      f:resolve(nil, errors.new("SUBPROCESS_CLEANUP", string.format("%s: terminal %d cleanup failed; %s",
        self._svc.name, self.pid, survivors), { survivors = survivors }))
    end
  end)
end

function Terminal:_join()
  if self._closed and not self._close_f then return true end
  return self._close_f:await()
end

--- Close: the session ladder (TERM every group of the session, graceMs for
-- its jobs, then a hangup, or KILL), then wait until nothing of it is left.
-- Idempotent while in flight. Returns true, or nil, err (SUBPROCESS_CLEANUP,
-- err.survivors naming what is left); a failed close can be tried again.
function Terminal:close()
  if self._closed and not self._close_f then return true end
  local f = self._close_f
  if not f then
    self:_dispose_start()
    f = self._close_f
  end
  return f:await()
end

M.Terminal = Terminal
return M
