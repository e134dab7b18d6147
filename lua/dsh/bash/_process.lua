--- dsh.bash._process: a Bash command running in the background.
--
-- It wraps a subprocess handle whose stdout and stderr are collected (the
-- last maxOutputBytes of each, spilled in full up to maxSpillBytes) and
-- remembers how far each stream was read, so read() returns only what is
-- new (one consuming delta). A start that failed is reported once, in the
-- next delta. kill() stops the whole process group (TERM, then KILL after
-- the grace) and returns once it is gone; join() waits for that too.
local async = require "dsh.async"
local render = require "dsh.bash._render"

local M = {}

---@class dsh.BashProcess
---@field id string          "bash-<n>", unique within its ctx.bash
---@field command string
---@field pid integer        the process group id (-1 until it started, and when it failed to)
local Process = {}
Process.__index = function(p, k)
  if k == "pid" then return p._h.pid end
  return Process[k]
end
Process.__tostring = function(p)
  return string.format("dsh.bash.process(%s, %s)", p.id, p:running() and "running" or "ended")
end

---@param id string
---@param command string
---@param h dsh.subprocess.Handle   with collected stdout and stderr
---@param o {offsets: table|nil, strip: fun(s:string):string|nil}|nil
function M.new(id, command, h, o)
  o = o or {}
  local p = setmetatable({
    id = id, command = command, _h = h,
    _off = o.offsets or { stdout = 0, stderr = 0 },
    _strip = o.strip,
  }, Process)
  async.run(function()
    local res, err = h.done:await()
    if not res then p._failed = err end
  end)
  return p
end

--- True until the process group's leader has exited and its output ended.
function Process:running()
  return not self._h.done:done()
end

local function outcome(p)
  if not p._h.done:done() then return nil, nil end
  local ok, res = p._h.done:result()
  if ok and type(res) == "table" then return res.exitCode, res.signal end
  return nil, nil
end

--- The state now, without reading anything: {running=, exitCode=, signal=}.
function Process:state()
  local code, sig = outcome(self)
  return { running = self:running(), exitCode = code, signal = sig }
end

---@class dsh.BashRead
---@field text string          new output since the last read (stderr under [stderr])
---@field running boolean
---@field exitCode integer|nil once ended
---@field signal string|nil    once ended by a signal
---@field lossy boolean        output was dropped between reads

--- The output that arrived since the last read, and the state now.
---@return dsh.BashRead
function Process:read()
  local h = self._h
  local out = h.stdout:readFrom(self._off.stdout)
  local err = h.stderr:readFrom(self._off.stderr)
  local note
  if self._failed and not self._noted then
    self._noted = true
    note = "failed to start: " .. tostring(self._failed.message or self._failed) .. "\n"
  end
  if self._strip then
    out.text, err.text = self._strip(out.text), self._strip(err.text)
  end
  local text = render.delta(out, self._off.stdout, err, self._off.stderr, note)
  self._off.stdout, self._off.stderr = out.nextOffset, err.nextOffset
  local code, sig = outcome(self)
  return { text = text, running = self:running(), exitCode = code, signal = sig,
    lossy = out.lossy or err.lossy }
end

--- Wait until the process ended and its group is gone (errors of the wait are
-- the subprocess service's to report; this returns regardless).
function Process:join()
  pcall(self._h.done.await, self._h.done)
  self._h:waitForExit()
end

--- Stop the process group (TERM, KILL after the grace) and wait until it is
-- gone. True when it was running, false when it had ended already.
function Process:kill()
  if not self:running() then return false end
  self._h:terminate()
  self:join()
  return true
end

M.Process = Process
return M
