--- The envd session of ctx.e2b: the object every provider reaches the
-- sandbox through (getSandbox().envd), in front of the backend's client, so
-- the sandbox's lifetime never surprises the host.
--
-- Owns: the sandbox's current client (a resume brings a new one), the
-- public entry points (dsh.envd.ENTRY_POINTS: each one method here, whose
-- call is one request), recovery, activity, and the pids of the processes
-- started through it. Never re-enters itself: a request calls the client's
-- method on the client, so what that method does inside (start -> stream ->
-- ...) is part of the one request and never recovers or retries on its own
-- (a signal would reach the new daemon's process of the same pid); only
-- what a caller asks for retries. A process started through it sends its
-- later calls here too (dsh.envd's opts.via).
--
-- A request that fails as "unavailable" (the daemon is not there; E2B's
-- router answers 502 for a paused or deleted sandbox) asks the backend where
-- the sandbox stands (recover):
--   paused   it is resumed (connect) and the request is made again, once;
--   gone     the request, and every later one, returns SANDBOX_GONE saying
--            why and when (killed, killed by its timeout ...);
--   running  the request is made again once when the daemon answers its
--            health check, else its failure is returned.
-- One recovery runs at a time; requests that fail meanwhile wait for it, and
-- for a second after one found the sandbox unreachable they fail at once.
-- Processes do not survive a pause of a local sandbox, and their pids are
-- reused by the next daemon: a request about a process started before the
-- resume is not sent, and returns not_found saying so (on E2B, whose pause
-- may keep processes, it is sent and a not_found answer says so). Pids are
-- what the session knows a process by: one that the context starts again
-- after the resume belongs to the new process from then on.
-- Each request counts as activity (the cloud backend extends the sandbox's
-- timeout: h:touch()), and so does every open stream (the client's activity
-- hooks: h:hold() and h:release()).
-- A sandbox whose daemon does not answer in time is not recovered: the
-- client's own deadlines (dsh.envd._watch) end its calls with
-- SANDBOX_UNRESPONSIVE naming the sandbox (the session labels every client
-- it stands for "sandbox <id>"), and the session passes that on; once
-- dispose ran past its deadline (or began, or the sandbox is gone) every
-- request returns that error at once (is_closing). A cloud sandbox is across
-- the internet: its client doubts it later (CLOUD_SLOW_MS) and waits longer
-- for a probe (CLOUD_PROBE_TIMEOUT_MS).
local async = require "dsh.async"
local envd = require "dsh.envd"
local errors = require "dsh.errors"
local loop = require "dsh.core.loop"

local M = {}

M.MAX_PIDS = 4096 -- processes remembered with the incarnation they were started in
M.UNREACHABLE_MS = 1000 -- after a recovery that found the sandbox unreachable, requests fail at once this long
M.CLOUD_SLOW_MS = 1000
M.CLOUD_PROBE_TIMEOUT_MS = 5000

-- Entry points whose first argument is a pid.
local PID_METHODS = {
  connect = true, send_stdin = true, send_pty = true, close_stdin = true, send_signal = true, update_pty = true,
  group_status = true, watch_group = true,
}
-- Entry points whose options (at this argument) take `via`: the process they open sends its calls here.
local VIA_ARG = { start = 1, connect = 2 }

local unpack = unpack -- luacheck: ignore 143
local pack = function(...) return { n = select("#", ...), ... } end

---@class dsh.e2b.Session
local Session = {}
Session.__index = Session
Session.__tostring = function(s) return "dsh.e2b.envd(" .. tostring(s._h.id) .. ")" end

local function code_of(err)
  return type(err) == "table" and err.code or nil
end

-- The client the session stands for: what its errors call the daemon
-- (SANDBOX_UNRESPONSIVE names the sandbox), its tolerances, and its activity.
function Session:_adopt()
  local h = self._h
  local c = h.envd
  if not c then return end
  c.label = "sandbox " .. tostring(h.id)
  if self._service.backend == "cloud" then
    c.slow_ms, c.probe_timeout_ms = M.CLOUD_SLOW_MS, M.CLOUD_PROBE_TIMEOUT_MS
  end
  if h.hold then c.stream_hooks = { hold = function() h:hold() end, release = function() h:release() end } end
end

--- The session of the sandbox handle h of service (a dsh.E2B). h: the
-- backend's handle (h.envd, h:recover(), h.keeps_processes, and optionally
-- h:touch(), h:hold(), h:release()). opts.on_resume: called after a resume
-- (what setup made on the sandbox; its failure shows in the requests that
-- need it).
---@return dsh.e2b.Session
function M.new(service, h, opts)
  local s = setmetatable({ _service = service, _h = h, _epoch = 0, _pids = {}, _order = {},
    _on_resume = opts and opts.on_resume }, Session)
  s:_adopt()
  return s
end

--- The error every request returns at once now (dispose ran past its
-- deadline, the sandbox is gone, the service is disposing), or nil.
---@return dsh.Error|nil
function Session:is_closing()
  local svc = self._service
  if svc._overdue then return svc._overdue end
  if svc._gone then return svc._gone end
  if svc._disposing then return svc:_disposed_error() end
  return nil
end

function Session:_remember(pid)
  if type(pid) ~= "number" then return end
  if self._pids[pid] == nil then
    self._order[#self._order + 1] = pid
    if #self._order > M.MAX_PIDS then self._pids[table.remove(self._order, 1)] = nil end
  end
  self._pids[pid] = self._epoch
end

-- True when pid was started before the last resume.
function Session:_stale(pid)
  local e = self._pids[pid]
  return e ~= nil and e < self._epoch
end

function Session:_pause_story()
  local p = self._h.paused or {}
  local s = "the sandbox " .. (p.reason or "paused")
  if p.at then s = s .. " at " .. p.at end
  if p.resumed_at then s = s .. " and was resumed at " .. p.resumed_at end
  return s
end

function Session:_process_gone(pid)
  return errors.new("not_found", string.format("process %d is gone: %s; processes do not survive a pause",
    pid, self:_pause_story()))
end

--- Where the sandbox stands after a request failed with err: true (running,
-- or resumed: ask again), or nil, err (SANDBOX_GONE, DISPOSED, or err itself).
function Session:recover(err)
  local closing = self:is_closing()
  if closing then return nil, closing end
  if self._recovering then return self._recovering:await() end
  -- a sandbox found unreachable moments ago is not asked again at once
  if self._unreachable_until and loop.now_ms() < self._unreachable_until then return nil, err end
  local f = async.future()
  self._recovering = f
  local ok, state, rerr = pcall(self._h.recover, self._h)
  self:_adopt() -- a resume brings a new client
  if not ok then
    self._recovering = nil
    f:resolve(nil, err)
    error(state, 0)
  end
  local res, out
  if state == "resumed" then
    self._epoch = self._epoch + 1
    res = true
    if self._on_resume then pcall(self._on_resume) end
  elseif state == "running" then
    res = true
  elseif code_of(rerr) == "SANDBOX_GONE" then
    self._service._gone = rerr
    out = rerr
  else
    out = err
    self._unreachable_until = loop.now_ms() + M.UNREACHABLE_MS
  end
  self._recovering = nil
  f:resolve(res, out)
  return res, out
end

-- args with opts.via = self at position i (a copy: the caller's table is its own).
local function with_via(self, args, i)
  local o = args[i]
  if o ~= nil and type(o) ~= "table" then return args end -- the client reports the misuse
  local copy = {}
  for k, v in pairs(o or {}) do copy[k] = v end
  copy.via = self
  args[i] = copy
  args.n = math.max(args.n, i)
  return args
end

--- One request: the client's entry point name with its arguments, made on
-- the sandbox's current client, recovered from and made again once when it
-- fails as unavailable (see the header). Returns what the client returns.
function Session:request(name, ...)
  local closing = self:is_closing()
  if closing then return nil, closing end
  local h = self._h
  local pid = PID_METHODS[name] and (...) or nil
  local args = pack(...)
  if VIA_ARG[name] then args = with_via(self, args, VIA_ARG[name]) end
  local function attempt()
    if pid and h.keeps_processes == false and self:_stale(pid) then
      return { n = 2, nil, self:_process_gone(pid) }
    end
    local c = h.envd
    return pack(c[name](c, unpack(args, 1, args.n)))
  end
  if h.touch then h:touch() end
  local r = attempt()
  if r[1] == nil and code_of(r[2]) == "unavailable" then
    local ok, rerr = self:recover(r[2])
    if not ok then return nil, rerr end
    r = attempt()
  end
  if r[1] == nil and pid and code_of(r[2]) == "not_found" and self:_stale(pid) and h.keeps_processes ~= false then
    r = { n = 2, nil, errors.new("not_found", tostring(r[2].message) .. ": " .. self:_pause_story()) }
  end
  if r[1] ~= nil and name == "start" and type(r[1]) == "table" then self:_remember(r[1].pid) end
  return unpack(r, 1, r.n)
end

-- Every entry point of the client, each one request.
for _, name in ipairs(envd.ENTRY_POINTS) do
  Session[name] = function(self, ...) return self:request(name, ...) end
end

M.Session = Session
return M
