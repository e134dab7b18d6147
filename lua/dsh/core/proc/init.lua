--- dsh.core.proc: processes in their own process group (or session, or PTY), on the loop.
--
-- A thin layer over core/src/proc.c: the core reaps through libev, buffers
-- output with back-pressure and reports {DATA, EOF, EXIT, QUIET, DRAIN}
-- events; this module turns them into futures that read/write/wait await.
-- Inside a task those calls suspend; outside one (a REPL line) they drive
-- the loop until done.
--
--   local p = assert(proc.spawn { argv = { "sh", "-c", "echo hi" }, env = { PATH = "/usr/bin:/bin" } })
--   print(p:read_all())          --> "hi\n"
--   print(p:wait().exit_code)    --> 0
--   p:close()
--
-- Failures: misuse raises ("dsh.core.proc: spawn: ..."); expected failures return
-- nil, err with err.code PROC_SPAWN_FAILED (could not start: bad program,
-- bad cwd, ...), PROC_STDIN_CLOSED (the process stopped reading stdin),
-- PROC_CLOSED (the proc was closed while a call waited) or ABORTED (an abort
-- signal fired first).
local F = require "dsh.core._ffi"
local loop = require "dsh.core.loop"
local options = require "dsh.core.proc._opts"
local async = require "dsh.async"
local errors = require "dsh.errors"
local ffi, C = F.ffi, F.C

local MOD = "dsh.core.proc"
local M = {}

local EAGAIN, EEOF, ECLOSED, EINVAL = C.DSH_EAGAIN, C.DSH_EEOF, C.DSH_ECLOSED, C.DSH_EINVAL
local EV_DATA, EV_EOF, EV_EXIT = C.DSH_EV_PROC_DATA, C.DSH_EV_PROC_EOF, C.DSH_EV_PROC_EXIT
local EV_QUIET, EV_DRAIN = C.DSH_EV_PROC_QUIET, C.DSH_EV_PROC_DRAIN

local STDOUT, STDERR = C.DSH_PROC_STDOUT, C.DSH_PROC_STDERR
local STREAM = { stdout = STDOUT, stderr = STDERR, [1] = STDOUT, [2] = STDERR }
local STREAM_NAME = { [STDOUT] = "stdout", [STDERR] = "stderr" }
local DEFAULT_GRACE_MS = 2000

local errbuf = F.errbuf()
local peek_data = ffi.new("const uint8_t *[1]")
local peek_n = ffi.new("size_t[1]")
local status_buf = ffi.new("dsh_proc_status_t")

-- Misuse raises at the user's call: level 2 is the caller of the function
-- that calls raise(2, ...). Option checks (dsh.core.proc._opts) raise a tagged
-- table instead, which spawn re-raises at its own caller.
local function raise(level, fmt, ...)
  error(MOD .. ": " .. string.format(fmt, ...), level + 1)
end

local function core_error(rc)
  local name, msg = F.status(rc)
  return errors.new("PROC_" .. name, msg)
end

local function closed_error(what)
  return errors.new("PROC_CLOSED", what .. ": the process handle was closed")
end

local function stdin_closed_error()
  return errors.new("PROC_STDIN_CLOSED", "stdin is closed: the process stopped reading it (broken pipe)")
end

--- Signal name ("SIGTERM") of a number, or nil.
function M.signame(sig)
  local s = C.dsh_proc_signame(sig)
  return s ~= nil and ffi.string(s) or nil
end

--- Signal number of "TERM", "SIGTERM" (any case) or a number; nil when unknown.
function M.signum(sig)
  if type(sig) == "number" then return sig end
  local n = C.dsh_proc_signum(sig)
  return n ~= 0 and n or nil
end

--- Number of core procs not yet freed (for leak checks).
function M.live_count()
  return tonumber(C.dsh_proc_live_count())
end

---@class dsh.ProcStatus
---@field pid integer
---@field running boolean leader not yet reaped
---@field exit_code integer|nil set when the leader exited normally
---@field term_signal integer|nil set when a signal killed the leader
---@field signal string|nil that signal's name, e.g. "SIGTERM"
---@field core_dumped boolean
---@field quiescent boolean leader reaped and no member of the group left
---@field stdout_eof boolean
---@field stderr_eof boolean
---@field stdin_open boolean
---@field term_requested boolean
---@field kill_sent boolean the terminate ladder escalated to SIGKILL
---@field stdout_bytes integer
---@field stderr_bytes integer
---@field stdin_pending integer
---@field closed boolean|nil true on the snapshot kept by close()

local function status_of(ptr)
  C.dsh_proc_status(ptr, status_buf)
  local st = status_buf
  local sig = st.term_signal ~= 0 and st.term_signal or nil
  return {
    pid = st.pid,
    running = st.running ~= 0,
    exit_code = st.exit_code >= 0 and st.exit_code or nil,
    term_signal = sig,
    signal = sig and (M.signame(sig) or ("SIG" .. sig)) or nil,
    core_dumped = st.core_dumped ~= 0,
    quiescent = st.quiescent ~= 0,
    stdout_eof = st.stdout_eof ~= 0,
    stderr_eof = st.stderr_eof ~= 0,
    stdin_open = st.stdin_open ~= 0,
    term_requested = st.term_requested ~= 0,
    kill_sent = st.kill_sent ~= 0,
    stdout_bytes = tonumber(st.stdout_bytes),
    stderr_bytes = tonumber(st.stderr_bytes),
    stdin_pending = tonumber(st.stdin_pending),
  }
end

---@class dsh.ProcExit
---@field exit_code integer|nil nil when a signal ended the leader
---@field signal string|nil e.g. "SIGTERM"
---@field core_dumped boolean

local function exit_of(st)
  return { exit_code = st.exit_code, signal = st.signal, core_dumped = st.core_dumped }
end

---@class dsh.Proc
---@field pid integer the leader's pid, also the process group id
---@field id integer the loop id of its events
local Proc = {}
Proc.__index = Proc

Proc.__tostring = function(self)
  local st = self._ptr and status_of(self._ptr) or self._final
  local state
  if st.running then
    state = "running"
  elseif st.exit_code then
    state = "exited " .. st.exit_code
  else
    state = "killed by " .. tostring(st.signal)
  end
  if not self._ptr then state = state .. ", closed" end
  return string.format("dsh.core.proc %d (%s)", self.pid, state)
end

local by_id = setmetatable({}, { __mode = "v" }) -- id -> proc; events never anchor a proc

local function on_event(self, kind, status, n)
  if kind == EV_DATA or kind == EV_EOF then
    local f = self._readers[n]
    if f then
      self._readers[n] = nil
      f:resolve()
    end
  elseif kind == EV_EXIT then
    if not self._exit:done() then self._exit:resolve(exit_of(status_of(self._ptr))) end
  elseif kind == EV_QUIET then
    if not self._quiet:done() then self._quiet:resolve(true) end
  elseif kind == EV_DRAIN then
    local f = self._drain
    if f then
      self._drain = nil
      f:resolve(status)
    end
  end
end

local function handler(id)
  return function(kind, status, n)
    local self = by_id[id]
    if self and self._ptr then on_event(self, kind, status, n) end
  end
end

-- Spawn -----------------------------------------------------------------------

---@class dsh.SpawnOpts
---@field argv string[] program and arguments; argv[1] without "/" is looked up in env.PATH
---@field env table<string, string>|nil the exact environment (nothing is inherited); nil = empty
---@field cwd string|nil working directory (default: ours)
---@field stdin "pipe"|"null"|"inherit"|nil default "null"
---@field stdout "pipe"|"null"|"inherit"|nil default "pipe"
---@field stderr "pipe"|"null"|"inherit"|nil default "pipe"
---@field pty {rows: integer?, cols: integer?}|true|nil a new PTY as 0/1/2 (stdio options ignored)
---@field new_session boolean|nil setsid() instead of a new process group (always with pty)
---@field max_buffer_bytes integer|nil per output stream, and the stdin backlog write() allows; default 65536
---@field uid integer|nil run as this user (needs root)
---@field gid integer|nil run with this group (needs root)
---@field init_groups boolean|nil with uid: the account's supplementary groups

--- Start a process in its own process group (pgid == pid).
---@param opts dsh.SpawnOpts
---@return dsh.Proc|nil
---@return dsh.Error|nil
function M.spawn(opts)
  local id = loop.new_id()
  local out = ffi.new("dsh_proc_t *[1]")
  -- c points into keep (arrays, strings): nothing allocates between here and
  -- the call, and keep stays referenced until after it
  local ok, c, keep, modes, max, pty = pcall(options.build, opts)
  if not ok then
    if type(c) == "table" and c.misuse then error(c.misuse, 2) end
    error(c, 0)
  end
  local rc = C.dsh_proc_spawn(loop.ptr, c, id, out, errbuf, F.ERRLEN)
  keep[#keep + 1] = c
  if rc == EINVAL then error(MOD .. ": " .. ffi.string(errbuf), 2) end
  if rc ~= 0 then return nil, errors.new("PROC_SPAWN_FAILED", ffi.string(errbuf)) end
  local self = setmetatable({
    pid = tonumber(C.dsh_proc_pid(out[0])),
    id = id,
    _ptr = ffi.gc(out[0], function(ptr)
      C.dsh_proc_free(ptr)
      loop.off(id)
    end),
    _modes = modes,
    _pty = pty,
    _max = max,
    _readers = {},
    _exit = async.future(),
    _quiet = async.future(),
  }, Proc)
  by_id[id] = self
  loop.on(id, handler(id))
  loop.track(self, "proc")
  return self
end

-- Methods ---------------------------------------------------------------------

local function live(self, what, level)
  level = level or 3
  if getmetatable(self) ~= Proc then raise(level, "%s: expected a dsh.core.proc (use p:%s)", what, what) end
  local ptr = self._ptr
  if not ptr then raise(level, "%s: the proc is closed", what) end
  return ptr
end

local function check_signal(what, signal)
  if signal ~= nil and not async.is_signal(signal) then
    raise(3, "%s: expected an abort signal, got %s", what, type(signal))
  end
end

local function check_stream(self, what, stream)
  live(self, what, 4)
  local s = STREAM[stream or "stdout"]
  if not s then raise(3, "%s: stream must be \"stdout\" or \"stderr\", got %s", what, tostring(stream)) end
  if self._modes[STREAM_NAME[s]] ~= "pipe" then
    raise(3, "%s: %s is not a pipe%s", what, STREAM_NAME[s], self._pty and " (a pty has only stdout)" or "")
  end
  return s
end

--- The next chunk of output (bytes as read); nil at end of stream. Waits.
---@param stream "stdout"|"stderr"|nil default "stdout" (with a pty: the terminal)
---@return string|nil
---@return dsh.Error|nil
function Proc:read(stream)
  local s = check_stream(self, "read", stream)
  while true do
    local ptr = self._ptr
    if not ptr then return nil, closed_error("read") end
    local rc = C.dsh_proc_peek(ptr, s, peek_data, peek_n)
    if rc == 0 then
      local n = peek_n[0]
      local chunk = ffi.string(peek_data[0], n)
      C.dsh_proc_consume(ptr, s, n)
      return chunk
    elseif rc == EEOF then
      return nil
    elseif rc == EAGAIN then
      local f = self._readers[s]
      if not f then
        f = async.future()
        self._readers[s] = f
      end
      f:await()
    else
      return nil, core_error(rc)
    end
  end
end

--- Everything until end of stream, as one string. Waits.
---@param stream "stdout"|"stderr"|nil
---@return string|nil
---@return dsh.Error|nil
function Proc:read_all(stream)
  check_stream(self, "read_all", stream)
  local parts = {}
  while true do
    local chunk, err = self:read(stream)
    if err then return nil, err end
    if not chunk then return table.concat(parts) end
    parts[#parts + 1] = chunk
  end
end

--- Queue bytes for stdin (pipe or pty). Waits until they are written out when
-- more than max_buffer_bytes are pending.
---@param data string
---@return true|nil
---@return dsh.Error|nil
function Proc:write(data)
  local ptr = live(self, "write")
  errors.check(MOD, "write", data, "string")
  if self._modes.stdin ~= "pipe" then raise(2, "write: stdin is not a pipe") end
  if self._stdin_closed then raise(2, "write: stdin was closed with close_stdin()") end
  local rc = C.dsh_proc_write(ptr, data, #data)
  if rc == ECLOSED then return nil, stdin_closed_error() end
  if rc ~= 0 then return nil, core_error(rc) end
  while true do
    ptr = self._ptr
    if not ptr then return nil, closed_error("write") end
    C.dsh_proc_status(ptr, status_buf)
    if tonumber(status_buf.stdin_pending) <= self._max then return true end
    local f = self._drain
    if not f then
      f = async.future()
      self._drain = f
    end
    local status = f:await()
    if status == nil then return nil, closed_error("write") end
    if status == ECLOSED then return nil, stdin_closed_error() end
    if status < 0 then return nil, core_error(status) end
  end
end

--- Close stdin once the pending bytes are written (idempotent). Not for a pty:
-- write "\4" (end of file at the start of a line) instead.
function Proc:close_stdin()
  local ptr = live(self, "close_stdin")
  if self._pty then raise(2, "close_stdin: a pty has no separate stdin (write \"\\4\" for end of file)") end
  self._stdin_closed = true
  C.dsh_proc_close_stdin(ptr)
  return true
end

--- Send a signal to the whole group (default) or only the leader.
---@param sig integer|string e.g. 15, "TERM", "SIGTERM"
---@param group boolean|nil default true
---@return true|nil
---@return dsh.Error|nil
function Proc:signal(sig, group)
  local ptr = live(self, "signal")
  if type(sig) ~= "number" and type(sig) ~= "string" then
    raise(2, "signal: expected a signal number or name, got %s", type(sig))
  end
  local n = M.signum(sig)
  if not n or n < 0 or n % 1 ~= 0 then raise(2, "signal: unknown signal %s", tostring(sig)) end
  local rc = C.dsh_proc_signal(ptr, n, group == false and 0 or 1)
  if rc == EINVAL then raise(2, "signal: invalid signal %s", tostring(sig)) end
  if rc ~= 0 then return nil, core_error(rc) end
  return true
end

--- SIGTERM to the group now, SIGKILL after grace_ms unless it is gone by then.
-- Returns at once; idempotent (a second call never restarts the grace).
---@param grace_ms integer|nil default 2000
function Proc:terminate(grace_ms)
  local ptr = live(self, "terminate")
  if grace_ms ~= nil and (type(grace_ms) ~= "number" or grace_ms < 0) then
    raise(2, "terminate: grace_ms must be a non-negative number, got %s", tostring(grace_ms))
  end
  C.dsh_proc_terminate(ptr, math.floor(grace_ms or DEFAULT_GRACE_MS))
  return true
end

--- Wait for the leader to exit. With an abort signal: nil, err (ABORTED) if
-- it aborts first.
---@param signal dsh.AbortSignal|nil
---@return dsh.ProcExit|nil
---@return dsh.Error|nil
function Proc:wait(signal)
  local ptr = live(self, "wait")
  check_signal("wait", signal)
  local f = self._exit
  if not f:done() then
    local st = status_of(ptr)
    if not st.running then f:resolve(exit_of(st)) end
  end
  if signal then return async.race_signal(f, signal) end
  return f:await()
end

--- Wait until the process group has no member left: true, or false, err when
-- the signal aborted first (or the proc was closed meanwhile).
---@param signal dsh.AbortSignal|nil
---@return boolean
---@return dsh.Error|nil
function Proc:wait_quiescent(signal)
  local ptr = live(self, "wait_quiescent")
  check_signal("wait_quiescent", signal)
  if C.dsh_proc_quiescent(ptr) == 1 then return true end
  local ok, err
  if signal then ok, err = async.race_signal(self._quiet, signal) else ok, err = self._quiet:await() end
  if ok then return true end
  return false, err
end

--- True when the leader is reaped and the group has no member left.
function Proc:quiescent()
  return C.dsh_proc_quiescent(live(self, "quiescent")) == 1
end

--- Set the PTY window size (the group gets SIGWINCH).
function Proc:resize(rows, cols)
  local ptr = live(self, "resize")
  if not self._pty then raise(2, "resize: the proc has no pty") end
  for what, v in pairs { rows = rows, cols = cols } do
    if type(v) ~= "number" or v % 1 ~= 0 or v < 1 or v > 65535 then
      raise(2, "resize: %s must be an integer in [1, 65535], got %s", what, tostring(v))
    end
  end
  local rc = C.dsh_proc_resize(ptr, rows, cols)
  if rc ~= 0 then return nil, core_error(rc) end
  return true
end

--- The state in table form (after close: the last state, with closed = true).
---@return dsh.ProcStatus
function Proc:status()
  if not self._ptr then
    local copy = {}
    for k, v in pairs(self._final) do copy[k] = v end
    return copy
  end
  return status_of(self._ptr)
end

--- Kill the group if anything of it is left (SIGKILL), release the fds and
-- the core object. Idempotent. Calls waiting on the proc return PROC_CLOSED.
function Proc:close()
  local ptr = self._ptr
  if not ptr then return end
  self._final = status_of(ptr)
  self._final.closed = true
  self._ptr = nil
  C.dsh_proc_free(ffi.gc(ptr, nil))
  loop.off(self.id)
  by_id[self.id] = nil
  loop.untrack(self)
  local readers = self._readers
  self._readers = {}
  for _, f in pairs(readers) do f:resolve() end
  if self._drain then
    local f = self._drain
    self._drain = nil
    f:resolve(nil)
  end
  if not self._exit:done() then self._exit:resolve(nil, closed_error("wait")) end
  if not self._quiet:done() then self._quiet:resolve(false, closed_error("wait_quiescent")) end
end

M.Proc = Proc
return M
