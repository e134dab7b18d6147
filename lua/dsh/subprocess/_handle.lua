--- dsh.subprocess._handle: the process handle and stdin writer of the
-- subprocess seam, written once over a small backend contract (terminals,
-- over the same contract, are dsh.subprocess._terminal).
--
-- Over the seam's backend contract (dsh.subprocess: M.BACKEND and the
-- process object a backend's start returns). Owns the handle's lifetime:
-- start, publication (rolled back when it fails), stdin in call order,
-- terminate, the outcome, spill retention, release once the group is gone.
-- Never talks to a daemon or the kernel: the backend does.
local async = require "dsh.async"
local errors = require "dsh.errors"
local output = require "dsh.subprocess._output"

local M = {}
local MOD = "dsh.subprocess"
local RELEASE_ATTEMPTS = 3

local function rollback_error(prefix, first, second)
  return errors.new("SUBPROCESS_ROLLBACK",
    prefix .. ": process-group publication failed and rollback did not reach quiescence",
    { errors = { first, second } })
end

-- Kill what a failed start left, wait (bounded) until the group is gone.
local function rollback(prefix, bp, err)
  bp:kill()
  local ok, qerr = async.timeout(5000, function(signal) return bp:wait_quiescent(signal) end)
  bp:close()
  if ok == true then return err end
  return rollback_error(prefix, err, qerr or errors.new("SUBPROCESS_ROLLBACK", "group still alive"))
end

--- The outcome {exitCode=, signal=} of a backend's {exit_code=, signal=}:
--- the one place where the words of the layers below (dsh.core.proc, the envd
--- client) become the reference's, which the seams and tools above speak.
function M.outcome(res)
  return { exitCode = res.exit_code, signal = res.signal }
end

-- Failures a retry cannot mend: the daemon is lost, or does not answer.
local FINAL = { SUBPROCESS_LOST = true, SANDBOX_UNRESPONSIVE = true }

--- Call wait() (up to RELEASE_ATTEMPTS times, backing off) until it reports
-- the group gone: true, or nil and the last error. A lost or unresponsive
-- daemon is not retried.
function M.until_gone(wait)
  local ok, err
  for attempt = 1, RELEASE_ATTEMPTS do
    ok, err = wait()
    if ok or (err and FINAL[err.code]) then break end
    if attempt < RELEASE_ATTEMPTS then async.sleep(100 * attempt) end
  end
  return ok, err
end

-- Stdin writer --------------------------------------------------------------------

---@class dsh.subprocess.Writer
---@field error dsh.Error|nil  the first failure; every later call returns it
local Writer = {}
Writer.__index = Writer
Writer.__tostring = function(w)
  return "dsh.subprocess.stdin(" .. (w.error and "failed" or (w._closed and "closed" or "open")) .. ")"
end

function Writer.new(h)
  return setmetatable({ _h = h }, Writer)
end

-- Calls run one after another, in call order (a chain of futures), after the start.
function Writer:_serial(fn)
  local prev, mine = self._tail, async.future()
  self._tail = mine
  if prev then prev:await() end
  local res = { pcall(function()
    local h = self._h
    if not h._started:await() then return nil, h._start_err end
    if self.error then return nil, self.error end
    return fn(h._bp)
  end) }
  mine:resolve()
  if not res[1] then error(res[2], 0) end
  return res[2], res[3]
end

--- Write bytes to the process's stdin (queued until it started). Waits until
-- they were handed over: true, or nil, err (also kept in .error).
---@param s string
---@return true|nil, dsh.Error|nil
function Writer:write(s)
  errors.check(MOD, "stdin:write", s, "string")
  if self._closed then errors.misuse(MOD, "stdin:write: stdin was closed") end
  return self:_serial(function(bp)
    local r, e = bp:write(s)
    if not r then self.error = e end
    return r, e
  end)
end

--- Close stdin after the bytes written so far (idempotent).
function Writer:close()
  if self._closed then return true end
  self._closed = true
  return self:_serial(function(bp)
    local r, e = bp:close_stdin()
    if not r then self.error = e end
    return r, e
  end)
end

-- Process handles ------------------------------------------------------------------

---@class dsh.subprocess.Handle
---@field pid integer            the process group id; -1 until started (and after a failed start)
---@field stdin dsh.subprocess.Writer|nil    with stdin = "pipe"
---@field stdout dsh.subprocess.Pipe|dsh.subprocess.Collector|nil  pipe: read(); collect: readFrom()
---@field stderr dsh.subprocess.Pipe|dsh.subprocess.Collector|nil
---@field done dsh.Future        resolves {exitCode=, signal=}, or nil, err when the start failed or the
---                              outcome can no longer be learned (SUBPROCESS_LOST)
---@field stateDir string        where spill files go
local Handle = {}
Handle.__index = Handle
Handle.__tostring = function(h)
  local state = not h._started:done() and "starting"
    or (h._start_err and "failed") or (h.done:done() and "ended") or "running"
  return string.format("dsh.subprocess.handle(%s, pid %d, %s)", h._argv[1], h.pid, state)
end

local function make_sink(spec)
  if spec.mode == "pipe" then return output.pipe() end
  if spec.mode == "collect" then return output.collector(spec.maxBytes, spec.spill) end
  return nil
end

function Handle.new(svc, o)
  local h = setmetatable({
    pid = -1, done = async.future(), stateDir = svc._backend:state_dir(o.id),
    _svc = svc, _argv = o.argv, _grace = o.grace, _started = async.future(), _released = async.future(),
  }, Handle)
  if o.stdin == "pipe" then h.stdin = Writer.new(h) end
  h.stdout, h.stderr = make_sink(o.stdout), make_sink(o.stderr)
  local streams = { stdout = o.stdout, stderr = o.stderr }
  for name, s in pairs(streams) do
    if s.spill then
      s.spill.path = h.stateDir .. "/" .. name .. ".log"
    end
  end
  local sinks = { stdout = h.stdout, stderr = h.stderr }
  local std = { stdout = io.stdout, stderr = io.stderr }
  local spec = {
    argv = o.argv, cwd = o.cwd, env = o.env, stdin = o.stdin == "ignore" and "ignore" or "pipe",
    stdout = o.stdout, stderr = o.stderr,
    on_gap = function(stream, n)
      local sink = sinks[stream]
      if sink and sink.skip then sink:skip(n) end
    end,
    on_data = function(stream, bytes)
      local sink = sinks[stream]
      if sink then
        sink:push(bytes)
      elseif streams[stream].mode == "inherit" then
        std[stream]:write(bytes)
        std[stream]:flush()
      end
    end,
  }
  svc._live[h] = true
  if o.signal then
    h._off_abort = o.signal:on_abort(function() h:terminate() end)
  end
  async.run(Handle._run, h, spec, o.stdin_data, streams)
  async.run(Handle._release, h)
  return h
end

function Handle:_finish_outputs(err)
  for _, s in ipairs { self.stdout, self.stderr } do
    if s then s:finish(err) end
  end
end

-- A backend that raises (a bug) must still settle done and release the
-- handle: done is then rejected (code raised), as dsh.async's rule says.
function Handle:_run(spec, stdin_data, streams)
  local ok, err = xpcall(Handle._start_and_wait, debug.traceback, self, spec, stdin_data, streams)
  if ok then return end
  local e = errors.new("SUBPROCESS_FAILED", self._svc.name .. ": " .. tostring(err))
  if not self._started:done() then
    self._start_err = e
    self._started:resolve(false)
  end
  self:_finish_outputs(e)
  if not self.done:done() then self.done:reject(e) end
end

function Handle:_start_and_wait(spec, stdin_data, streams)
  local svc = self._svc
  local bp, err = svc._backend:start(spec)
  if bp and svc._faults:armed("afterStart") then -- a failure once the group exists (dsh.faults)
    local ok, ferr = svc._faults:fire("afterStart", self, bp)
    if not ok then bp, err = nil, rollback(svc.name, bp, ferr) end
  end
  if not bp then
    self._start_err = err or errors.new("SUBPROCESS_START", svc.name .. ": start failed")
    self._started:resolve(false)
    self:_finish_outputs(self._start_err)
    if self.stdin then self.stdin.error = self._start_err end
    self.done:resolve(nil, self._start_err)
    return
  end
  self._bp, self.pid = bp, bp.pid
  for name, s in pairs(streams) do
    if s.spill then self[name].spillPath = s.spill.path end
  end
  self._started:resolve(true)
  if self._term_requested then async.run(function() bp:terminate(self._grace) end) end
  if stdin_data then
    -- batch stdin: failures are ignored (the reference does the same)
    if stdin_data ~= "" then bp:write(stdin_data) end
    bp:close_stdin()
  end
  local res, werr = bp:wait()
  self:_finish_outputs(not res and werr or nil)
  local remove, keep_any = {}, false
  for name, s in pairs(streams) do
    if s.spill then
      -- a spill the disk could not take whole (it filled up) is cut, like one
      -- over its cap: never presented as the complete output
      if self[name]:spill_unneeded() or bp:spill_size(s.spill.path) ~= self[name].total then
        remove[#remove + 1] = s.spill.path
        self[name].spillPath = nil
      else
        keep_any = true
      end
    end
  end
  if #remove > 0 then bp:remove(remove, not keep_any and self.stateDir or nil) end
  if res then self.done:resolve(M.outcome(res)) else self.done:resolve(nil, werr) end
end

-- Wait until done settled; it rejects only when a backend raised (a bug,
-- reported to whoever awaits done), and what follows must run regardless.
local function settled(h)
  pcall(h.done.await, h.done)
end

-- Leaves the live set once done settled and the group is gone; then the
-- backend's resources are released.
function Handle:_release()
  settled(self)
  if self._off_abort then self._off_abort() end
  local ok, err = M.until_gone(function() return self:waitForExit() end)
  if self._bp then self._bp:close() end
  self._svc._live[self] = nil
  if ok then self._released:resolve(true) else self._released:resolve(nil, err) end
end

--- TERM to the group, KILL after graceMs unless it is gone. Returns at once;
-- idempotent; before the start it applies once the group exists.
function Handle:terminate()
  if self._term_requested then return true end
  self._term_requested = true
  local bp = self._bp
  if bp and not self._quiet then
    async.run(function() bp:terminate(self._grace) end)
  end
  return true
end

--- True once the whole group has exited (also when the start failed); false
-- when signal aborted first; nil, err when that cannot be learned.
---@param signal dsh.AbortSignal|nil
---@return boolean|nil, dsh.Error|nil
function Handle:waitForExit(signal)
  if signal ~= nil and not async.is_signal(signal) then
    errors.misuse(MOD, "waitForExit: expected an abort signal, got %s", type(signal))
  end
  if signal and signal.aborted then return false end
  if self._quiet then return true end
  if not self._started:done() then
    if signal then
      local _, aerr = async.race_signal(self._started, signal)
      if aerr then return false end
    else
      self._started:await()
    end
  end
  if self._start_err then return true end
  local ok, err = self._bp:wait_quiescent(signal)
  if ok then self._quiet = true return true end
  if ok == false then return false end
  return nil, err
end

function Handle:_dispose_start()
  self:terminate()
  -- nobody will read any more: unblock a producer held back by a full pipe
  for _, s in ipairs { self.stdout, self.stderr } do
    if s and s.close then s:close() end
  end
end

function Handle:_join()
  settled(self)
  return self._released:await()
end

M.Writer = Writer
M.Handle = Handle
return M
