--- dsh.pty: the PTY seam — a registry of persistent terminals fenced to their
-- owners (reference §2.4 "Registry").
--
-- Backends (pty_e2b, pty_local) register a type; an owner (an agent: any
-- table with a string `id`, optionally a `signal` whose abort ends it) spawns
-- sessions of a type, sends them input and waits until the shell is ready,
-- reads their scrollback, looks at their screen, signals their foreground job
-- and kills them. Every session belongs to exactly one owner; another owner
-- gets FOREIGN_SESSION. Closing an owner, or disposing the service, closes its
-- sessions and reports every failure at once.
--
--   local svc = ctx.pty
--   local agent = { id = "agent-1" }
--   local s = assert(svc:spawn(agent, { type = "shell", name = "build" }))
--   local op = assert(svc:startSend(agent, s.id, { text = "make", submit = true }))
--   local r = op:wait()     --> {viewport = "...", waitReason = "stdin_read", sessionStatus = {kind = "running"}}
--   svc:kill(agent, s.id)
--
-- Expected failures are nil, err with err.code one of M.codes; misuse raises.
local async = require "dsh.async"
local errors = require "dsh.errors"
local ptyenv = require "dsh.pty.env"
local schema = require "dsh.schema"
local signals = require "dsh.signals"

local M = {}
local MOD = "dsh.pty"

--- Every code this seam (and the sessions under it) returns, by name: the
-- catalogue's pty table (dsh.errors, where each is described) and ABORTED
-- (the caller's signal aborted a spawn).
M.codes = { ABORTED = "ABORTED" }
for code in pairs(errors.CATALOGUE.pty) do M.codes[code] = code end
setmetatable(M.codes, { __index = function(_, k) error(MOD .. ": no error code " .. tostring(k), 2) end })
local codes = M.codes

--- How a send settles: the reference's four, then "match" (the send's
-- waitFor text was printed) and "superseded" (a detached send replaced by a
-- newer one).
M.WAIT_REASONS = { "stdin_read", "inferred_idle", "timeout", "session_exit", "match", "superseded" }
M.SIGNALS = { "SIGINT", "SIGTERM", "SIGKILL", "SIGTSTP", "SIGHUP" }

--- "SIGTERM" for 15 (dsh.signals: a shell reports a job killed by signal N
-- as status 128 + N); nil when unknown.
function M.signal_name(n)
  return signals.name(n)
end

local function misuse(method, fmt, ...)
  errors.misuse(MOD, method .. ": " .. fmt, ...)
end

local function check_owner(method, owner)
  if type(owner) ~= "table" or type(owner.id) ~= "string" or owner.id == "" then
    misuse(method, "owner must be a table with a non-empty string id")
  end
end

local function check_id(method, id)
  if type(id) ~= "string" then misuse(method, "session id must be a string, got %s", type(id)) end
end

local function check_signal(method, signal)
  if signal ~= nil and not async.is_signal(signal) then misuse(method, "signal must be an abort signal") end
end

local function aggregate(what, failures)
  if #failures == 0 then return true end
  local msgs = {}
  for i, e in ipairs(failures) do msgs[i] = tostring(e.message or e) end
  return nil, errors.new(codes.PTY_DISPOSE, string.format("%s: %d session(s) could not be closed: %s", what,
    #failures, table.concat(msgs, "; ")), { errors = failures })
end

-- Whether a failed close left the session behind: its processes may live
-- on, so it stays to be closed again. A session whose cleanup succeeded is
-- gone even when its close reports the transport failure that ended it.
local function left_behind(session, ok)
  return not ok and not (session.closed and session:closed())
end

---@class dsh.pty.Service
local Service = {}
Service.__index = Service
Service.__tostring = function(s)
  local n = 0
  for _ in pairs(s._sessions) do n = n + 1 end
  return string.format("dsh.pty(%d sessions%s)", n, s._disposing and ", disposing" or "")
end

--- A new registry.
---@return dsh.pty.Service
function M.service()
  return setmetatable({ _backends = {}, _sessions = {}, _owners = setmetatable({}, { __mode = "k" }),
    _next = 0, _ctl = async.controller() }, Service)
end

--- The backend contract: backend:spawn(req, signal) → session | nil, err,
--- where req = {id, owner, name, cwd, env}; the session is a dsh.pty.session
--- over a driver (dsh.pty.session says what a driver provides; every world
--- uses the one backend, dsh.pty.backend). Failures: the codes of M.codes.
M.BACKEND = { "spawn" }

--- Register a backend (M.BACKEND) for a type.
---@return true|nil, dsh.Error|nil
function Service:registerBackend(type_, backend)
  if type(type_) ~= "string" or type_ == "" then misuse("registerBackend", "type must be a non-empty string") end
  schema.backend(MOD, "registerBackend", backend, M.BACKEND)
  if self._backends[type_] then
    return nil, errors.new(codes.DUPLICATE_BACKEND, MOD .. ": a backend of type " .. type_ .. " is registered")
  end
  self._backends[type_] = backend
  return true
end

--- Remove a backend and close every session of its type (a provider does
--- this when it is disposed, so no session outlives what it runs on).
--- true, or nil, err (PTY_DISPOSE, every failure in err.errors).
function Service:closeBackend(type_, backend)
  if self._backends[type_] == backend then self._backends[type_] = nil end
  local jobs, failures = {}, {}
  for id, entry in pairs(self._sessions) do
    if entry.session.type == type_ then
      jobs[#jobs + 1] = { session = entry.session,
        task = async.run(function() return self:_close(id, entry, "backend disposed") end) }
    end
  end
  for _, rec in pairs(self._owners) do
    local keep = {}
    for _, f in ipairs(rec.failed) do
      if f.session.type == type_ then
        jobs[#jobs + 1] = { session = f.session,
          task = async.run(function() return f.session:close("cleanup retried") end) }
      else
        keep[#keep + 1] = f
      end
    end
    rec.failed = keep
  end
  for _, j in ipairs(jobs) do
    local ok, err = j.task:await()
    if left_behind(j.session, ok) then failures[#failures + 1] = err end
  end
  return aggregate(MOD .. ": closeBackend " .. type_, failures)
end

-- The record of an owner: its sessions, names (reserved while spawning), live state.
function Service:_owner(owner)
  local rec = self._owners[owner]
  if not rec then
    rec = { sessions = {}, names = {}, live = true, failed = {}, spawning = 0 }
    self._owners[owner] = rec
    if owner.signal and async.is_signal(owner.signal) then
      rec.off = owner.signal:on_abort(function() async.run(self.closeOwner, self, owner) end)
    end
  end
  return rec
end

function Service:_live(owner)
  local rec = self:_owner(owner)
  return rec.live and not (owner.signal and owner.signal.aborted)
end

---@class dsh.pty.SpawnSpec
---@field type string
---@field name string|nil  unique among the owner's sessions
---@field cwd string|nil   relative to the backend's working directory
---@field env table<string,string>|nil

--- Start a session of a type for owner; it is published only once it is ready.
---@param owner table
---@param spec dsh.pty.SpawnSpec
---@param signal dsh.AbortSignal|nil
---@return dsh.pty.Session|nil, dsh.Error|nil
function Service:spawn(owner, spec, signal)
  check_owner("spawn", owner)
  if type(spec) ~= "table" or type(spec.type) ~= "string" then misuse("spawn", "spec.type must be a string") end
  if spec.name ~= nil and (type(spec.name) ~= "string" or spec.name == "") then
    misuse("spawn", "spec.name must be a non-empty string")
  end
  if spec.cwd ~= nil and type(spec.cwd) ~= "string" then misuse("spawn", "spec.cwd must be a string") end
  ptyenv.check(MOD, spec.env) -- before anything is reserved for the session
  check_signal("spawn", signal)
  if self._disposing then return nil, errors.new(codes.SERVICE_DISPOSING, MOD .. ": the service is disposing") end
  if not self:_live(owner) then
    return nil, errors.new(codes.OWNER_NOT_LIVE, MOD .. ": owner " .. owner.id .. " is not live")
  end
  local backend = self._backends[spec.type]
  if not backend then return nil, errors.new(codes.NO_BACKEND, MOD .. ": no backend of type " .. spec.type) end
  local rec = self:_owner(owner)
  if spec.name and rec.names[spec.name] then
    return nil, errors.new(codes.DUPLICATE_NAME, MOD .. ": owner " .. owner.id .. " already has a session named "
      .. spec.name)
  end
  if signal and signal.aborted then return nil, async.abort_error(signal.reason) end
  self._next = self._next + 1
  local id = "pty-" .. self._next
  if spec.name then rec.names[spec.name] = id end
  rec.spawning = rec.spawning + 1
  local ctl = async.controller()
  rec.ctls = rec.ctls or {}
  rec.ctls[ctl] = true
  local any = async.any_signal(signal, self._ctl.signal, ctl.signal)
  local s, err = backend:spawn({ id = id, owner = owner, name = spec.name, cwd = spec.cwd, env = spec.env }, any)
  rec.spawning = rec.spawning - 1
  rec.ctls[ctl] = nil
  if s and (self._disposing or not self:_live(owner) or (signal and signal.aborted)) then
    -- published only on success: a spawn that outlived its caller or owner is closed
    if signal and signal.aborted then
      err = async.abort_error(signal.reason)
    elseif self._disposing then
      err = errors.new(codes.SERVICE_DISPOSING, MOD .. ": spawn abandoned: the service is disposing")
    else
      err = errors.new(codes.OWNER_NOT_LIVE, MOD .. ": spawn abandoned: owner " .. owner.id .. " was closed")
    end
    local ok, cerr = s:close("spawn abandoned")
    if left_behind(s, ok) then rec.failed[#rec.failed + 1] = { session = s, err = cerr } end
    s = nil
  end
  if not s then
    if spec.name then rec.names[spec.name] = nil end
    if err and err.code == codes.PTY_BACKEND_CLEANUP then
      rec.failed[#rec.failed + 1] = { session = err.session, err = err }
    end
    return nil, err
  end
  rec.sessions[id] = s
  self._sessions[id] = { session = s, owner = owner }
  return s
end

-- The session id of owner, or nil, NO_SESSION / FOREIGN_SESSION.
function Service:_get(owner, id)
  local entry = self._sessions[id]
  if not entry then return nil, errors.new(codes.NO_SESSION, MOD .. ": no session " .. id) end
  if entry.owner ~= owner then
    return nil, errors.new(codes.FOREIGN_SESSION, MOD .. ": session " .. id .. " belongs to another owner")
  end
  return entry.session
end

local MAX_SAFE = 2 ^ 53 - 1

local function check_ms(method, what, v)
  if v ~= nil and (type(v) ~= "number" or v < 1 or v % 1 ~= 0 or v > MAX_SAFE) then
    misuse(method, "%s must be a positive safe integer", what)
  end
end

--- Send input and wait for readiness: an operation with wait(), readOutput(),
--- cancel() and detach() (see dsh.pty.session). input.timeoutMs and
--- input.idleMs replace the config's timeoutMs and idleSilenceMs for this
--- send; input.waitFor (plain text) settles it as "match" once the program
--- prints it (the echo of the typed text does not count). A send that was
--- detached is superseded by this one; one someone waits for is SEND_ACTIVE.
---@param input {text: string, submit: boolean|nil, timeoutMs: integer|nil, idleMs: integer|nil, waitFor: string|nil}
---@return dsh.pty.Operation|nil, dsh.Error|nil
function Service:startSend(owner, id, input, signal)
  check_owner("startSend", owner)
  check_id("startSend", id)
  if type(input) ~= "table" or type(input.text) ~= "string" then misuse("startSend", "input.text must be a string") end
  if input.submit ~= nil and type(input.submit) ~= "boolean" then
    misuse("startSend", "input.submit must be a boolean")
  end
  check_ms("startSend", "input.timeoutMs", input.timeoutMs)
  check_ms("startSend", "input.idleMs", input.idleMs)
  if input.waitFor ~= nil and (type(input.waitFor) ~= "string" or input.waitFor == "") then
    misuse("startSend", "input.waitFor must be a non-empty string")
  end
  check_signal("startSend", signal)
  local s, err = self:_get(owner, id)
  if not s then return nil, err end
  if s:held() then
    return nil, errors.new(codes.SEND_ACTIVE, MOD .. ": session " .. id .. " already has an active send")
  end
  return s:startSend({ text = input.text, submit = input.submit, timeoutMs = input.timeoutMs,
    idleMs = input.idleMs, waitFor = input.waitFor }, signal)
end


--- Scrollback lines, newest first: {text, lineBegin, lineEnd, totalLines, lost}.
---@param o {offset: integer|nil, count: integer|nil}|nil
function Service:read(owner, id, o)
  check_owner("read", owner)
  check_id("read", id)
  o = o or {}
  if type(o) ~= "table" then misuse("read", "options must be a table") end
  local off, count = o.offset, o.count
  if off ~= nil and (type(off) ~= "number" or off < 0 or off % 1 ~= 0 or off > MAX_SAFE) then
    misuse("read", "offset must be a non-negative safe integer")
  end
  if count ~= nil and (type(count) ~= "number" or count < 1 or count % 1 ~= 0 or count > MAX_SAFE) then
    misuse("read", "count must be a positive safe integer")
  end
  local s, err = self:_get(owner, id)
  if not s then return nil, err end
  return s:read { offset = off or 0, count = count or 500 }
end

--- A signal (INT, TERM, KILL, TSTP, HUP) to the foreground process group.
---@return {delivered: boolean, targetPgid: integer, signal: string}|nil, dsh.Error|nil
function Service:signal(owner, id, name)
  check_owner("signal", owner)
  check_id("signal", id)
  local s, err = self:_get(owner, id)
  if not s then return nil, err end
  return s:signal(name)
end

--- Session status: {kind = "running"} or {kind = "exited", exitCode, signal}.
function Service:status(owner, id)
  check_owner("status", owner)
  check_id("status", id)
  local s, err = self:_get(owner, id)
  if not s then return nil, err end
  return s:status()
end

--- The screen: {lines, cursor = {row, col}, rows, cols, altscreen, sessionStatus, ...}.
function Service:screen(owner, id)
  check_owner("screen", owner)
  check_id("screen", id)
  local s, err = self:_get(owner, id)
  if not s then return nil, err end
  return s:screen()
end

--- Wait until the screen matches a pattern or goes quiet.
---@param o {pattern: string|nil, plain: boolean|nil, idleMs: integer|nil, timeoutMs: integer|nil}
---@return {matched: boolean, reason: string, screen: table}|nil, dsh.Error|nil
function Service:waitFor(owner, id, o)
  check_owner("waitFor", owner)
  check_id("waitFor", id)
  if type(o) ~= "table" then misuse("waitFor", "options must be a table") end
  if o.pattern == nil and o.idleMs == nil then misuse("waitFor", "give a pattern or idleMs") end
  if o.pattern ~= nil and (type(o.pattern) ~= "string" or o.pattern == "") then
    misuse("waitFor", "pattern must be a non-empty string")
  end
  for _, k in ipairs { "idleMs", "timeoutMs" } do
    local v = o[k]
    if v ~= nil and (type(v) ~= "number" or v < 1 or v % 1 ~= 0 or v > MAX_SAFE) then
      misuse("waitFor", "%s must be a positive safe integer", k)
    end
  end
  if o.pattern and not o.plain and not pcall(string.find, "", o.pattern) then
    misuse("waitFor", "pattern is not a valid Lua pattern: %s", o.pattern)
  end
  local s, err = self:_get(owner, id)
  if not s then return nil, err end
  return s:waitFor { pattern = o.pattern, plain = o.plain, idleMs = o.idleMs, timeoutMs = o.timeoutMs or 30000 }
end

--- Resize the terminal; the screen reflows.
function Service:resize(owner, id, rows, cols)
  check_owner("resize", owner)
  check_id("resize", id)
  local s, err = self:_get(owner, id)
  if not s then return nil, err end
  return s:resize(rows, cols)
end

--- Sessions of owner: {id, name, type, pid, status, busy, rows, cols, cwd}, by id.
function Service:list(owner)
  check_owner("list", owner)
  local out = {}
  for id, entry in pairs(self._sessions) do
    if entry.owner == owner then
      local s = entry.session
      out[#out + 1] = { id = id, name = s.name, type = s.type, pid = s.pid, status = s:status(),
        busy = s:busy(), rows = s.rows, cols = s.cols, cwd = s.cwd }
    end
  end
  table.sort(out, function(a, b)
    local x, y = tonumber(a.id:match("%d+")), tonumber(b.id:match("%d+"))
    return x < y
  end)
  return out
end

-- Close one published session; it leaves the registry once it is closed.
function Service:_close(id, entry, reason)
  local ok, err = entry.session:close(reason)
  if not left_behind(entry.session, ok) then
    if self._sessions[id] == entry then
      self._sessions[id] = nil
      local rec = self._owners[entry.owner]
      if rec then
        rec.sessions[id] = nil
        if entry.session.name then rec.names[entry.session.name] = nil end
      end
    end
  end
  return ok, err
end

--- Close a session. true for a close this call started; false when one was
--- already in flight (it still waits for it); nil, err when it failed: the
--- session stays (its processes may live on) and a later kill tries again.
---@return boolean|nil, dsh.Error|nil
function Service:kill(owner, id)
  check_owner("kill", owner)
  check_id("kill", id)
  local s, err = self:_get(owner, id)
  if not s then return nil, err end
  local entry = self._sessions[id]
  local in_flight = s._close_f ~= nil
  local ok, cerr = self:_close(id, entry, "killed")
  if left_behind(s, ok) then return nil, cerr end
  return not in_flight
end

--- Close every session of owner (and retry failed cleanups); the owner is no
--- longer live. true, or nil, err (PTY_DISPOSE, every failure in err.errors).
function Service:closeOwner(owner)
  check_owner("closeOwner", owner)
  local rec = self:_owner(owner)
  rec.live = false
  if rec.off then rec.off() end
  for ctl in pairs(rec.ctls or {}) do ctl:abort(errors.new(codes.OWNER_NOT_LIVE, MOD .. ": the owner was closed")) end
  return self:_close_all(owner, rec, MOD .. ": closeOwner " .. owner.id)
end

function Service:_close_all(owner, rec, what)
  local jobs = {}
  for id, entry in pairs(self._sessions) do
    if entry.owner == owner then
      jobs[#jobs + 1] = { session = entry.session,
        task = async.run(function() return self:_close(id, entry, "owner closed") end) }
    end
  end
  -- sessions whose startup cleanup failed: their processes may live on; try again
  local failed = rec.failed
  rec.failed = {}
  for _, f in ipairs(failed) do
    jobs[#jobs + 1] = { session = f.session, task = async.run(function() return f.session:close("cleanup retried") end),
      retry = f }
  end
  local failures = {}
  for _, j in ipairs(jobs) do
    local ok, err = j.task:await()
    if left_behind(j.session, ok) then
      failures[#failures + 1] = j.retry and j.retry.err or err
      if j.retry then rec.failed[#rec.failed + 1] = j.retry end
    end
  end
  return aggregate(what, failures)
end

--- Dispose: abort pending spawns, close every session of every owner,
--- report all failures (PTY_DISPOSE). New calls get SERVICE_DISPOSING.
function Service:dispose()
  if self._disposed then return self._disposed:await() end
  local f = async.future()
  self._disposed = f
  self._disposing = true
  self._ctl:abort(errors.new(codes.SERVICE_DISPOSING, MOD .. ": the service is disposing"))
  local owners, failures = {}, {}
  for _, entry in pairs(self._sessions) do owners[entry.owner] = true end
  for owner, rec in pairs(self._owners) do
    if #rec.failed > 0 then owners[owner] = true end
  end
  for owner in pairs(owners) do
    local ok, err = self:_close_all(owner, self:_owner(owner), MOD .. ": dispose")
    if not ok then
      for _, e in ipairs(err.errors) do failures[#failures + 1] = e end
    end
  end
  for _, rec in pairs(self._owners) do
    if rec.off then rec.off() end
    -- what could not be closed is reported; nothing can retry it any more
    for _, failed in ipairs(rec.failed) do
      if failed.session and failed.session.release then failed.session:release() end
    end
  end
  for _, entry in pairs(self._sessions) do entry.session:release() end
  f:resolve(aggregate(MOD .. ": dispose", failures))
  return f:await()
end

--- The ctx.pty provider: `ctx:use(require("dsh.pty").provider)`; backends
--- (providers/pty_e2b, pty_local) inject it and register their types.
M.provider = {
  name = "pty",
  provides = "pty",
  inject = {},
  setup = function(scope)
    local svc = M.service()
    scope:on_dispose(function() return svc:dispose() end)
    return svc
  end,
}

M.Service = Service
return M
