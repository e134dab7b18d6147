--- dsh.bash: `bash -c <command>` over ctx.subprocess, for a model (ctx.bash).
--
-- The reference's Bash executor (bash-local), over whatever subprocess
-- service it is given (on this machine or in a sandbox: nothing here knows
-- which). Every command is a fresh non-login `bash -c` in its own process
-- group, in the configured directory unless the call names a workdir; its
-- environment is the subprocess seam's scrubbed one plus the model-friendly
-- ENV below, then the call's env (explicit entries win). stdout and stderr
-- are collected (the last maxOutputBytes of each, spilled in full up to
-- maxSpillBytes so a cut output can be read whole).
--
-- run{command, timeout, workdir, env, stdin, signal}: to the shell's exit.
--   The timeout defaults to timeoutMs and is capped at maxTimeoutMs; when it
--   expires the group is stopped (TERM, KILL after graceMs) and the result
--   says timedOut; when the caller's signal aborts, it says aborted instead.
--   When the shell exits while processes it started in the background (`cmd
--   &`) still hold its output, run returns at once with the shell's exit
--   status and those processes keep running as a background process of
--   ctx.bash (result.background is its id). To see the shell's exit, the
--   command runs after `exec {fd}>&2; trap '<report $? and jobs on fd>' EXIT;`: the
--   shell has one more descriptor (10 or above), and a command that sets its
--   own EXIT trap, or ends the shell with a signal, is waited for as before.
-- start{command, workdir, env, stdin, signal}: in the background, without a
--   timeout; returns a dsh.BashProcess at once. readOutput(p) returns what it
--   wrote since the last read (stderr under "[stderr]"; a start failure is
--   reported there once) and whether it still runs; kill(p) stops its group
--   and returns once it is gone. dispose() (the provider's) kills and joins
--   every one, and stops foreground commands too.
-- render(result): the text a model sees (dsh.bash._render).
local async = require "dsh.async"
local errors = require "dsh.errors"
local loop = require "dsh.core.loop"
local process = require "dsh.bash._process"
local render = require "dsh.bash._render"
local schema = require "dsh.schema"
local sysutil = require "dsh.core.sysutil"

local M = {}
local MOD = "dsh.bash"

M.DEFAULT_TIMEOUT_MS = 120000
M.DEFAULT_MAX_TIMEOUT_MS = 600000
M.LIMIT_MS = 2147483647 -- the largest timer delay
M.DEFAULT_MAX_OUTPUT_BYTES = 64000
M.DEFAULT_MAX_SPILL_BYTES = 64 * 1024 * 1024
M.DEFAULT_GRACE_MS = 3000
-- After the shell exited: how long its output may take to end before the
-- processes still holding it are taken to run on in the background. When
-- no job of the shell's own runs, only a process it detached (`(cmd &)`,
-- `setsid -f`) can hold the output, and the rest is the end being reported
-- late (a loaded machine): that is waited for much longer, so that a plain
-- command is never taken for one that left something running.
M.SETTLE_MS = 100
M.DETACHED_SETTLE_MS = 3000
M.MAX_ENDED = 64 -- ended background processes kept readable
--- What every command gets (colour, pagers and terminal features garble a
-- model's reading of output); the call's env overrides it.
M.ENV = { NO_COLOR = "1", TERM = "dumb", PAGER = "cat", GIT_PAGER = "cat" }

---@class dsh.Bash
---@field cwd string|nil
---@field timeoutMs integer
---@field maxTimeoutMs integer
---@field maxOutputBytes integer
---@field maxSpillBytes integer
---@field graceMs integer
local Bash = {}
Bash.__index = Bash
Bash.__tostring = function(b)
  return "dsh.bash(" .. tostring(b.cwd) .. (b._disposed and ", disposed" or "") .. ")"
end

---@class dsh.BashOpts
---@field subprocess dsh.subprocess.Service
---@field cwd string|nil              default: the subprocess service's cwd
---@field timeoutMs integer|nil       default 120000
---@field maxTimeoutMs integer|nil    default 600000: a longer per-call timeout is capped
---@field maxOutputBytes integer|nil  default 64000
---@field maxSpillBytes integer|nil   default 64 MiB
---@field graceMs integer|nil         default 3000

---@param o dsh.BashOpts
---@return dsh.Bash
function M.new(o)
  errors.check(MOD, "new", o, "table")
  errors.check(MOD, "new: subprocess", o.subprocess, "table")
  local b = setmetatable({
    cwd = o.cwd or o.subprocess.cwd,
    maxTimeoutMs = o.maxTimeoutMs or M.DEFAULT_MAX_TIMEOUT_MS,
    maxOutputBytes = o.maxOutputBytes or M.DEFAULT_MAX_OUTPUT_BYTES,
    maxSpillBytes = o.maxSpillBytes or M.DEFAULT_MAX_SPILL_BYTES,
    graceMs = o.graceMs or M.DEFAULT_GRACE_MS,
    _sub = o.subprocess, _procs = {}, _order = {}, _seq = 0, _fg = {},
  }, Bash)
  b.timeoutMs = math.min(o.timeoutMs or M.DEFAULT_TIMEOUT_MS, b.maxTimeoutMs)
  return b
end

local function disposed()
  return errors.new("DISPOSED", MOD .. ": ctx.bash is disposed")
end

-- Spawn options common to run and start (misuse raises, naming method).
-- The options of run and start, and the names other shells' APIs use for
-- them (what a caller, or a model, writes first).
local OPTIONS = {
  run = { "command", "timeout", "workdir", "env", "stdin", "signal" },
  start = { "command", "workdir", "env", "stdin", "signal" },
}
local ALIASES = { cmd = "command", script = "command", cwd = "workdir", dir = "workdir", timeoutMs = "timeout",
  timeout_ms = "timeout", environment = "env", envs = "env", input = "stdin" }

-- An unknown option is misuse naming it, with the closest known one (or the
-- list): a misspelt option is otherwise ignored, or reported as another.
local function check_options(method, o)
  local known = OPTIONS[method]
  local unknown
  for k in pairs(o) do
    local ok = false
    for _, name in ipairs(known) do ok = ok or k == name end
    if not ok and (unknown == nil or tostring(k) < tostring(unknown)) then unknown = k end
  end
  if unknown == nil then return end
  local key = tostring(unknown)
  local near = ALIASES[key]
  if near == "timeout" and method ~= "run" then near = nil end
  near = near or (type(unknown) == "string" and schema.closest(key, known)) or nil
  if near then errors.misuse(MOD, '%s: unknown option "%s" (did you mean "%s"?)', method, key, near) end
  errors.misuse(MOD, '%s: unknown option "%s" (options: %s)', method, key, table.concat(known, ", "))
end

function Bash:_spawn_opts(method, o, script)
  errors.check(MOD, method, o, "table")
  check_options(method, o)
  errors.check(MOD, method .. ": command", o.command, "string")
  errors.check(MOD, method .. ": workdir", o.workdir, "string", true)
  errors.check(MOD, method .. ": env", o.env, "table", true)
  errors.check(MOD, method .. ": stdin", o.stdin, "string", true)
  if o.signal ~= nil and not async.is_signal(o.signal) then
    errors.misuse(MOD, "%s: signal must be a dsh.async signal", method)
  end
  local env = {}
  for k, v in pairs(M.ENV) do env[k] = v end
  for k, v in pairs(o.env or {}) do env[k] = v end
  local cwd = o.workdir or self.cwd
  if o.workdir and o.workdir:sub(1, 1) ~= "/" and self.cwd then cwd = self.cwd .. "/" .. o.workdir end
  local collect = { maxBytes = self.maxOutputBytes, spill = { maxBytes = self.maxSpillBytes } }
  return {
    argv = { "bash", "-c", script or o.command }, cwd = cwd, env = env, graceMs = self.graceMs,
    stdio = { stdin = o.stdin and { data = o.stdin } or "ignore", stdout = collect, stderr = collect },
  }
end

local function aborted_before(signal)
  local r = signal.reason
  local text = type(r) == "table" and r.message or (r ~= nil and tostring(r) or "aborted")
  return errors.new("ABORTED", "aborted before spawn: " .. tostring(text), { reason = r })
end

-- The shell's exit, reported on a descriptor of its own (see the header),
-- with " jobs" when background jobs of its own still ran.
local function exit_report(nonce)
  return "exec {__dsh_exit_fd}>&2; trap '__dsh_status=$?; __dsh_jobs=$(jobs -pr); printf \"\\036dsh-exit "
    .. nonce .. " %d%s\\036\" \"$__dsh_status\" \"${__dsh_jobs:+ jobs}\" >&\"$__dsh_exit_fd\"' EXIT; "
end

local function exit_pattern(nonce)
  return "\30dsh%-exit " .. nonce .. " (%d+)( ?j?o?b?s?)\30"
end

-- Watch stderr for the exit report: on_exit(status, report_bytes, jobs) once.
local function watch_exit(collector, nonce, on_exit)
  local carry, pat = "", exit_pattern(nonce)
  collector:watch(function(s)
    local buf = carry .. s
    local from, to, status, jobs = buf:find(pat)
    if from then
      collector:watch(nil)
      on_exit(tonumber(status), to - from + 1, jobs == " jobs")
    else
      carry = buf:sub(-64)
    end
  end)
end

---@class dsh.BashStream
---@field text string        the retained tail
---@field total integer      bytes the command wrote
---@field spillPath string|nil a complete copy, when one was kept

---@class dsh.BashResult
---@field exitCode integer|nil
---@field signal string|nil
---@field timedOut boolean     the command's own timeout stopped it
---@field aborted boolean      the caller's signal stopped it
---@field timeoutMs integer    the timeout it ran under (after the cap)
---@field stdout dsh.BashStream
---@field stderr dsh.BashStream
---@field background string|nil the id of the background process its shell left running

local function stream_of(c, strip, hidden)
  local r = c:readFrom(0)
  return { text = strip(r.text), total = r.nextOffset - hidden, spillPath = r.spillPath }
end

--- Run a command to its shell's end (or its timeout). Returns the result, or
-- nil, err when it could not run (bad workdir, sandbox gone, disposed ...).
---@param o {command: string, timeout: integer|nil, workdir: string|nil, env: table|nil, stdin: string|nil,
---          signal: dsh.AbortSignal|nil}
---@return dsh.BashResult|nil, dsh.Error|nil
function Bash:run(o)
  errors.check(MOD, "run", o, "table")
  check_options("run", o)
  local timeout = o.timeout
  if timeout == nil then
    timeout = self.timeoutMs
  elseif type(timeout) ~= "number" or timeout <= 0 or timeout % 1 ~= 0 then
    errors.misuse(MOD, "run: timeout must be a positive integer number of milliseconds")
  end
  timeout = math.min(timeout, self.maxTimeoutMs)
  local nonce = sysutil.random_hex(8)
  local spec = self:_spawn_opts("run", o, exit_report(nonce) .. tostring(o.command))
  if self._disposed then return nil, disposed() end
  if o.signal and o.signal.aborted then return nil, aborted_before(o.signal) end
  local h, err = self._sub:spawn(spec)
  if not h then return nil, err end
  self._fg[h] = true

  local wake = async.future()
  local function poke()
    if not wake:done() then wake:resolve() end
  end
  local shell_exit, hidden, jobs = nil, 0, false
  watch_exit(h.stderr, nonce, function(status, n, j)
    shell_exit, hidden, jobs = status, n, j
    poke()
  end)
  h.done:on_settle(poke)
  local timed_out, aborted = false, false
  local timer = loop.timer(function()
    timed_out = true
    h:terminate()
    poke()
  end)
  timer:start(timeout)
  local off = o.signal and o.signal:on_abort(function()
    if not timed_out then aborted = true end
    h:terminate()
    poke()
  end)
  local adopt = false
  while not h.done:done() do
    wake:await()
    wake = async.future()
    if shell_exit and not h.done:done() and not timed_out and not aborted then
      -- the shell is gone; its output ends soon unless something it left holds it
      local settle = loop.timer(poke)
      settle:start(jobs and M.SETTLE_MS or M.DETACHED_SETTLE_MS)
      wake:await()
      wake = async.future()
      settle:close()
      if not h.done:done() and not timed_out and not aborted then
        adopt = true
        break
      end
    end
  end
  timer:close()
  if off then off() end
  h.stderr:watch(nil)
  self._fg[h] = nil

  local pat = exit_pattern(nonce)
  local function strip(s) return (s:gsub(pat, "")) end
  local res
  if adopt then
    res = { exitCode = shell_exit }
  else
    local derr
    res, derr = h.done:await()
    if not res then return nil, derr end
  end
  local r = {
    exitCode = res.exitCode, signal = res.signal, timedOut = timed_out, aborted = aborted, timeoutMs = timeout,
    stdout = stream_of(h.stdout, strip, 0), stderr = stream_of(h.stderr, strip, hidden),
  }
  if adopt then
    local p = self:_register(o.command, h, {
      offsets = { stdout = h.stdout:readFrom(0).nextOffset, stderr = h.stderr:readFrom(0).nextOffset },
      strip = strip,
    })
    r.background = p.id
  end
  return r
end

-- A background process for handle h, with the next id; ended ones beyond
-- MAX_ENDED are forgotten, oldest first.
function Bash:_register(command, h, o)
  self._seq = self._seq + 1
  local p = process.new("bash-" .. self._seq, command, h, o)
  self._procs[p.id] = p
  self._order[#self._order + 1] = p
  local ended = 0
  for i = #self._order, 1, -1 do
    local q = self._order[i]
    if not q:running() then
      ended = ended + 1
      if ended > M.MAX_ENDED then
        table.remove(self._order, i)
        self._procs[q.id] = nil
      end
    end
  end
  return p
end

--- Start a command in the background (no timeout). Returns a dsh.BashProcess
-- at once; a start that fails later is reported by the next readOutput.
---@param o {command: string, workdir: string|nil, env: table|nil, stdin: string|nil, signal: dsh.AbortSignal|nil}
---@return dsh.BashProcess|nil, dsh.Error|nil
function Bash:start(o)
  local spec = self:_spawn_opts("start", o)
  if self._disposed then return nil, disposed() end
  if o.signal and o.signal.aborted then return nil, aborted_before(o.signal) end
  local h, err = self._sub:spawn(spec)
  if not h then return nil, err end
  local p = self:_register(o.command, h)
  if o.signal then
    local off
    off = o.signal:on_abort(function() h:terminate() end)
    h.done:on_settle(function() off() end)
  end
  return p
end

-- The process named by p (a dsh.BashProcess or its id), or nil, err.
function Bash:_process(method, p)
  local id = p
  if type(p) == "table" then
    id = p.id
  elseif type(p) ~= "string" then
    errors.misuse(MOD, "%s: expected a background process or its id, got %s", method, type(p))
  end
  local found = self._procs[id]
  if not found or (type(p) == "table" and found ~= p) then
    return nil, errors.new("BASH_UNKNOWN_PROCESS", string.format("%s: no background process %s", MOD, tostring(id)))
  end
  return found
end

--- What a background process wrote since the last read, and its state:
-- {text=, running=, exitCode=, signal=, lossy=}, or nil, err for an unknown one.
---@param p dsh.BashProcess|string
---@return dsh.BashRead|nil, dsh.Error|nil
function Bash:readOutput(p)
  local proc, err = self:_process("readOutput", p)
  if not proc then return nil, err end
  return proc:read()
end

--- A background process's state without reading its output:
-- {running=, exitCode=, signal=}, or nil, err for an unknown one.
---@param p dsh.BashProcess|string
function Bash:status(p)
  local proc, err = self:_process("status", p)
  if not proc then return nil, err end
  return proc:state()
end

--- Stop a background process's group (TERM, KILL after graceMs) and wait until
-- it is gone: true, or false when it had ended already; nil, err for an unknown one.
---@param p dsh.BashProcess|string
---@return boolean|nil, dsh.Error|nil
function Bash:kill(p)
  local proc, err = self:_process("kill", p)
  if not proc then return nil, err end
  return proc:kill()
end

--- The background processes still known, in start order.
---@return dsh.BashProcess[]
function Bash:list()
  return { unpack(self._order) }
end

--- Stop every command (foreground ones too) and wait until each group is
-- gone. Later calls return nil, DISPOSED. Idempotent.
function Bash:dispose()
  if self._disposed then return true end
  self._disposed = true
  for h in pairs(self._fg) do h:terminate() end
  for _, p in ipairs(self._order) do
    if p:running() then p._h:terminate() end
  end
  for _, p in ipairs(self._order) do p:join() end
  return true
end

--- The text a model sees for a result (dsh.bash._render); max defaults to 64000.
---@param r dsh.BashResult
---@param max_output integer|nil
---@return string
function M.render(r, max_output)
  return render.render(r, max_output or M.DEFAULT_MAX_OUTPUT_BYTES)
end

function Bash:render(r)
  return render.render(r, self.maxOutputBytes)
end

M.Bash = Bash
return M
