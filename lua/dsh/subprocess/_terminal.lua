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
---@field done dsh.Future resolves {exitCode=, signal=}, or nil, err when the outcome was lost
local Terminal = {}
Terminal.__index = Terminal
Terminal.__tostring = function(t)
  return string.format("dsh.subprocess.terminal(%s, pid %d%s)", t._argv[1], t.pid,
    t._closed and ", closed" or (t.done:done() and ", ended" or ""))
end

function Terminal.start(svc, o)
  local t = setmetatable({ pid = -1, done = async.future(), _svc = svc, _argv = o.argv, _grace = o.grace,
    _out = output.pipe(), _released = async.future() }, Terminal)
  local bp, err = svc._backend:start {
    argv = o.argv, cwd = o.cwd, env = o.env, pty = o.pty, stdin = "pipe",
    stdout = { mode = "pipe" }, stderr = { mode = "pipe" },
    on_data = function(_, bytes) t._out:push(bytes) end,
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
function Terminal:read()
  return self._out:read()
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
