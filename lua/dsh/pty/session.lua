--- dsh.pty.session: one persistent terminal, whatever runs it (reference §2.4
-- "Output", "initialize", "startSend", "read", "signal", "Exit", "close").
--
-- A backend opens a terminal and hands over a driver; everything else is
-- here, once:
--   drv.pid                      the shell's pid (its group and session id)
--   drv:read()                   → bytes | nil at the end | nil, err; a third value n > 0 says
--                                  n bytes were lost just before these (a reconnect past the replay)
--   drv:write(s)                 → true | nil, err
--   drv:resize(rows, cols)       → true | nil, err
--   drv:foreground()             → the terminal's foreground process group | nil, err
--   drv:signal_foreground(sig)   → the pgid it reached | nil, err     (sig: "SIGINT", ...)
--   drv:wait()                   → {exitCode=, signal=} | nil, err once the shell ended and its
--                                  output was read
--   drv:close(grace_ms, reason)  → true | nil, err (code PTY_CLEANUP): hang up, TERM every
--                                  group of the session, KILL what is left after grace_ms,
--                                  return once nothing of it is left
--
-- Owns the output path: strict UTF-8 (a bad byte is a transport failure) →
-- sanitizer → scrollback and the active send's buffer; the raw bytes also
-- feed the screen (in batches). Readiness is decided on output, exit and
-- timer events, never by polling: the send and its rules are
-- dsh.pty._send's. Input goes out in order, one write at a time, whoever
-- typed it. Never knows what runs the terminal: the driver does.
local async = require "dsh.async"
local errors = require "dsh.errors"
local loop = require "dsh.core.loop"
local pty = require "dsh.pty"
local send = require "dsh.pty._send"
local termscreen = require "dsh.core.termscreen"
local termtext = require "dsh.core.termtext"
local utf8 = require "dsh.core.utf8"

local M = {}
local codes = pty.codes
local copy_status = send.copy_status

-- The exit status of an outcome: the exact signal if known, else a code above
-- 128 read as 128 + signal (a shell reports its job's death that way).
local function exit_status(res)
  local sig = res and res.signal
  if not sig and res and type(res.exitCode) == "number" and res.exitCode > 128 then
    sig = pty.signal_name(res.exitCode - 128)
  end
  if sig then return { kind = "exited", exitCode = nil, signal = sig } end
  return { kind = "exited", exitCode = res and res.exitCode, signal = nil }
end

-- Sessions -------------------------------------------------------------------------

---@class dsh.pty.Session
---@field id string
---@field name string|nil
---@field type string
---@field pid integer
---@field rows integer
---@field cols integer
---@field motd string|nil
local Session = {}
Session.__index = Session
Session.__tostring = function(s)
  return string.format("dsh.pty.session(%s, pid %d, %s%s)", s.id, s.pid, s._status.kind,
    s._closing and ", closing" or "")
end
M.Session = Session
send.mixin(Session)

function M.new(o, drv)
  local cfg = o.cfg
  local s = setmetatable({
    id = o.id, name = o.name, type = o.type, ownerId = o.owner_id, pid = drv.pid,
    rows = cfg.rows, cols = cfg.cols, cwd = o.cwd, createdAt = os.time(),
    _cfg = cfg, _prefix = o.prefix, _label = o.label, _drv = drv,
    _dec = utf8.stream(), _san = termtext.sanitizer(cfg.maxPending),
    _sb = termtext.buffer(cfg.scrollbackMaxBytes, cfg.scrollbackLines),
    _screen = termscreen.new(cfg.rows, cfg.cols),
    _status = { kind = "running" }, _last = loop.now_ms(), _changed_at = loop.now_ms(),
    _ended = async.future(), _waiters = {}, gaps = {}, lost = 0,
  }, Session)
  s._timer = loop.timer(function() s:_check() end)
  s._pending, s._pending_n = {}, 0
  s._wq = {}
  s._batch = loop.timer(function()
    s._batch_armed = false
    s:_screen_flush()
  end)
  return s
end

-- Start reading output (after the startup send exists: whatever the shell
-- printed first belongs to it, also when this runs outside a task and the
-- reader gets to the bytes at once).
function Session:_start()
  async.run(Session._reader, self)
end

function Session:_notify()
  local w = self._waiters
  self._waiters = {}
  for f in pairs(w) do f:resolve() end
end

function Session:_reader()
  local drv = self._drv
  while true do
    local data, err, lost = drv:read()
    if lost and lost > 0 then self:_gap(lost) end
    if not data then
      if err and not self._failure then self:_fail(self._prefix .. ": " .. tostring(err.message or err)) end
      break
    end
    if data ~= "" then self:_on_data(data) end
  end
  local res, werr = drv:wait()
  self:_on_exit(res, werr)
end

-- Bytes were lost (a reconnect past the daemon's replay window): say so in
-- the scrollback, and start the decoders afresh at the next code point.
function Session:_gap(n)
  self.lost = self.lost + n
  self.gaps[#self.gaps + 1] = { bytes = n, line = self._sb:lines() }
  self._dec = utf8.stream()
  local t = self._san:flush()
  self:_text(t .. string.format("\n[dsh: %d bytes of terminal output were lost while reconnecting]\n", n))
  self._resync = true
end

-- The screen is fed in batches: the bytes of up to SCREEN_BATCH_MS (or
-- SCREEN_BATCH_BYTES) at once, so lines that scroll off within a batch are
-- never drawn (see termscreen.h, jump scrolling). A query that needs an
-- answer, and every look at the screen, feed it at once.
local SCREEN_BATCH_MS, SCREEN_BATCH_BYTES = 20, 262144

function Session:_screen_flush()
  if self._pending_n == 0 then return end
  local bytes = table.concat(self._pending)
  self._pending, self._pending_n = {}, 0
  local replies = self._screen:feed(bytes)
  if replies ~= "" then self:_write(replies) end
end

-- Type bytes into the terminal after everything typed before them (a send
-- right after an unwaited one, a reply to a query). on_fail(err) is told
-- when this write fails.
function Session:_write(bytes, on_fail)
  local q = self._wq
  q[#q + 1] = { bytes = bytes, on_fail = on_fail }
  if self._writing then return end
  self._writing = true
  async.run(function()
    while q[1] do
      local item = table.remove(q, 1)
      local ok, err = self._drv:write(item.bytes)
      if not ok and item.on_fail then item.on_fail(err) end
    end
    self._writing = false
  end)
end

function Session:_screen_add(bytes)
  local p = self._pending
  p[#p + 1] = bytes
  self._pending_n = self._pending_n + #bytes
  if self._pending_n >= SCREEN_BATCH_BYTES or (bytes:find("\27", 1, true) and bytes:find("\27%[[%d;?>=]*[nc]")) then
    return self:_screen_flush()
  end
  if not self._batch_armed then
    self._batch_armed = true
    self._batch:start(SCREEN_BATCH_MS)
  end
end

function Session:_on_data(bytes)
  self:_screen_add(bytes)
  self._changed_at = loop.now_ms()
  if self._failure then return self:_notify() end
  if self._resync then
    self._resync = nil
    bytes = bytes:gsub("^[\128-\191]+", "")
  end
  local text = self._dec:feed(bytes)
  if not text then
    self:_fail(self._prefix .. ": PTY emitted invalid UTF-8")
  elseif text ~= "" then
    self:_text(self._san:feed(text))
  end
  self:_notify()
end

function Session:_text(t, prompt, prompt_text)
  local op = self._op
  local recheck = false
  if t ~= "" then
    self._sb:append(t)
    if op then
      op._buf:append(t)
      recheck = op.init and not op.any_output -- the silence rule applies from now on
      op.any_output = true
      if op.wait_for and not op.matched and op:_seen(t) then recheck = true end
    end
  end
  if t ~= "" or prompt then self._last = loop.now_ms() end
  if prompt then
    self._prompt, self._prompt_text = true, prompt_text
  elseif prompt_text then
    self._prompt_text = true
  end
  if op and (recheck or (self._prompt and self._prompt_text)) then self:_check() end
end

function Session:_fail(msg)
  if self._failure then return end
  self._failure = errors.new(codes.PTY_TRANSPORT, msg)
  self._status = { kind = "exited", exitCode = nil, signal = nil }
  if self._op then self:_reject(self._op, self._failure) end
end

function Session:_on_exit(res, werr)
  if not self._failure then
    if not self._dec:finish() then
      self:_fail(self._prefix .. ": PTY ended with invalid UTF-8")
    else
      self:_text(self._san:flush())
    end
  end
  if not res and not self._failure then
    self:_fail(self._prefix .. ": " .. tostring(werr and werr.message or werr or "the terminal was lost"))
  end
  if self._status.kind == "running" then self._status = exit_status(res) end
  self._ended:resolve()
  self:_check()
  self:_notify()
end

--- True while a send waits (detached or not).
function Session:busy()
  return self._op ~= nil
end

--- True while a send someone waits for holds the session (a new send gets
--- SEND_ACTIVE); a detached one does not.
function Session:held()
  return self._op ~= nil and not self._op.detached
end

---@return {kind: string, exitCode: integer|nil, signal: string|nil}
function Session:status()
  return copy_status(self._status)
end

--- Lines of the scrollback, newest first (reference §2.4 "read").
---@param o {offset: integer|nil, count: integer|nil}|nil
---@return {text: string, lineBegin: integer, lineEnd: integer, totalLines: integer, lost: integer}
function Session:read(o)
  local offset, count = o and o.offset or 0, o and o.count or 500
  local total = self._sb:lines()
  if offset >= total then
    return { text = "", lineBegin = offset, lineEnd = offset, totalLines = total, lost = self.lost }
  end
  local text = utf8.tail((self._sb:page(offset, count)), self._cfg.maxReadBytes)
  local returned = 0
  if text ~= "" then
    returned = 1
    for _ in text:gmatch("\n") do returned = returned + 1 end
  end
  return { text = text, lineBegin = offset, lineEnd = offset + returned, totalLines = total, lost = self.lost }
end

local SIGNALS = { SIGINT = true, SIGTERM = true, SIGKILL = true, SIGTSTP = true, SIGHUP = true }

--- A signal to the terminal's foreground process group (the job running in
--- the shell, or the shell itself at its prompt). SIGKILL of the shell is
--- refused: closing the session is how it ends.
---@param name string "SIGINT", "INT", ... (INT, TERM, KILL, TSTP, HUP)
---@return {delivered: boolean, targetPgid: integer, signal: string}|nil, dsh.Error|nil
function Session:signal(name)
  local sig = type(name) == "string" and name:upper() or nil
  if sig and sig:sub(1, 3) ~= "SIG" then sig = "SIG" .. sig end
  if not SIGNALS[sig] then
    errors.misuse("dsh.pty", "signal: expected SIGINT, SIGTERM, SIGKILL, SIGTSTP or SIGHUP, got %s", tostring(name))
  end
  local label = self._prefix .. ": " .. self._label
  if self._closing then return nil, errors.new(codes.PTY_CLOSING, label .. " session is closing") end
  if self._status.kind == "exited" then return nil, errors.new(codes.PTY_EXITED, label .. " session has exited") end
  local unresolved = string.format("%s: cannot resolve foreground process group for %s %d", self._prefix,
    self._label, self.pid)
  if sig == "SIGKILL" then
    local fg, err = self._drv:foreground()
    if not fg or fg <= 1 then return nil, errors.new(codes.PTY_SIGNAL, unresolved, { cause = err }) end
    if fg == self.pid then
      return nil, errors.new(codes.PTY_SIGNAL,
        string.format("%s: refusing to SIGKILL the %s shell; use terminal_close", self._prefix, self._label))
    end
  end
  local pg, err = self._drv:signal_foreground(sig)
  if not pg or pg <= 1 then return nil, errors.new(codes.PTY_SIGNAL, unresolved, { cause = err }) end
  return { delivered = true, targetPgid = pg, signal = sig }
end

--- Resize the terminal (the program gets SIGWINCH) and reflow the screen.
function Session:resize(rows, cols)
  for what, v in pairs { rows = rows, cols = cols } do
    if type(v) ~= "number" or v < 1 or v > 1000 or v % 1 ~= 0 then
      errors.misuse("dsh.pty", "resize: %s must be an integer in [1, 1000]", what)
    end
  end
  if self._closing or self._status.kind == "exited" then
    return nil, errors.new(codes.PTY_EXITED, self._prefix .. ": " .. self._label .. " session has exited")
  end
  local ok, err = self._drv:resize(rows, cols)
  if not ok then return nil, err end
  self:_screen_flush()
  self._screen:resize(rows, cols)
  self.rows, self.cols = rows, cols
  return true
end

--- The screen as the terminal shows it now.
---@return dsh.TermScreenSnapshot
function Session:screen()
  self:_screen_flush()
  local snap = self._screen:snapshot()
  snap.sessionStatus = copy_status(self._status)
  return snap
end

--- Wait until the screen matches pattern (a Lua pattern, or plain text with
--- plain = true), or has not changed for idleMs, or timeoutMs passed, or the
--- session ended. Returns {matched, reason = "match"|"idle"|"timeout"|"session_exit", screen}.
function Session:waitFor(o)
  local timer_f
  local t = loop.timer(function() if timer_f then timer_f:resolve() end end)
  local deadline = loop.now_ms() + o.timeoutMs
  local function done(matched, reason)
    t:close()
    return { matched = matched, reason = reason, screen = self:screen() }
  end
  while true do
    self:_screen_flush()
    if o.pattern and self._screen:text():find(o.pattern, 1, o.plain) then return done(true, "match") end
    local now = loop.now_ms()
    if o.idleMs and now - self._changed_at >= o.idleMs then return done(not o.pattern, "idle") end
    if self._ended:done() then return done(false, "session_exit") end
    if now >= deadline then return done(false, "timeout") end
    local f = async.future()
    timer_f = f
    self._waiters[f] = true
    local due = deadline
    if o.idleMs then due = math.min(due, self._changed_at + o.idleMs) end
    t:stop()
    t:start(math.max(1, math.ceil(due - now)))
    f:await()
    self._waiters[f] = nil
  end
end

--- Give up on a session whose close failed for good (its service was
--- disposed): the host's timers go; its terminal is left to whoever ends
--- the sandbox (ctx.e2b's disposition). Idempotent; a close may still follow.
function Session:release()
  if self._closed or self._released then return end
  self._released = true
  self._batch_armed = true -- output that still arrives is never batched again
  self._timer:close()
  self._batch:close()
end

--- Close the session: hang up, TERM every process group of the terminal's
--- session, KILL what is left after disposeGraceMs, and return once nothing
--- is left. Idempotent while in flight; a failure (code PTY_CLEANUP, naming
--- the survivors) can be retried. A transport failure seen earlier is
--- returned after a successful cleanup.
---@param reason string|nil
---@return true|nil, dsh.Error|nil
function Session:close(reason)
  if self._close_f then return self._close_f:await() end
  local f = async.future()
  self._close_f = f
  self._closing = true
  local ok, err = self._drv:close(self._cfg.disposeGraceMs, reason or "closed")
  if not ok then
    self._close_f = nil
    if self._op then self:_reject(self._op, err) end
    f:resolve(nil, err)
    return nil, err
  end
  self._ended:await()
  if self._op then self:_settle(self._op, "session_exit") end
  self._released = true
  self._timer:close()
  self:_screen_flush()
  self._batch:close()
  self._closed = true
  self:_notify()
  if self._failure then
    f:resolve(nil, self._failure)
  else
    f:resolve(true)
  end
  return f:await()
end

function Session:closed()
  return self._closed == true
end

--- Open a terminal and initialize it: an empty send without submit must
--- reach readiness. On failure the terminal is closed; when that fails too,
--- the error is PTY_BACKEND_CLEANUP with spawnError and cleanupError (and the
--- session, so its owner can retry). An aborted signal's reason wins.
--- o: {id, name, type, owner_id, cwd, cfg, prefix, label, open = fn(signal) → drv | nil, err}
---@return dsh.pty.Session|nil, dsh.Error|nil
function M.spawn(o, signal)
  if signal and signal.aborted then return nil, async.abort_error(signal.reason) end
  local drv, err = o.open(signal)
  if not drv then
    if signal and signal.aborted then return nil, async.abort_error(signal.reason) end
    return nil, err
  end
  local s = M.new(o, drv)
  local failure
  local op, serr = s:startSend({ text = "", submit = false }, signal, true)
  s:_start()
  if op then
    local res, oerr = op:wait()
    if res and res.waitReason == "session_exit" then
      failure = errors.new(codes.PTY_STARTUP, o.prefix .. ": " .. o.label .. " shell exited during startup")
    elseif res and res.waitReason == "timeout" then
      failure = errors.new(codes.PTY_STARTUP,
        o.prefix .. ": " .. o.label .. " shell did not reach readiness before startup timeout")
    elseif res then
      s.motd = res.viewport
      return s
    else
      failure = oerr
    end
  else
    failure = serr
  end
  if signal and signal.aborted then failure = async.abort_error(signal.reason) end
  local ok, cerr = s:close(o.label .. " startup failed")
  if not ok and cerr.code == codes.PTY_CLEANUP then
    return nil, errors.new(codes.PTY_BACKEND_CLEANUP, string.format("%s: %s startup failed (%s) and its cleanup "
      .. "failed (%s)", o.prefix, o.label, tostring(failure.message), tostring(cerr.message)),
      { spawnError = failure, cleanupError = cerr, session = s })
  end
  return nil, failure
end

return M
