--- dsh.subprocess: the subprocess seam — managed process groups, stdio
-- projection, spill files, disposal to quiescence (reference §2.3).
--
-- Everything backends share is written here once: option checks and their
-- messages, the one environment scrub, the one code-point-safe collector
-- (dsh.subprocess._output), stdin ordering, deferred terminate, abort, spill
-- retention, the live set and disposal. A backend only starts a process group
-- somewhere and moves bytes (providers/subprocess_local, providers/subprocess_e2b).
--
--   local h = assert(ctx.subprocess:spawn {
--     argv = { "bash", "-c", "make test" }, graceMs = 2000,
--     stdio = { stdout = { maxBytes = 30000, spill = { maxBytes = 2^26 } }, stderr = "pipe" },
--   })
--   local outcome, err = h.done:await()   --> {exitCode = 0} or {signal = "SIGTERM"}; nil, err
--   print(h.stdout:readFrom(0).text)
--
-- Failure conventions: misuse raises (the reference's messages, after
-- "<module>: <method>: "); a spawn refused before it starts (pre-aborted
-- signal, disposed service) returns nil, err (code ABORTED / DISPOSED,
-- message `aborted before spawn: <reason>`); a start that fails later
-- resolves `done` with nil, err (pid stays -1, waitForExit → true), and so
-- does a process whose outcome can no longer be learned (SUBPROCESS_LOST,
-- e.g. the sandbox daemon died under it). `done` rejects only when code
-- raised (a backend's bug).
local async = require "dsh.async"
local errors = require "dsh.errors"
local faults = require "dsh.faults"
local handle = require "dsh.subprocess._handle"
local output = require "dsh.subprocess._output"
local schema = require "dsh.schema"
local sysutil = require "dsh.core.sysutil"
local terminal = require "dsh.subprocess._terminal"

local Writer, Handle, Terminal = handle.Writer, handle.Handle, terminal.Terminal

local M = {}
local MOD = "dsh.subprocess"

M.MAX_GRACE_MS = 2147483647 -- the largest timer delay everywhere (reference §8.12)
M.DEFAULT_GRACE_MS = 2000
M.ROLLBACK_TIMEOUT_MS = 5000
M.OFFSET_MESSAGE = output.OFFSET_MESSAGE
M.collector = output.collector
M.pipe = output.pipe

-- The environment scrub ---------------------------------------------------------

--- The one definition (reference §2.3, §8.2): an ambient variable is dropped
-- when its name, compared case-insensitively (ASCII), contains one of
-- `contains` or starts with one of `prefixes`. Explicit env is applied after,
-- so explicit names always survive. Backends encode these rules for their
-- daemon (subprocess-e2b: dshd's envScrub, the stock-envd wrapper's case
-- pattern) and never copy them.
M.scrub_rules = setmetatable({}, {
  __index = { contains = { "KEY", "PASSWORD", "SECRET", "TOKEN" }, prefixes = { "DSH_" } },
  __newindex = function() errors.misuse(MOD, "scrub_rules is read-only") end,
})

--- True when an ambient variable of this name is dropped.
function M.scrubbed(name)
  local up = name:upper()
  for _, p in ipairs(M.scrub_rules.prefixes) do
    if up:sub(1, #p) == p then return true end
  end
  for _, c in ipairs(M.scrub_rules.contains) do
    if up:find(c, 1, true) then return true end
  end
  return false
end

--- A copy of env without the scrubbed names.
function M.scrub_env(env)
  local out = {}
  for k, v in pairs(env or {}) do
    if not M.scrubbed(k) then out[k] = v end
  end
  return out
end

--- scrub(ambient), then explicit on top (names need not be identifiers: FOO-BAR works).
function M.compose_env(ambient, explicit)
  local out = M.scrub_env(ambient)
  for k, v in pairs(explicit or {}) do out[k] = v end
  return out
end

--- A random id for a process's state directory.
function M.new_id()
  local h = sysutil.random_hex(16)
  return table.concat({ h:sub(1, 8), h:sub(9, 12), h:sub(13, 16), h:sub(17, 20), h:sub(21) }, "-")
end

-- Option checks -------------------------------------------------------------------
-- Misuse raises "dsh.subprocess: <method>: <what>" (errors.misuse: at the
-- caller's line); the reference's own texts follow the method's name.

local function misuse(method, fmt, ...)
  errors.misuse(MOD, "%s: " .. fmt, method, ...)
end

local function check_argv(method, argv)
  if type(argv) ~= "table" then
    misuse(method, "invalid argv: expected a table of strings, got %s", type(argv))
  end
  if type(argv[1]) ~= "string" or argv[1] == "" then
    misuse(method, "invalid argv: expected a non-empty program name at argv[0]")
  end
  local copy = {}
  for i = 1, #argv do
    local v = argv[i]
    if type(v) ~= "string" then misuse(method, "invalid argv: argv[%d] must be a string", i - 1) end
    if v:find("\0", 1, true) then misuse(method, "invalid argv: argv[%d] contains a NUL byte", i - 1) end
    copy[i] = v
  end
  return copy
end

-- graceMs messages are the reference's, prefixed with the provider's name.
local function check_grace(prefix, method, g)
  if g == nil then return M.DEFAULT_GRACE_MS end
  if type(g) ~= "number" or g ~= g or g <= 0 or g == math.huge then
    errors.misuse(prefix, "%s: graceMs must be a positive finite number", method)
  end
  if g > M.MAX_GRACE_MS then errors.misuse(prefix, "%s: graceMs must be at most %d", method, M.MAX_GRACE_MS) end
  return math.ceil(g)
end

local function check_env(method, env)
  if env == nil then return nil end
  if type(env) ~= "table" then misuse(method, "env must be a table of name = value") end
  local out = {}
  for k, v in pairs(env) do
    if type(k) ~= "string" or k == "" or k:find("[=%z]") then
      misuse(method, "env name %q is not a valid variable name", tostring(k))
    end
    if type(v) == "number" then v = tostring(v) end
    if type(v) ~= "string" or v:find("\0", 1, true) then
      misuse(method, "env.%s must be a string without NUL bytes", k)
    end
    out[k] = v
  end
  return out
end

local function positive_int(what, v)
  if type(v) ~= "number" or v < 1 or v % 1 ~= 0 or v > 2 ^ 53 - 1 then
    misuse("spawn", "%s must be a positive integer", what)
  end
  return v
end

local function check_out(name, v)
  if v == nil or v == "pipe" then return { mode = "pipe" } end
  if v == "inherit" then return { mode = "inherit" } end
  if type(v) ~= "table" then
    misuse("spawn", 'stdio.%s must be "pipe", "inherit" or {maxBytes=, spill=}', name)
  end
  local s = { mode = "collect", maxBytes = positive_int("stdio." .. name .. ".maxBytes", v.maxBytes) }
  if v.spill ~= nil then
    if type(v.spill) ~= "table" then misuse("spawn", "stdio.%s.spill must be {maxBytes=}", name) end
    s.spill = { maxBytes = positive_int("stdio." .. name .. ".spill.maxBytes", v.spill.maxBytes) }
  end
  return s
end

local function check_stdio(stdio)
  if stdio ~= nil and type(stdio) ~= "table" then misuse("spawn", "stdio must be a table") end
  stdio = stdio or {}
  local stdin, data = stdio.stdin or "ignore", nil
  if type(stdin) == "table" then
    if type(stdin.data) ~= "string" then misuse("spawn", "stdio.stdin.data must be a string") end
    stdin, data = "data", stdin.data
  elseif stdin ~= "ignore" and stdin ~= "pipe" then
    misuse("spawn", 'stdio.stdin must be "ignore", "pipe" or {data=}')
  end
  return stdin, data, check_out("stdout", stdio.stdout), check_out("stderr", stdio.stderr)
end

local function reason_text(reason)
  if reason == nil then return "aborted" end
  if type(reason) == "table" and reason.message then return tostring(reason.message) end
  return tostring(reason)
end

-- Handles ------------------------------------------------------------------------

---@class dsh.subprocess.Service
---@field name string   the provider's name, the prefix of its messages
---@field cwd string    default working directory of spawns
local Service = {}
Service.__index = Service
Service.__tostring = function(s)
  local n = 0
  for _ in pairs(s._live) do n = n + 1 end
  return string.format("%s(%d live%s)", s.name, n, s._disposing and ", disposing" or "")
end

--- The service's fault-injection points (dsh.faults): afterStart, fn(handle,
--- bp) → true | nil, err, runs once a spawn's process group exists and before
--- the handle is published; a failure rolls the start back (the group is
--- killed and waited for) and `done` resolves with it.
M.FAULT_POINTS = { "afterStart" }

-- The backend contract ----------------------------------------------------------
-- A backend is a table; everything may await:
--   backend.name, backend.cwd
--   backend:state_dir(id)          where this process's spill files go
--   backend:start(spec)            → bp | nil, err. spec = {argv, cwd, env, stdin="ignore"|"pipe",
--                                    stdout/stderr = {mode="pipe"|"inherit"|"collect",
--                                                     spill={path=, maxBytes=}},
--                                    pty={rows=,cols=} (terminals), on_data=fn(stream, bytes) (may wait),
--                                    on_gap=fn(stream, n) (n bytes were lost, e.g. across a reconnect)}
--   bp.pid                         the process group id
--   bp:write(s) / bp:close_stdin() → true | nil, err
--   bp:signal(sig)                 to the whole group → true | nil, err
--   bp:terminate(grace_ms)         TERM to the group now, KILL after grace_ms unless it is empty
--   bp:kill()                      KILL to the group now (rollback)
--   bp:wait()                      → {exit_code=, signal=} | nil, err, once the leader ended and all
--                                    output was delivered through on_data (the words of dsh.core.proc
--                                    and the envd client: the seam turns them into the reference's)
--   bp:wait_quiescent(signal)      → true (group empty) | false (aborted) | nil, err
--   bp:remove(paths, dir)          delete spill files (and dir when given); errors ignored
--   bp:spill_size(path)            the spill file's size in bytes, nil when it cannot be learned
--   bp:resize(rows, cols)          terminals
--   bp:signal_foreground(sig)      terminals: to the terminal's foreground process group → pgid | nil, err
--   bp:foreground()                terminals: that process group → pgid | nil, err
--   bp:kill_session()              terminals: SIGKILL whatever is left in the session (other job groups)
--   bp:session_groups()            terminals: pgids with a live member in the session → list | nil, err
--   bp:signal_session(sig)         terminals: sig to every group of the session (SIGTERM: then SIGCONT)
--   bp:close()                     release everything (idempotent)
--   backend:resolveExecutable(cmd), backend:dispose() (optional)
--   Failures are nil, err in the contract's words (M.BACKEND_CODES), or what
--   the world below says when it is about the sandbox (SANDBOX_GONE,
--   SANDBOX_UNRESPONSIVE, DISPOSED) or the wire (envd's codes) and nothing
--   finer exists.

--- The functions every backend provides (the rest: above, on the process
--- its start returns).
M.BACKEND = { "state_dir", "start", "resolveExecutable" }

--- The codes a backend's process object returns in the contract's own words
--- (code -> meaning), as dsh.fs.BACKEND_CODES.
M.BACKEND_CODES = {
  SUBPROCESS_NOT_FOUND = "the process, its group or its terminal's foreground group is gone",
  SUBPROCESS_CLOSED = "the process was released",
  SUBPROCESS_START = "the process could not be started",
  SUBPROCESS_EXECUTABLE = "resolveExecutable found no single absolute path",
}

--- A service over a backend (M.BACKEND).
---@param backend table
---@return dsh.subprocess.Service
function M.service(backend)
  schema.backend(MOD, "service", backend, M.BACKEND)
  return setmetatable({ name = backend.name, cwd = backend.cwd, _backend = backend, _live = {},
    _faults = faults.points(MOD, M.FAULT_POINTS) }, Service)
end

--- Arm fn at a fault point (M.FAULT_POINTS), or disarm it (fn nil): a seam
--- for specs and `dsh poc`, which make a start fail where no real fault can
--- be arranged on demand.
---@param point string
---@param fn function|nil
function Service:injectFault(point, fn)
  self._faults:inject(point, fn)
end

---@class dsh.subprocess.SpawnOpts
---@field argv string[]
---@field cwd string|nil           default: the service's cwd
---@field stdio table|nil          {stdin="ignore"|"pipe"|{data=},
---                                 stdout="pipe"|"inherit"|{maxBytes=, spill={maxBytes=}}, stderr=...}
---@field graceMs number|nil       TERM → KILL grace (default 2000, at most 2147483647)
---@field signal dsh.AbortSignal|nil aborting it terminates the group
---@field env table<string,string>|nil explicit variables, applied after the scrubbed ambient environment

--- Start a process group; returns its handle at once (the start is asynchronous).
---@param o dsh.subprocess.SpawnOpts
---@return dsh.subprocess.Handle|nil, dsh.Error|nil
function Service:spawn(o)
  if type(o) ~= "table" then misuse("spawn", "expected an options table, got %s", type(o)) end
  local argv = check_argv("spawn", o.argv)
  local grace = check_grace(self.name, "spawn", o.graceMs)
  local stdin, data, out, err = check_stdio(o.stdio)
  local env = check_env("spawn", o.env)
  if o.cwd ~= nil and type(o.cwd) ~= "string" then misuse("spawn", "cwd must be a string") end
  if o.signal ~= nil and not async.is_signal(o.signal) then misuse("spawn", "signal must be an abort signal") end
  if o.signal and o.signal.aborted then
    return nil, errors.new("ABORTED", "aborted before spawn: " .. reason_text(o.signal.reason),
      { reason = o.signal.reason })
  end
  if self._disposing then return nil, errors.new("DISPOSED", self.name .. ": the service is disposing") end
  local h = Handle.new(self, {
    id = M.new_id(), argv = argv, cwd = o.cwd or self.cwd, env = env, stdin = stdin, stdin_data = data,
    stdout = out, stderr = err, grace = grace, signal = o.signal,
  })
  return h
end

---@class dsh.subprocess.TerminalOpts
---@field argv string[]
---@field cwd string|nil
---@field env table<string,string>|nil
---@field rows integer|nil  default 24
---@field cols integer|nil  default 80
---@field graceMs number|nil

--- Start a process on a new PTY; waits until it runs.
---@param o dsh.subprocess.TerminalOpts
---@return dsh.subprocess.Terminal|nil, dsh.Error|nil
function Service:spawnTerminal(o)
  if type(o) ~= "table" then misuse("spawnTerminal", "expected an options table, got %s", type(o)) end
  local argv = check_argv("spawnTerminal", o.argv)
  local grace = check_grace(self.name, "spawnTerminal", o.graceMs)
  local env = check_env("spawnTerminal", o.env)
  local function dim(what, v, d)
    if v == nil then return d end
    if type(v) ~= "number" or v < 1 or v > 65535 or v % 1 ~= 0 then
      misuse("spawnTerminal", "%s must be an integer in [1, 65535]", what)
    end
    return v
  end
  local rows, cols = dim("rows", o.rows, 24), dim("cols", o.cols, 80)
  if o.cwd ~= nil and type(o.cwd) ~= "string" then misuse("spawnTerminal", "cwd must be a string") end
  if self._disposing then return nil, errors.new("DISPOSED", self.name .. ": the service is disposing") end
  return Terminal.start(self, {
    argv = argv, cwd = o.cwd or self.cwd, env = env, pty = { rows = rows, cols = cols }, grace = grace,
  })
end

--- The absolute path of an executable, as the backend's world sees it.
---@return string|nil, dsh.Error|nil
function Service:resolveExecutable(cmd)
  return self._backend:resolveExecutable(cmd)
end

--- Number of handles and terminals not yet released.
function Service:live_count()
  local n = 0
  for _ in pairs(self._live) do n = n + 1 end
  return n
end

--- Terminate every live handle and terminal, then join each (done, then the
-- whole group gone) before returning. Returns true, or nil and the release
-- failure (SUBPROCESS_DISPOSE listing every one when several failed; every
-- handle was still tried, none is left behind).
function Service:dispose()
  if self._disposed then return self._disposed:await() end
  local f = async.future()
  self._disposed = f
  self._disposing = true
  local list = {}
  for obj in pairs(self._live) do list[#list + 1] = obj end
  for _, obj in ipairs(list) do obj:_dispose_start() end
  local failures = {}
  for _, obj in ipairs(list) do
    local ok, err = obj:_join()
    if not ok then failures[#failures + 1] = err end
  end
  if self._backend.dispose then self._backend:dispose() end
  local err = errors.combine(failures, "SUBPROCESS_DISPOSE", self.name .. ": dispose")
  if err then f:resolve(nil, err) else f:resolve(true) end
  return f:await()
end

M.Service = Service
M.Writer = Writer
M.Handle = Handle
M.Terminal = Terminal
return M
