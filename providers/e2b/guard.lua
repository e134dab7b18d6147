--- The envd client of ctx.e2b: the backend's client behind a guard that
-- keeps the sandbox's lifetime from surprising the host.
--
-- Every provider reaches the sandbox through getSandbox().envd, which is
-- this guard: it has every method of dsh.envd's client and calls the
-- client's own code with itself as `self`, so the calls a method makes
-- (start -> stream) pass it too. When a call fails as "unavailable" (the
-- daemon is not there; E2B's router answers 502 for a paused or deleted
-- sandbox), the guard asks the backend where the sandbox stands:
--   paused   it is resumed (connect) and the call is made again, once;
--   gone     the call, and every later one, returns SANDBOX_GONE saying why
--            and when (killed, killed by its timeout ...);
--   running  the call is made again once when the daemon answers its health
--            check, else its failure is returned.
-- One recovery runs at a time; calls that fail meanwhile wait for it, and
-- for a second after one found the sandbox unreachable calls fail at once.
-- Processes do not survive a pause of a local sandbox, and their pids are
-- reused by the next daemon: a call about a process started before the
-- resume is not sent, and returns not_found saying so (on E2B, whose pause
-- may keep processes, the call is sent and a not_found answer says so).
-- Pids are what the guard knows a process by: one that the context starts
-- again after the resume belongs to the new process from then on.
-- Each call counts as activity (the cloud backend extends the sandbox's
-- timeout, and keeps extending it while a stream is open).
-- A sandbox whose daemon does not answer in time is not recovered: the
-- client's own deadlines (dsh.envd._watch) end its calls with
-- SANDBOX_UNRESPONSIVE naming the sandbox (the guard labels every client it
-- stands for "sandbox <id>"), and the guard passes that on; once dispose ran
-- past its deadline, every call returns that error at once. A cloud sandbox
-- is across the internet: its client doubts it later (CLOUD_SLOW_MS) and
-- waits longer for a probe (CLOUD_PROBE_TIMEOUT_MS).
local async = require "dsh.async"
local errors = require "dsh.errors"
local loop = require "dsh.loop"

local M = {}

M.MAX_PIDS = 4096 -- processes remembered with the incarnation they were started in
M.UNREACHABLE_MS = 1000 -- after a recovery that found the sandbox unreachable, calls fail at once this long
M.CLOUD_SLOW_MS = 1000
M.CLOUD_PROBE_TIMEOUT_MS = 5000

local PID_METHODS = {
  connect = true, send_stdin = true, send_pty = true, close_stdin = true, send_signal = true, update_pty = true,
  group_status = true, watch_group = true,
}

local unpack = unpack -- luacheck: ignore 143
local pack = function(...) return { n = select("#", ...), ... } end

local Guard = {}
Guard.__index = Guard

-- The client the guard stands for: what its errors call the daemon
-- (SANDBOX_UNRESPONSIVE names the sandbox), and its tolerances.
local function adopt(h, backend)
  local c = h.envd
  if not c then return end
  c.label = "sandbox " .. tostring(h.id)
  if backend == "cloud" then
    c.slow_ms, c.probe_timeout_ms = M.CLOUD_SLOW_MS, M.CLOUD_PROBE_TIMEOUT_MS
  end
end

--- A guard for the sandbox handle h of service (a dsh.E2B): {proxy=, ...}.
-- h: the backend's handle (h.envd, h:recover(), h.keeps_processes, and
-- optionally h:touch(), h:hold(), h:release()).
function M.new(service, h)
  local g = setmetatable({
    _service = service, _h = h, _epoch = 0, _pids = {}, _order = {}, _wrapped = {},
    _active = setmetatable({}, { __mode = "k" }),
  }, Guard)
  g.proxy = setmetatable({}, {
    __index = function(_, k)
      local v = g._h.envd[k]
      -- fields, and the client's private helpers, are the client's own
      if type(v) ~= "function" or (type(k) == "string" and k:sub(1, 1) == "_") then return v end
      local w = g._wrapped[k]
      if not w then
        w = function(_, ...) return g:_call(k, ...) end
        g._wrapped[k] = w
      end
      return w
    end,
    __newindex = function(_, k, v) g._h.envd[k] = v end,
    __tostring = function() return "dsh.e2b.envd(" .. tostring(h.id) .. ")" end,
  })
  adopt(h, service.backend)
  return g
end

local function code_of(err)
  return type(err) == "table" and err.code or nil
end

function Guard:_remember(pid)
  if type(pid) ~= "number" then return end
  if self._pids[pid] == nil then
    self._order[#self._order + 1] = pid
    if #self._order > M.MAX_PIDS then self._pids[table.remove(self._order, 1)] = nil end
  end
  self._pids[pid] = self._epoch
end

-- True when pid was started before the last resume.
function Guard:_stale(pid)
  local e = self._pids[pid]
  return e ~= nil and e < self._epoch
end

function Guard:_pause_story()
  local p = self._h.paused or {}
  local s = "the sandbox " .. (p.reason or "paused")
  if p.at then s = s .. " at " .. p.at end
  if p.resumed_at then s = s .. " and was resumed at " .. p.resumed_at end
  return s
end

function Guard:_process_gone(pid)
  return errors.new("not_found", string.format("process %d is gone: %s; processes do not survive a pause",
    pid, self:_pause_story()))
end

--- Where the sandbox stands after a call failed with err: true (running, or
-- resumed: call again), or nil, err (SANDBOX_GONE, DISPOSED, or err itself).
function Guard:recover(err)
  local svc = self._service
  if svc._overdue then return nil, svc._overdue end
  if svc._gone then return nil, svc._gone end
  if svc._disposing then return nil, svc:_disposed_error() end
  if self._recovering then return self._recovering:await() end
  -- a sandbox found unreachable moments ago is not asked again at once
  if self._unreachable_until and loop.now_ms() < self._unreachable_until then return nil, err end
  local f = async.future()
  self._recovering = f
  local ok, state, rerr = pcall(self._h.recover, self._h)
  adopt(self._h, svc.backend) -- a resume brings a new client
  if not ok then
    self._recovering = nil
    f:resolve(nil, err)
    error(state, 0)
  end
  local res, out
  if state == "resumed" then
    self._epoch = self._epoch + 1
    res = true
    -- what setup made on the sandbox (its failure shows in the calls that need it)
    if self.on_resume then pcall(self.on_resume) end
  elseif state == "running" then
    res = true
  elseif code_of(rerr) == "SANDBOX_GONE" then
    svc._gone = rerr
    out = rerr
  else
    out = err
    self._unreachable_until = loop.now_ms() + M.UNREACHABLE_MS
  end
  self._recovering = nil
  f:resolve(res, out)
  return res, out
end

-- A stream that counts as activity while it is open (h:hold / h:release).
local function held_stream(h, s)
  local released = false
  local function release()
    if not released then
      released = true
      h:release()
    end
  end
  h:hold()
  return setmetatable({
    next = function(_, ...)
      local msg, err = s.next(s, ...)
      if msg == nil then release() end
      return msg, err
    end,
    close = function(_, ...)
      release()
      return s.close(s, ...)
    end,
  }, { __index = s })
end

local MAIN = {} -- the key of calls made outside any coroutine

-- Only the outermost call of a task recovers and retries: the calls a
-- method makes (start -> stream -> ...) are part of it, and must not be
-- retried on their own after a resume (a signal would reach the new
-- daemon's process of the same pid).
function Guard:_call(name, ...)
  local svc = self._service
  if svc._overdue then return nil, svc._overdue end
  if svc._disposing then return nil, svc:_disposed_error() end
  if svc._gone then return nil, svc._gone end
  local h = self._h
  local pid = PID_METHODS[name] and (...) or nil
  local args = pack(...)
  local co = coroutine.running() or MAIN
  local outer = not self._active[co]
  local function attempt()
    if pid and h.keeps_processes == false and self:_stale(pid) then
      return { n = 2, nil, self:_process_gone(pid) }
    end
    local fn = h.envd[name]
    if not outer then return pack(fn(self.proxy, unpack(args, 1, args.n))) end
    self._active[co] = true
    local res = pack(pcall(fn, self.proxy, unpack(args, 1, args.n)))
    self._active[co] = nil
    if not res[1] then error(res[2], 0) end
    return pack(unpack(res, 2, res.n))
  end
  if outer and h.touch then h:touch() end
  local r = attempt()
  if outer and r[1] == nil and code_of(r[2]) == "unavailable" then
    local ok, rerr = self:recover(r[2])
    if not ok then return nil, rerr end
    r = attempt()
  end
  if r[1] == nil and pid and code_of(r[2]) == "not_found" and self:_stale(pid) and h.keeps_processes ~= false then
    r = { n = 2, nil, errors.new("not_found", tostring(r[2].message) .. ": " .. self:_pause_story()) }
  end
  if r[1] ~= nil then
    if name == "start" and type(r[1]) == "table" then
      self:_remember(r[1].pid)
    elseif name == "stream" and h.hold then
      r[1] = held_stream(h, r[1])
    end
  end
  return unpack(r, 1, r.n)
end

M.Guard = Guard
return M
