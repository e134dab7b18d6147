--- dsh.envd._watch: the host's own deadlines over one daemon (private).
--
-- The host never waits on a sandbox past a deadline of its own, whatever the
-- daemon does (stopped, frozen, answering a byte a second): asking it to end
-- a call (Connect-Timeout-Ms) is not enough. Every request of a client is a
-- call here while it is in flight, in one of these modes:
--   prompt    an answer is due at once: a unary call, POST /init, a stream
--             until its first message
--   transfer  a /files upload or download (long, but the daemon stays responsive)
--   ending    a stream the caller waits to see end (a process it stopped)
--   standing  a stream that may rightly stay open and silent (a running
--             process's output, a watch): its stall limit bounds it
-- A call may also have a deadline (a stream's own Connect-Timeout-Ms, or the
-- time an ending stream was given): the daemon must end it by then, and
-- DEADLINE_GRACE_MS later the host does, with SANDBOX_UNRESPONSIVE.
--
-- A prompt, transfer or ending call in flight for SLOW_MS gets the daemon
-- probed (GET /health within PROBE_TIMEOUT_MS), again every PROBE_EVERY_MS
-- while it lasts; so does a call that ran past its deadline. A probe that
-- gets no answer in time finds the daemon unresponsive: every call but the
-- standing ones ends at once with SANDBOX_UNRESPONSIVE naming the sandbox
-- (standing streams ride out a stall; whoever waits on one to end makes it
-- ending first), and so does every later call, without waiting again: one
-- call each RETRY_MS waits for a new probe, the others fail at once, until a
-- probe (or a health check) is answered. A probe that fails otherwise (the
-- connection refused: the daemon is gone) changes nothing: the calls see
-- that themselves; nor does one that timed out while the daemon delivered
-- BUSY_BYTES or more to the client's calls (busy, not frozen: a single-
-- threaded daemon pouring out 50 streams may answer a probe late). A probe
-- waits its turn behind the client's own calls: it gets QUEUED_MS more for
-- each call but one that waits for an answer (50 starts at once are 50
-- spawns before dshd reads the probe). Where the client can see the daemon's
-- process (client.activity: a local sandbox's dshd, on this host), a probe
-- that timed out while the daemon ran and used CPU is not held against it
-- either (a host so loaded that its own sandbox answers late), up to
-- BUSY_PROBES times in a row; a stopped or frozen daemon is found at once.
-- abandon(err) ends every call, standing ones too, and every later one
-- with err, for good (a sandbox being ended from outside).
local async = require "dsh.async"
local errors = require "dsh.errors"
local loop = require "dsh.core.loop"

local M = {}

M.SLOW_MS = 100
M.PROBE_TIMEOUT_MS = 1500
M.PROBE_EVERY_MS = 1000
M.RETRY_MS = 1000
M.DEADLINE_GRACE_MS = 1000
M.TICK_MS = 50
M.BUSY_BYTES = 4096
M.QUEUED_MS = 100
M.BUSY_PROBES = 5

---@class dsh.envd.Watch
local Watch = {}
Watch.__index = Watch

--- The watch of client: its label, its probe and its tolerances
-- (client.slow_ms, client.probe_timeout_ms, read when used: 0 turns probing
-- off, deadlines still hold); see dsh.envd.
function M.new(client)
  -- moved: bytes the daemon delivered to the client's calls (stream events,
  -- file chunks, unary answers), counted by dsh.envd as they arrive
  return setmetatable({ _client = client, _calls = setmetatable({}, { __mode = "k" }), moved = 0 }, Watch)
end

-- Calls ------------------------------------------------------------------------------

--- Register a request about to be made with request options ro (its signal
-- becomes the call's, which follows the caller's). timeout_ms: the call's own
-- deadline (from now), or nil. Close the call once it is over.
function Watch:open(ro, mode, what, timeout_ms)
  local ctl = async.controller()
  local now = loop.now_ms()
  local c = { ctl = ctl, mode = mode, since = now, opened = now, what = what }
  if timeout_ms and timeout_ms > 0 then
    c.deadline = now + timeout_ms + M.DEADLINE_GRACE_MS
    c.late = string.format("did not end %s by its deadline (%d ms, and %d ms more)", what, timeout_ms,
      M.DEADLINE_GRACE_MS)
  end
  local caller = ro.signal
  if caller then c.off = caller:on_abort(function(reason) ctl:abort(reason) end) end
  ro.signal = ctl.signal
  self._calls[c] = true
  if mode ~= "standing" or c.deadline then self:_arm() end
  return c
end

--- A call's first answer arrived: from now on it is standing (or ending).
function Watch.answered(_, c)
  if c.mode == "prompt" then c.mode = "standing" end
end

--- The caller now waits for call c to end, within_ms at most (the daemon's
-- share: DEADLINE_GRACE_MS more is allowed).
function Watch:ending(c, within_ms)
  if c.closed then return end
  local now = loop.now_ms()
  c.mode, c.since = "ending", now
  local deadline = now + within_ms + M.DEADLINE_GRACE_MS
  if not c.deadline or deadline < c.deadline then
    c.deadline = deadline
    c.late = string.format("did not end %s within %d ms of being asked to stop it (and %d ms more)", c.what,
      within_ms, M.DEADLINE_GRACE_MS)
  end
  self:_arm()
end

--- The call is over (idempotent).
function Watch:close(c)
  if c.closed then return end
  c.closed = true
  self._calls[c] = nil
  if c.off then
    c.off()
    c.off = nil
  end
end

-- The error of call c, given up because the daemon is unresponsive (or late).
function Watch:_given_up(c, why, late)
  local label = self._client:_label()
  if late then
    return errors.new("SANDBOX_UNRESPONSIVE", label .. " " .. why, { sandbox = label })
  end
  return errors.new("SANDBOX_UNRESPONSIVE", string.format("%s %s; gave up on %s after %d ms", label, why, c.what,
    loop.now_ms() - c.opened), { sandbox = label })
end

-- Whether the daemon is to be asked whether it answers, because of call c.
function Watch:_doubts(c, now)
  local slow = self._client.slow_ms
  if now - c.since < slow then return false end
  local ok = self._ok_started
  return not ok or ok < c.since + slow or now - ok >= M.PROBE_EVERY_MS
end

function Watch:_arm()
  if self._ticking or self._stopped then return end
  self._ticking = true
  self._timer = loop.timer(function() self:_tick() end)
  self._timer:start(M.TICK_MS, M.TICK_MS)
end

function Watch:_idle()
  self._ticking = false
  if self._timer then
    self._timer:close()
    self._timer = nil
  end
end

function Watch:_tick()
  local now = loop.now_ms()
  local active, doubt, late = false, false, nil
  for c in pairs(self._calls) do
    if c.mode ~= "standing" or c.deadline then
      active = true
      if c.deadline and now >= c.deadline then
        late = late or {}
        late[#late + 1] = c
      elseif c.mode ~= "standing" and self:_doubts(c, now) then
        doubt = true
      end
    end
  end
  for _, c in ipairs(late or {}) do
    c.mode, c.deadline = "standing", nil
    c.ctl:abort(self:_given_up(c, c.late, true))
  end
  if (doubt or late) and self._client.probe_timeout_ms > 0 and not self._probing then self:_probe() end
  if not active then self:_idle() end
end

-- Probes -----------------------------------------------------------------------------

-- The daemon's process as the client sees it ({cpu=, stopped=}), or nil.
function Watch:activity()
  local fn = self._client.activity
  if not fn then return nil end
  local ok, act = pcall(fn)
  return ok and type(act) == "table" and act or nil
end

--- Record what a health check started at started (when moved was moved0,
-- and the daemon's activity act0) found: an answer clears the mark; no
-- answer in time, while the daemon delivered less than BUSY_BYTES meanwhile
-- and was not seen at work, sets it and gives up every call that waits.
function Watch:result(started, moved0, ok, err, timeout_ms, act0)
  if self._stopped or self._forced then return end
  if ok or (err and self.moved - moved0 >= M.BUSY_BYTES) then
    self._ok_started = math.max(self._ok_started or started, started)
    if ok then self._mark, self._busy = nil, 0 end
    return
  end
  if not err or (err.code ~= "HTTP_TIMEOUT" and err.code ~= "HTTP_STALLED") then return end
  local act = act0 and self:activity()
  if act and not act.stopped and not act0.stopped and act.cpu > act0.cpu and (self._busy or 0) < M.BUSY_PROBES then
    self._busy = (self._busy or 0) + 1 -- at work on this loaded host: probe again
    return
  end
  local why = string.format("is unresponsive: its daemon did not answer a health check within %d ms", timeout_ms)
  self._mark = { at = loop.now_ms(), why = why }
  for c in pairs(self._calls) do
    if c.mode ~= "standing" then
      c.mode, c.deadline = "standing", nil
      c.ctl:abort(self:_given_up(c, why))
    end
  end
end

-- Start a probe (one at a time); returns the future it settles.
function Watch:_probe()
  if self._probing then return self._probing end
  local f = async.future()
  self._probing = f
  async.run(function()
    local waiting = 0
    for c in pairs(self._calls) do
      if c.mode ~= "standing" then waiting = waiting + 1 end
    end
    local timeout = self._client.probe_timeout_ms + M.QUEUED_MS * math.max(0, waiting - 1)
    local started, moved0, act0 = loop.now_ms(), self.moved, self:activity()
    local ok, res, err = pcall(self._client._probe, self._client, timeout)
    self._probing = nil
    if ok then self:result(started, moved0, res, err, timeout, act0) end
    f:resolve()
    if not ok and not self._stopped then error(res, 0) end -- a closed client's probe just ends
  end)
  return f
end

--- Before a call: true, or nil, err when the daemon was found unresponsive
-- (or abandoned). One call each RETRY_MS waits for a new probe.
function Watch:admit(what)
  if self._forced then return nil, self._forced end
  local mark = self._mark
  if not mark then return true end
  local now = loop.now_ms()
  if not self._probing and now - mark.at >= M.RETRY_MS and self._client.probe_timeout_ms > 0 then
    self:_probe():await()
    mark = self._mark
    if self._forced then return nil, self._forced end
    if not mark then return true end
    now = loop.now_ms()
  end
  local label = self._client:_label()
  return nil, errors.new("SANDBOX_UNRESPONSIVE", string.format("%s %s (found %d ms ago); %s was not sent", label,
    mark.why, now - mark.at, what), { sandbox = label })
end

--- The error of a call (what) that went unanswered while the daemon was
-- found unresponsive (call it while unresponsive() says so).
function Watch:unanswered(what)
  local label = self._client:_label()
  local why = self._forced and self._forced.message or (label .. " " .. self._mark.why)
  return errors.new("SANDBOX_UNRESPONSIVE", why .. "; " .. what .. " went unanswered", { sandbox = label })
end

--- The daemon's state: nil while it answers, else {why=, at=} (at: loop ms).
function Watch:unresponsive()
  if self._forced then return { why = self._forced.message, at = self._forced_at } end
  return self._mark
end

--- End every call now with err, and every later one at once.
function Watch:abandon(err)
  if self._forced then return end
  self._forced, self._forced_at = err, loop.now_ms()
  for c in pairs(self._calls) do
    c.mode, c.deadline = "standing", nil
    c.ctl:abort(err)
  end
  self:_idle()
end

--- The client closed: no more timers or probes.
function Watch:stop()
  self._stopped = true
  self:_idle()
end

M.Watch = Watch
return M
