--- dsh.core.loop: the Lua side of the one event loop.
--
-- The C core queues {kind, id, status, n} events; step() runs libev once and
-- hands each event to the handler registered for its id. Handlers are internal
-- (they settle futures); dsh.async resumes the waiting coroutines afterwards.
-- Also keeps the registry of live objects that specs check for leaks.
local F = require "dsh.core._ffi"
local ffi, C = F.ffi, F.C

local M = {}

local loop = C.dsh_loop_default()
assert(loop ~= nil, "dsh.core.loop: cannot create the libev default loop")
M.ptr = loop

local handlers = {}
local BATCH = 256
local events = ffi.new("dsh_event_t[?]", BATCH)

M.ESTATE = C.DSH_ESTATE -- nothing queued and nothing active

--- A fresh id for a core object (a Lua number; ids stay far below 2^53).
function M.new_id()
  return tonumber(C.dsh_loop_new_id(loop))
end

--- Route events for id to fn(kind, status, n). One handler per id.
function M.on(id, fn)
  handlers[id] = fn
end

function M.off(id)
  handlers[id] = nil
end

local report -- set by dsh.async: reports an error raised by a handler

function M.set_reporter(fn)
  report = fn
end

--- Run libev until events arrive (or timeout_ms passes; -1 = no limit) and
-- dispatch them. Returns the number dispatched, or nil when nothing is queued
-- and nothing is active (nothing could ever arrive).
function M.step(timeout_ms)
  local rc = C.dsh_loop_run(loop, timeout_ms or -1)
  if rc == M.ESTATE then return nil end
  local total = 0
  repeat
    local n = tonumber(C.dsh_loop_poll(loop, events, BATCH))
    for i = 0, n - 1 do
      local e = events[i]
      local h = handlers[tonumber(e.id)]
      if h then
        local ok, err = xpcall(h, debug.traceback, e.kind, e.status, tonumber(e.n))
        if not ok then
          if report then report(err) else io.stderr:write("dsh.core.loop: handler failed: ", tostring(err), "\n") end
        end
      end
    end
    total = total + n
  until n < BATCH
  return total
end

function M.now_ms()
  return C.dsh_loop_now_ms(loop)
end

-- Live objects by kind, for leak checks: every object that holds a core
-- resource registers itself on creation and unregisters when closed.
local live = setmetatable({}, { __mode = "k" })

function M.track(obj, kind)
  live[obj] = kind
end

function M.untrack(obj)
  live[obj] = nil
end

--- Map kind -> count of objects still open (empty table when none).
function M.live()
  local counts = {}
  for _, kind in pairs(live) do
    counts[kind] = (counts[kind] or 0) + 1
  end
  return counts
end

-- Timers ------------------------------------------------------------------

local Timer = {}
Timer.__index = Timer
Timer.__tostring = function(t)
  return string.format("dsh.timer(%d%s)", t.id, t._ptr and "" or ", closed")
end

--- A one-shot or repeating timer that calls fn() on the loop.
function M.timer(fn)
  local id = M.new_id()
  local out = ffi.new("dsh_timer_t *[1]")
  assert(C.dsh_timer_new(loop, id, out) == 0, "dsh.core.loop: timer allocation failed")
  local t = setmetatable({ id = id, _ptr = ffi.gc(out[0], C.dsh_timer_free) }, Timer)
  M.on(id, function() fn() end)
  M.track(t, "timer")
  return t
end

function Timer:start(after_ms, repeat_ms)
  assert(self._ptr, "dsh.core.loop: timer is closed")
  C.dsh_timer_start(self._ptr, after_ms, repeat_ms or 0)
end

function Timer:stop()
  if self._ptr then C.dsh_timer_stop(self._ptr) end
end

function Timer:close()
  if not self._ptr then return end
  C.dsh_timer_free(ffi.gc(self._ptr, nil))
  self._ptr = nil
  M.off(self.id)
  M.untrack(self)
end

-- Signals ---------------------------------------------------------------

local Signal = {}
Signal.__index = Signal
Signal.__tostring = function(s)
  return string.format("dsh.signal_watcher(%d%s)", s.signum, s._ptr and "" or ", closed")
end

--- Call fn(signum) each time signum (a number) arrives; started at once.
-- While any watcher for a signal exists, its default action is replaced.
function M.on_signal(signum, fn)
  local id = M.new_id()
  local out = ffi.new("dsh_signal_t *[1]")
  local rc = C.dsh_signal_new(loop, id, signum, out)
  if rc ~= 0 then error("dsh.core.loop: on_signal: cannot watch signal " .. tostring(signum), 2) end
  local s = setmetatable({ id = id, signum = signum, _ptr = ffi.gc(out[0], C.dsh_signal_free) }, Signal)
  M.on(id, function(_, _, n) fn(n) end)
  C.dsh_signal_start(s._ptr)
  M.track(s, "signal")
  return s
end

function Signal:close()
  if not self._ptr then return end
  C.dsh_signal_free(ffi.gc(self._ptr, nil))
  self._ptr = nil
  M.off(self.id)
  M.untrack(self)
end

return M
