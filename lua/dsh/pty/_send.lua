--- dsh.pty._send: a send into a persistent terminal and when it is ready
-- (reference §2.4 "startSend", "Readiness") (private to dsh.pty.session).
--
-- Owns: the operation a send returns (wait, readOutput, cancel, detach), the
-- readiness rules that settle it, and startSend itself, mixed into
-- dsh.pty.session's Session (as dsh.envd's mixins). The first rule that
-- holds wins — exited → session_exit; the send's waitFor text printed →
-- match; the prompt marker and text after it, then pollIntervalMs of silence
-- → stdin_read; idleSilenceMs (or the send's idleMs) of silence →
-- inferred_idle (at startup only once something was printed; never for a
-- send that waits for a text, unless it gives idleMs); timeoutMs (or the
-- send's own) since the send → timeout. A send nobody waits for
-- (op:detach()) is superseded by the next one: it settles "superseded".
-- Never reads or writes the terminal itself: the session's output path
-- feeds it, and its bytes go out through the session's write queue.
local async = require "dsh.async"
local errors = require "dsh.errors"
local loop = require "dsh.core.loop"
local pty = require "dsh.pty"
local termtext = require "dsh.core.termtext"

local M = {}
local codes = pty.codes

--- A copy of a session status {kind, exitCode, signal}.
function M.copy_status(st)
  return { kind = st.kind, exitCode = st.exitCode, signal = st.signal }
end
local copy_status = M.copy_status

-- Operations ---------------------------------------------------------------------

---@class dsh.pty.Operation
local Op = {}
Op.__index = Op
Op.__tostring = function(op) return "dsh.pty.operation(" .. (op.settled and "settled" or "active") .. ")" end

--- The result once the send settled: {viewport, waitReason, sessionStatus,
--- truncated}, or nil, err (the write failed, the transport failed, ...).
---@return table|nil, dsh.Error|nil
function Op:wait()
  return self._f:await()
end

--- The output of this send not read yet (consumed: the final viewport holds
--- only what came after).
---@return string
function Op:readOutput()
  return self._buf:consume()
end

--- SIGINT to the terminal's foreground process group; the send goes on
--- until a readiness rule settles it. false once settled.
---@return boolean
function Op:cancel()
  if self.settled then return false end
  local s = self._s
  async.run(function()
    local pg, err = s._drv:signal_foreground("SIGINT")
    if not pg and not self.settled then
      s:_reject(self, errors.new(codes.PTY_SIGNAL, string.format(
        "%s: cannot resolve foreground process group for %s %d", s._prefix, s._label, s.pid),
        { cause = err }))
    end
  end)
  return true
end

--- Stop holding the session: the send goes on (output, readiness, wait()
--- still work), but the next send supersedes it — it then settles with
--- waitReason "superseded" — instead of failing SEND_ACTIVE.
function Op:detach()
  self.detached = true
  return self
end

-- Occurrences of a plain text in s, not overlapping.
local function occurrences(s, text)
  local n, pos = 0, 1
  while true do
    local _, j = s:find(text, pos, true)
    if not j then return n end
    n, pos = n + 1, j + 1
  end
end

-- Output t of this send: true once waitFor has been printed more often than
-- the typed text holds it (the echo of what was typed does not count).
-- Occurrences split across chunks count: the end of the previous chunk is kept.
function Op:_seen(t)
  local text, carry = self.wait_for, self._carry
  local s = carry .. t
  local pos = 1
  while true do
    local i, j = s:find(text, pos, true)
    if not i then break end
    if j > #carry then self._hits = self._hits + 1 end
    pos = j + 1
  end
  self._carry = #text > 1 and s:sub(math.max(pos, #s - #text + 2)) or ""
  if self._hits >= self._need then self.matched = true end
  return self.matched
end

-- Readiness (the Session methods below are mixed in) -----------------------------------

local Session = {}

function Session:_settle(op, reason)
  op.settled = true
  self._timer:stop()
  if op._off_abort then op._off_abort() end
  if self._op == op then self._op = nil end
  local dropped = self._sb:stats().dropped > op._sb_dropped
  op._f:resolve({ viewport = op._buf:consume(), waitReason = reason,
    sessionStatus = copy_status(self._status), truncated = op._buf:truncated() or dropped })
end

function Session:_reject(op, err)
  if op.settled then return end
  op.settled = true
  self._timer:stop()
  if op._off_abort then op._off_abort() end
  if self._op == op then self._op = nil end
  op._f:resolve(nil, err)
end

function Session:_check()
  local op = self._op
  if not op or op.settled then return end
  local cfg, now = self._cfg, loop.now_ms()
  if self._status.kind == "exited" then return self:_settle(op, "session_exit") end
  if op.matched then return self:_settle(op, "match") end
  local silence = now - self._last
  local ready = self._prompt and self._prompt_text
  if ready and silence >= cfg.pollIntervalMs then return self:_settle(op, "stdin_read") end
  local idle = op.idle_ms
  local idle_counts = idle and (not op.init or op.any_output)
  if idle_counts and silence >= idle then return self:_settle(op, "inferred_idle") end
  if now - op.started >= op.timeout_ms then return self:_settle(op, "timeout") end
  local due = op.started + op.timeout_ms
  if ready then due = math.min(due, self._last + cfg.pollIntervalMs) end
  if idle_counts then due = math.min(due, self._last + idle) end
  self._timer:stop()
  self._timer:start(math.max(1, math.ceil(due - now)))
end

--- Send text (and "\r" when submit) and wait for readiness (see the module
--- comment). input.timeoutMs, input.idleMs: this send's own timeout and
--- silence (default the config's timeoutMs and idleSilenceMs); input.waitFor:
--- plain text whose printing settles the send ("match"). Errors, in order:
--- closing, exited, an active send (one nobody detached), an aborted signal.
---@param input {text: string, submit: boolean|nil, timeoutMs: integer|nil, idleMs: integer|nil, waitFor: string|nil}
---@param signal dsh.AbortSignal|nil  aborting it is cancel()
---@return dsh.pty.Operation|nil, dsh.Error|nil
function Session:startSend(input, signal, init)
  local label = self._prefix .. ": " .. self._label
  if self._closing then return nil, errors.new(codes.PTY_CLOSING, label .. " session is closing") end
  if self._status.kind == "exited" then return nil, errors.new(codes.PTY_EXITED, label .. " session has exited") end
  if self._op and not self._op.detached then
    return nil, errors.new(codes.SEND_ACTIVE, label .. " session already has an active send")
  end
  if signal and signal.aborted then return nil, errors.new(codes.PTY_ABORTED, label .. " send aborted before write") end
  if self._op then self:_settle(self._op, "superseded") end
  local now = loop.now_ms()
  local cfg = self._cfg
  local wait_for = input.waitFor
  local op = setmetatable({ _s = self, _f = async.future(), _buf = termtext.buffer(cfg.maxReadBytes),
    started = now, init = init, _sb_dropped = self._sb:stats().dropped,
    timeout_ms = input.timeoutMs or cfg.timeoutMs,
    idle_ms = input.idleMs or (not wait_for and cfg.idleSilenceMs) or nil,
    wait_for = wait_for, _carry = "", _hits = 0, _need = wait_for and occurrences(input.text, wait_for) + 1 }, Op)
  self._op = op
  self._last, self._prompt, self._prompt_text = now, false, false
  local bytes = input.text .. (input.submit and "\r" or "")
  if bytes ~= "" then
    self:_write(bytes, function(err)
      self:_reject(op, err or errors.new(codes.PTY_TRANSPORT, label .. " input failed"))
    end)
  end
  if signal then
    op._off_abort = signal:on_abort(function(reason)
      if init then self:_reject(op, async.abort_error(reason)) else op:cancel() end
    end)
  end
  self:_check()
  return op
end

--- Add the send's methods (startSend, _check, _settle, _reject) to the
--- session class.
function M.mixin(S)
  for k, v in pairs(Session) do S[k] = v end
end

M.Op = Op
return M
