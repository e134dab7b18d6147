--- dsh.async: coroutine tasks, futures, sleep, timeouts, abort signals.
--
-- The only module that yields and resumes. Code is written straight-line inside
-- tasks; an awaited future suspends the task until it settles. One rule for
-- interactive use: awaiting outside any task (the REPL, a plain script) runs
-- the loop until the future settles, so every async call also works line by
-- line in `luajit`.
--
-- I/O operations resolve their futures with `value` or `nil, err`; a future is
-- *rejected* only when code raised. Awaiting a rejected future re-raises its
-- error. A task that fails with nobody awaiting it is reported through the
-- unhandled-error reporter (stderr by default), never swallowed.
local errors = require "dsh.errors"
local loop = require "dsh.core.loop"

local M = {}

local unpack = unpack -- luacheck: ignore 143 (LuaJIT's global unpack)
local pack = function(...) return { n = select("#", ...), ... } end

local tasks = setmetatable({}, { __mode = "k" }) -- coroutine -> task
local ready = {}                                   -- coroutines to resume, FIFO
local ready_head, ready_tail = 1, 0
local unobserved = {}                              -- rejected futures nobody saw yet

local function default_reporter(err, traceback)
  io.stderr:write("dsh.async: unhandled error in task: ", tostring(err), "\n")
  if traceback then io.stderr:write(traceback, "\n") end
end
local reporter = default_reporter

--- Replace the unhandled-error reporter: fn(err, traceback). Returns the old one.
function M.on_unhandled(fn)
  local old = reporter
  reporter = fn or default_reporter
  return old
end

loop.set_reporter(function(err) reporter(err) end)

-- Futures -------------------------------------------------------------------

---@class dsh.Future
local Future = {}
Future.__index = Future
Future.__tostring = function(f)
  local state = not f._done and "pending" or (f._ok and "resolved" or "rejected")
  return "dsh.future (" .. state .. ")"
end

--- A new pending future. Settle it with :resolve(...) or :reject(err).
---@return dsh.Future
function M.future()
  return setmetatable({ _done = false, _waiters = {} }, Future)
end

local function schedule(co)
  ready_tail = ready_tail + 1
  ready[ready_tail] = co
end

local function settle(f, ok, vals)
  if f._done then return false end
  f._done, f._ok, f._vals = true, ok, vals
  local waiters = f._waiters
  f._waiters = nil
  for i = 1, #waiters do
    local w = waiters[i]
    if type(w) == "thread" then schedule(w) else w(f) end
  end
  if not ok and #waiters == 0 and not f._observed then
    unobserved[#unobserved + 1] = f
  end
  return true
end

function Future:resolve(...)
  return settle(self, true, pack(...))
end

function Future:reject(err, traceback)
  self._traceback = traceback
  return settle(self, false, pack(err))
end

function Future:done()
  return self._done
end

--- ok, values... without raising (marks a rejection as observed).
function Future:result()
  assert(self._done, "dsh.async: result of a pending future")
  self._observed = true
  return self._ok, unpack(self._vals, 1, self._vals.n)
end

--- Call fn(future) once settled (at once if it already is). Internal plumbing;
-- fn must not raise.
function Future:on_settle(fn)
  self._observed = true
  if self._done then fn(self) else self._waiters[#self._waiters + 1] = fn end
end

local function current_task()
  local co = coroutine.running()
  if co and tasks[co] then return co end
  return nil
end

M.current = function()
  local co = current_task()
  return co and tasks[co] or nil
end

-- Resume every ready task. Re-entrant: a blocking await inside a foreign
-- coroutine of a running task drains from there (the running task itself is
-- not "suspended", so it is skipped).
local function drain()
  while ready_head <= ready_tail do
    local co = ready[ready_head]
    ready[ready_head] = nil
    ready_head = ready_head + 1
    if coroutine.status(co) == "suspended" then
      local ok, err = coroutine.resume(co)
      if not ok then reporter("dsh.async: task resumed into an error: " .. tostring(err)) end
    end
  end
  ready_head, ready_tail = 1, 0
end

local function report_unobserved()
  if #unobserved == 0 then return end
  local list = unobserved
  unobserved = {}
  for _, f in ipairs(list) do
    if not f._observed then
      f._observed = true
      reporter(f._vals[1], f._traceback)
    end
  end
end

--- Run the loop once: dispatch events, resume woken tasks. Returns false when
-- nothing is ready, queued or active (nothing can ever happen again).
function M.step(timeout_ms)
  drain()
  report_unobserved()
  local n = loop.step(timeout_ms)
  drain()
  return n ~= nil
end

local function block_on(f)
  drain()
  while not f._done do
    report_unobserved()
    if loop.step(-1) == nil and ready_head > ready_tail then
      drain()
      if f._done then break end
      error("dsh.async: deadlock: the awaited operation can never complete (nothing is running)", 3)
    end
    drain()
  end
end

--- Wait for f: returns its values, or raises its error if it was rejected.
-- Inside a task the task is suspended; elsewhere the loop runs until f settles.
function Future:await()
  if not self._done then
    local co = current_task()
    if co then
      self._waiters[#self._waiters + 1] = co
      repeat coroutine.yield() until self._done
    else
      block_on(self)
    end
  end
  self._observed = true
  if self._ok then return unpack(self._vals, 1, self._vals.n) end
  error(self._vals[1], 0)
end

M.await = function(f, signal)
  if signal == nil then return f:await() end
  return M.race_signal(f, signal)
end

-- Tasks ---------------------------------------------------------------------

--- Start fn(...) as a task; returns its future (awaitable; resolves with fn's
-- return values, rejects with the error fn raised). The task starts at once
-- when called outside a task, or on the current scheduler pass inside one.
---@return dsh.Future
function M.run(fn, ...)
  errors.check("dsh.async", "run", fn, "function")
  local f = M.future()
  local args = pack(...)
  local co = coroutine.create(function()
    local tb
    local res = pack(xpcall(function() return fn(unpack(args, 1, args.n)) end, function(e)
      tb = debug.traceback(tostring(e), 2)
      return e
    end))
    if res[1] then
      f:resolve(unpack(res, 2, res.n))
    else
      f:reject(res[2], tb)
    end
    -- LuaJIT's weak tables have no ephemerons: the entry's value reaches its
    -- key (f.coroutine), so it would never be collected; a finished task
    -- leaves explicitly. A suspended task stays: what wakes it may hold it
    -- only through this table.
    tasks[coroutine.running()] = nil
  end)
  tasks[co] = f
  f.coroutine = co
  schedule(co)
  if not current_task() then drain() end
  return f
end
M.spawn = M.run

--- Suspend the current task until the next scheduler pass (or run one step).
function M.yield()
  local co = current_task()
  if co then
    schedule(co)
    coroutine.yield()
  else
    M.step(0)
  end
end

-- Abort signals -------------------------------------------------------------

---@class dsh.AbortSignal
---@field aborted boolean
---@field reason any
local Signal = {}
Signal.__index = Signal
Signal.__tostring = function(s)
  return s.aborted and ("dsh.signal (aborted: " .. tostring(s.reason) .. ")") or "dsh.signal"
end

local function new_signal()
  return setmetatable({ aborted = false, _listeners = {}, _next = 1 }, Signal)
end

--- Call fn(reason) when the signal aborts (at once if it already has).
-- Returns a function that removes the listener.
function Signal:on_abort(fn)
  if self.aborted then
    fn(self.reason)
    return function() end
  end
  local key = self._next
  self._next = key + 1
  self._listeners[key] = fn
  return function() self._listeners[key] = nil end
end

--- nil, err (code ABORTED, with .reason) when aborted, else true.
function Signal:check()
  if self.aborted then return nil, M.abort_error(self.reason) end
  return true
end

local function abort(sig, reason)
  if sig.aborted then return false end
  if reason == nil then reason = "aborted" end
  sig.aborted, sig.reason = true, reason
  local listeners = sig._listeners
  sig._listeners = {}
  local keys = {}
  for k in pairs(listeners) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local ok, err = xpcall(listeners[k], debug.traceback, reason)
    if not ok then reporter(err) end
  end
  return true
end

---@class dsh.AbortController
---@field signal dsh.AbortSignal
local Controller = {}
Controller.__index = Controller

--- A controller and its signal; :abort(reason) aborts the signal once.
---@return dsh.AbortController
function M.controller()
  return setmetatable({ signal = new_signal() }, Controller)
end

function Controller:abort(reason)
  return abort(self.signal, reason)
end

--- A signal that aborts when any of the given signals (nil entries ignored) does.
function M.any_signal(...)
  local out = new_signal()
  for i = 1, select("#", ...) do
    local s = select(i, ...)
    if s then
      if s.aborted then abort(out, s.reason) break end
      s:on_abort(function(reason) abort(out, reason) end)
    end
  end
  return out
end

--- The error value for an abort: code ABORTED, message tostring(reason).
function M.abort_error(reason)
  if errors.is(reason) then return reason end
  return errors.new("ABORTED", tostring(reason == nil and "aborted" or reason), { reason = reason })
end

--- True when v is a signal made here.
function M.is_signal(v)
  return getmetatable(v) == Signal
end

-- Combinators ---------------------------------------------------------------

--- Await f unless signal aborts first; then returns nil, abort error.
function M.race_signal(f, signal)
  if signal.aborted then return nil, M.abort_error(signal.reason) end
  if f._done then return f:await() end
  local gate = M.future()
  local off = signal:on_abort(function(reason) gate:resolve(false, reason) end)
  f:on_settle(function() gate:resolve(true) end)
  local settled, reason = gate:await()
  off()
  if settled then return f:await() end
  return nil, M.abort_error(reason)
end

--- Sleep ms milliseconds. With a signal, returns nil, abort error if it aborts.
function M.sleep(ms, signal)
  errors.check("dsh.async", "sleep", ms, "number")
  local f = M.future()
  local t = loop.timer(function() f:resolve(true) end)
  t:start(ms)
  local ok, a, b = pcall(function()
    if signal then return M.race_signal(f, signal) end
    return f:await()
  end)
  t:close()
  if not ok then error(a, 0) end
  return a, b
end

--- Run fn(signal) as a task; if it has not finished after ms, abort its signal
-- with a TIMEOUT error and return nil, that error. Otherwise return fn's values.
function M.timeout(ms, fn, parent)
  errors.check("dsh.async", "timeout", ms, "number")
  local ctl = M.controller()
  local off = parent and parent:on_abort(function(r) ctl:abort(r) end)
  local err = errors.new("TIMEOUT", string.format("timed out after %d ms", ms))
  local t = loop.timer(function() ctl:abort(err) end)
  t:start(ms)
  local task = M.run(fn, ctl.signal)
  local res = pack(pcall(M.race_signal, task, ctl.signal))
  t:close()
  if off then off() end
  if not res[1] then error(res[2], 0) end
  if ctl.signal.aborted and not task._done then
    task:on_settle(function() end) -- its late failure is expected, not unhandled
  end
  return unpack(res, 2, res.n)
end

--- Await every future; returns a list of each one's first value. Raises the
-- first rejection (after all have settled, so nothing is left running).
function M.all(list)
  local out = {}
  local first_err
  for i, f in ipairs(list) do
    local ok, v = pcall(f.await, f)
    if ok then out[i] = v elseif first_err == nil then first_err = v end
  end
  if first_err ~= nil then error(first_err, 0) end
  return out
end

--- Wait for the first future to settle; returns its index and its values
-- (raises if it was rejected).
function M.race(list)
  local gate = M.future()
  for i, f in ipairs(list) do
    f:on_settle(function() gate:resolve(i) end)
  end
  local i = gate:await()
  return i, list[i]:await()
end

--- Wrap a function so each call runs it as a task and awaits it: inside a
-- task it suspends, outside it drives the loop.
function M.wrap(fn)
  return function(...)
    return M.run(fn, ...):await()
  end
end

return M
