--- dsh.bash: one-shot `bash -c <command>` over ctx.subprocess, rendered for a model.
--
-- Runs the command in its own process group through whatever subprocess
-- service it is given (local or in a sandbox: nothing here knows which), in
-- the service's working directory unless told otherwise. stdout and stderr are
-- collected by the seam's code-point-safe collector (the last maxOutputBytes
-- of each) and spilled to a file (up to maxSpillBytes) so a cut output can be
-- read in full. After timeoutMs the group is terminated (TERM, then KILL after
-- graceMs). stdin is /dev/null.
--
-- Rendering (render(), deterministic):
--   1. stdout's retained text, then stderr's. A stream whose first bytes were
--      cut is preceded by the line
--        [... N bytes of output truncated; full output in <spillPath>]
--      ("; full output in <spillPath>" only when a complete spill was kept).
--      Each non-empty section ends with a newline (one is added if missing).
--   2. "(no output)" when both streams are empty.
--   3. One status line: "[exit code N]", "[terminated by SIGNAME]", or
--      "[timed out after N ms]" when the timeout ended the command.
--   At most maxOutputBytes of output are shown in total: when both streams do
--   not fit, stderr keeps up to half of the budget (more if stdout needs
--   less); every cut keeps the tail and starts on a code-point boundary.
local async = require "dsh.async"
local errors = require "dsh.errors"
local loop = require "dsh.loop"
local utf8 = require "dsh.utf8"

local M = {}
local MOD = "dsh.bash"

M.DEFAULT_TIMEOUT_MS = 120000
M.MAX_TIMEOUT_MS = 600000
M.DEFAULT_MAX_OUTPUT_BYTES = 30000
M.DEFAULT_MAX_SPILL_BYTES = 64 * 1024 * 1024
M.DEFAULT_GRACE_MS = 2000

---@class dsh.Bash
---@field cwd string|nil
---@field timeoutMs integer
---@field maxOutputBytes integer
local Bash = {}
Bash.__index = Bash
Bash.__tostring = function(b) return "dsh.bash(" .. tostring(b.cwd) .. ")" end

---@class dsh.BashOpts
---@field subprocess dsh.subprocess.Service
---@field cwd string|nil              default: the subprocess service's cwd
---@field timeoutMs integer|nil       default 120000, at most 600000
---@field maxOutputBytes integer|nil  default 30000
---@field maxSpillBytes integer|nil   default 64 MiB
---@field graceMs integer|nil         default 2000

---@param o dsh.BashOpts
---@return dsh.Bash
function M.new(o)
  errors.check(MOD, "new", o, "table")
  errors.check(MOD, "new: subprocess", o.subprocess, "table")
  return setmetatable({
    cwd = o.cwd or o.subprocess.cwd,
    timeoutMs = o.timeoutMs or M.DEFAULT_TIMEOUT_MS,
    maxOutputBytes = o.maxOutputBytes or M.DEFAULT_MAX_OUTPUT_BYTES,
    maxSpillBytes = o.maxSpillBytes or M.DEFAULT_MAX_SPILL_BYTES,
    graceMs = o.graceMs or M.DEFAULT_GRACE_MS,
    _sub = o.subprocess,
  }, Bash)
end

---@class dsh.BashStream
---@field text string        the retained tail
---@field total integer      bytes the command wrote
---@field spillPath string|nil a complete copy, when one was kept

---@class dsh.BashResult
---@field exitCode integer|nil
---@field signal string|nil
---@field timedOut boolean
---@field timeoutMs integer
---@field stdout dsh.BashStream
---@field stderr dsh.BashStream

local function stream_of(c)
  local r = c:readFrom(0)
  return { text = r.text, total = r.nextOffset, spillPath = r.spillPath }
end

--- Run a command to its end (or its timeout). Returns the result, or nil, err
-- when it could not run (bad cwd, sandbox gone, ...) or signal aborted it.
---@param o {command: string, timeout: integer|nil, signal: dsh.AbortSignal|nil}
---@return dsh.BashResult|nil, dsh.Error|nil
function Bash:run(o)
  errors.check(MOD, "run", o, "table")
  errors.check(MOD, "run: command", o.command, "string")
  local timeout = o.timeout or self.timeoutMs
  if type(timeout) ~= "number" or timeout <= 0 or timeout % 1 ~= 0 or timeout > M.MAX_TIMEOUT_MS then
    errors.misuse(MOD, "run: timeout must be a positive integer of at most %d ms", M.MAX_TIMEOUT_MS)
  end
  local collect = { maxBytes = self.maxOutputBytes, spill = { maxBytes = self.maxSpillBytes } }
  local h, err = self._sub:spawn {
    argv = { "bash", "-c", o.command }, cwd = self.cwd, graceMs = self.graceMs, signal = o.signal,
    stdio = { stdin = "ignore", stdout = collect, stderr = collect },
  }
  if not h then return nil, err end
  local timed_out = false
  local timer = loop.timer(function()
    timed_out = true
    h:terminate()
  end)
  timer:start(timeout)
  h.done:on_settle(function() timer:close() end)
  local res, derr = h.done:await()
  if not res then return nil, derr end
  if o.signal and o.signal.aborted and not timed_out then
    return nil, async.abort_error(o.signal.reason)
  end
  return {
    exitCode = res.exitCode, signal = res.signal, timedOut = timed_out, timeoutMs = timeout,
    stdout = stream_of(h.stdout), stderr = stream_of(h.stderr),
  }
end

local function section(out, s, shown)
  if s.total == 0 and shown == "" then return end
  local cut = s.total - #shown
  if cut > 0 then
    out[#out + 1] = string.format("[... %d bytes of output truncated%s]\n", cut,
      s.spillPath and ("; full output in " .. s.spillPath) or "")
  end
  if shown ~= "" then
    out[#out + 1] = shown
    if shown:sub(-1) ~= "\n" then out[#out + 1] = "\n" end
  end
end

--- The text a model sees for a result (see the module header).
---@param r dsh.BashResult
---@param max_output integer|nil default 30000
---@return string
function M.render(r, max_output)
  local max = max_output or M.DEFAULT_MAX_OUTPUT_BYTES
  local o, e = r.stdout.text, r.stderr.text
  if #o + #e > max then
    local e_share = math.min(#e, math.max(math.floor(max / 2), max - #o))
    e = utf8.tail(e, e_share)
    o = utf8.tail(o, max - #e)
  end
  local out = {}
  section(out, r.stdout, o)
  section(out, r.stderr, e)
  if #out == 0 then out[1] = "(no output)\n" end
  if r.timedOut then
    out[#out + 1] = string.format("[timed out after %d ms]", r.timeoutMs)
  elseif r.signal then
    out[#out + 1] = "[terminated by " .. r.signal .. "]"
  else
    out[#out + 1] = "[exit code " .. tostring(r.exitCode) .. "]"
  end
  return table.concat(out)
end

function Bash:render(r)
  return M.render(r, self.maxOutputBytes)
end

M.Bash = Bash
return M
