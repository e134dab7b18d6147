--- subprocess-e2b: what a process started through envd has on either kind of
-- daemon — its event stream, the pump that moves output to the seam's sinks,
-- reconnection after a dropped stream, stdin and spill removal. The dshd
-- flavour (native.lua) and the stock-envd flavour (compat.lua) add starting,
-- signals, quiescence and the exit outcome.
--
-- Reconnection: when the Start (or Connect) stream fails before its end
-- event, the pump reconnects with Connect — on dshd with `resume` set to the
-- byte offsets already delivered, so nothing is lost or repeated (a data
-- event's `offset` trims an overlap; a jump forward is a gap the collector is
-- told about). It retries for reconnectMs; then `done` resolves nil, err with
-- SUBPROCESS_LOST, so a dead daemon is reported within seconds.
local async = require "dsh.async"
local errors = require "dsh.errors"
local loop = require "dsh.core.loop"
local signals = require "dsh.signals"

local M = {}
local NAME = "subprocess-e2b"

---@class dsh.subprocess_e2b.Proc
---@field pid integer
local Proc = {}
Proc.__index = Proc
Proc.__tostring = function(p)
  return string.format("subprocess-e2b.proc(%s, pid %d%s)", p._flavor, p.pid or -1,
    p._closed and ", closed" or "")
end
M.Proc = Proc

--- True when err says the sandbox does not answer in time.
function M.unresponsive(err)
  return type(err) == "table" and err.code == "SANDBOX_UNRESPONSIVE"
end

--- An envd failure about a process in the subprocess contract's words
-- (dsh.subprocess.BACKEND_CODES): not_found (no such process or group) is
-- SUBPROCESS_NOT_FOUND; anything else passes as it is. ok, err in, out.
function M.contract(ok, err)
  if ok == nil and type(err) == "table" and err.code == "not_found" then
    return nil, errors.new("SUBPROCESS_NOT_FOUND", tostring(err.message), { cause = err })
  end
  return ok, err
end
local contract = M.contract

function M.lost(pid, err)
  return errors.new("SUBPROCESS_LOST", string.format(
    "%s: lost the connection to process %d and could not reconnect: %s", NAME, pid,
    err and (err.message or tostring(err)) or "unknown error"), { cause = err })
end

--- The pacing of a loop that retries a daemon it lost: wait(err, signal)
-- sleeps the next delay (25 ms, doubling to 400 ms) and returns true, or
-- returns nil, SUBPROCESS_LOST for pid once reconnect_ms have passed since
-- the first failure in a row; reset() after a success.
function M.backoff(reconnect_ms, pid)
  local deadline, delay
  local b = {}
  function b.reset() deadline, delay = nil, nil end
  function b.wait(err, signal)
    deadline = deadline or loop.now_ms() + reconnect_ms
    delay = delay or 25
    if loop.now_ms() + delay > deadline then return nil, M.lost(pid, err) end
    async.sleep(delay, signal)
    delay = math.min(delay * 2, 400)
    return true
  end
  return b
end

--- A proc over an opened envd process stream p. o: backend, client, spec, flavor,
-- resume (true: dshd replay offsets), pty.
function M.new(o, p, pid)
  return setmetatable({
    pid = pid, _backend = o.backend, _client = o.client, _spec = o.spec, _flavor = o.flavor,
    _resume = o.resume, _pty = o.spec.pty ~= nil, _stream = p, _envd_pid = p.pid,
    _off = { stdout = 0, stderr = 0, pty = 0 }, _pump_done = async.future(),
  }, Proc)
end

-- Data as the daemon sent it → the seam's sinks, exactly once per byte.
function Proc:_data(ev)
  local key, data = ev.stream, ev.data
  local want = self._off[key] or 0
  if ev.offset then
    if ev.offset > want then
      if self._spec.on_gap then self._spec.on_gap(key == "pty" and "stdout" or key, ev.offset - want) end
    elseif ev.offset < want then
      data = data:sub(want - ev.offset + 1)
    end
    self._off[key] = math.max(want, ev.offset + #ev.data)
  else
    self._off[key] = want + #data
  end
  if self._filter then data = self:_filter(key, data) end
  if data ~= "" then self._spec.on_data(key == "pty" and "stdout" or key, data) end
end

-- Connect again; dshd resumes from our offsets. Returns true or nil, err.
function Proc:_reconnect(first_err)
  local retry, last = M.backoff(self._backend.reconnect_ms, self.pid), first_err
  self._stream:close()
  if M.unresponsive(first_err) then return nil, first_err end -- the host's own deadline: no second wait
  while not self._closed do
    local sb, serr = self._backend.e2b:getSandbox()
    if not sb then return nil, serr end
    local opts = {}
    if self._resume then
      opts.resume = self._pty and { pty = self._off.pty }
        or { stdout = self._off.stdout, stderr = self._off.stderr }
    end
    local p, err = sb.envd:connect(self._envd_pid, opts)
    if p then
      self._stream = p
      return true
    end
    last = err
    if M.unresponsive(err) then return nil, err end
    if err.code == "not_found" then break end
    local waited, lost = retry.wait(err)
    if not waited then return nil, lost end
  end
  return nil, M.lost(self.pid, last)
end

--- The pump task: every event until the end event (or a loss).
function Proc:_pump()
  while not self._closed do
    local ev, err = self._stream:next()
    if ev and ev.type == "data" then
      self:_data(ev)
    elseif ev then
      self._end = ev
      break
    elseif self._closed then
      break
    elseif self._abandoned then
      self._err = self._abandoned
      break
    else
      local ok, rerr = self:_reconnect(err or errors.new("unknown", "stream ended without an end event"))
      if not ok then
        self._err = rerr
        break
      end
    end
  end
  if self._on_pump_end then self:_on_pump_end() end
  self._pump_done:resolve()
end

--- The sandbox did not answer a request to stop the process: give it up.
-- Its outcome is err; the pump and a wait for its group return at once.
function Proc:_abandon(err)
  if self._end or self._err or self._abandoned then return end
  self._abandoned = err
  self._stream:close()
  if self._group_watch then self._group_watch:close() end
end

--- The process was asked to stop and should be gone within within_ms: its
-- stream (and a wait for its group) must end by then, and the envd client's
-- grace after, or they end with SANDBOX_UNRESPONSIVE.
function Proc:_expect_end(within_ms)
  self._stop_by = math.min(self._stop_by or math.huge, loop.now_ms() + within_ms)
  if not (self._end or self._err or self._abandoned) then self._stream:expect_end(within_ms) end
  if self._group_watch then self._group_watch:expect_end(within_ms) end
end

-- What a stop request's answer means for the process: an unresponsive
-- sandbox gives it up, an answer means it ends within within_ms.
function Proc:_stop_sent(ok, err, within_ms)
  if ok then
    self:_expect_end(within_ms)
  elseif M.unresponsive(err) then
    self:_abandon(err)
  end
end

function Proc:start_pump()
  async.run(Proc._pump, self)
end

function Proc._closed_error()
  return errors.new("SUBPROCESS_CLOSED", NAME .. ": the process was released")
end

--- Bytes per SendInput: well within any daemon's request bound (dshd takes
-- 64 MiB bodies) and its input queue (dshd queues 8 MiB per process).
M.INPUT_PIECE = 1048576

-- Input goes in pieces, each handed over before the next; a daemon whose
-- queue is full (resource_exhausted: the process has not read yet) is asked
-- again after a pause that grows to 50 ms, as a blocking pipe write would wait.
function Proc:write(s)
  if self._closed then return nil, self:_closed_error() end
  if s == "" and not self._pty then return true end
  local send = self._pty and self._client.send_pty or self._client.send_stdin
  local piece_max, i, n, delay = M.INPUT_PIECE, 1, #s, nil
  repeat
    local piece = (i == 1 and n <= piece_max) and s or s:sub(i, i + piece_max - 1)
    local ok, err = send(self._client, self._envd_pid, piece)
    if ok then
      i, delay = i + #piece, nil
    elseif err.code == "resource_exhausted" and not self._closed and not self._end then
      delay = math.min((delay or 1) * 2, 50)
      async.sleep(delay)
    else
      return contract(nil, err)
    end
  until i > n
  return true
end

function Proc:close_stdin()
  if self._closed then return true end
  if self._pty then return contract(self._client:send_pty(self._envd_pid, "\4")) end
  return contract(self._client:close_stdin(self._envd_pid))
end

function Proc:resize(rows, cols)
  if self._closed then return nil, self:_closed_error() end
  return contract(self._client:update_pty(self._envd_pid, rows, cols))
end

-- The foreground group can end between the look and the kill (a loop's
-- `sleep 0.05`): then the terminal has a new one, so look again.
local FOREGROUND = [[
for try in 1 2 3; do
  fg=$(ps -o tpgid= -p "$1" 2>/dev/null); fg=${fg//[!0-9]/}
  if [ -z "$fg" ] || [ "$fg" -le 0 ]; then fg=$1; fi
  kill -s "$2" -- "-$fg" 2>/dev/null && { echo "$fg"; exit 0; }
done
exit 1
]]

--- Terminals: the signal to the terminal's foreground process group (a
-- command run in the sandbox: envd has no call for it). Returns that pgid.
function Proc:signal_foreground(sig)
  local num = type(sig) == "number" and sig or signals.number(sig)
  if not num then errors.misuse(NAME, "signal: unknown signal %s", tostring(sig)) end
  local r, err = self._backend.e2b:exec({ "/bin/bash", "-c", FOREGROUND, "dsh-e2b", tostring(self.pid),
    tostring(num) })
  if not r then return nil, err end
  local fg = tonumber(r.stdout:match("%d+"))
  if r.exit_code ~= 0 or not fg then
    return nil, errors.new("SUBPROCESS_NOT_FOUND", "the terminal's process group is gone")
  end
  return fg
end

--- Terminals: the terminal's foreground process group (a command run in the sandbox).
function Proc:foreground()
  local r, err = self._backend.e2b:exec({ "/bin/bash", "-c", [[ps -o tpgid= -p "$1"]], "dsh-e2b", tostring(self.pid) })
  if not r then return nil, err end
  local fg = tonumber(r.stdout:match("%d+"))
  if r.exit_code ~= 0 or not fg or fg <= 0 then
    return nil, errors.new("SUBPROCESS_NOT_FOUND", "the terminal has no foreground process group")
  end
  return fg
end

-- The process groups of session $1 with a live member, one per line, read
-- from /proc by bash alone (no ps needed); with $2, that signal to each
-- (and SIGCONT after SIGTERM: a stopped job would never see the TERM).
M.SESSION_GROUPS = [[
sid=$1 sig=$2 seen=" "
for st in /proc/[0-9]*/stat; do
  read -r line < "$st" 2>/dev/null || continue
  set -f; set -- ${line##*")"}; set +f
  [ "$4" = "$sid" ] || continue
  case $1 in Z|X) continue;; esac
  case $seen in *" $3 "*) continue;; esac
  seen="$seen$3 "; echo "$3"
  if [ -n "$sig" ] && [ "$3" -gt 1 ]; then
    kill -s "$sig" -- "-$3" 2>/dev/null
    [ "$sig" = TERM ] && kill -s CONT -- "-$3" 2>/dev/null
  fi
done
exit 0
]]

local function session_script(self, sig)
  local r, err = self._backend.e2b:exec({ "/bin/bash", "-c", M.SESSION_GROUPS, "dsh-e2b", tostring(self.pid),
    sig or "" })
  if not r then return nil, err end
  if r.exit_code ~= 0 then
    return nil, errors.new("internal", "listing the terminal's session failed: " .. (r.stderr or ""))
  end
  local out = {}
  for g in r.stdout:gmatch("%d+") do out[#out + 1] = tonumber(g) end
  return out
end

--- Terminals: the process groups with a live member in the terminal's
-- session (a command run in the sandbox).
function Proc:session_groups()
  return session_script(self)
end

--- Terminals: sig to every process group of the session (SIGTERM: then SIGCONT).
function Proc:signal_session(sig)
  local num = type(sig) == "number" and sig or signals.number(sig)
  if not num then errors.misuse(NAME, "signal_session: unknown signal %s", tostring(sig)) end
  local ok, err = session_script(self, (signals.name(num) or ""):gsub("^SIG", ""))
  if not ok then return nil, err end
  return true
end

--- Terminals: SIGKILL whatever is left in the session (job groups of a shell).
function Proc:kill_session()
  return self:signal_session("SIGKILL")
end

--- Delete spill files (and their directory); errors are ignored (§6.4 item 7).
function Proc:remove(paths, dir)
  for _, p in ipairs(paths) do self._client:remove(p) end
  if dir then self._client:remove(dir) end
end

--- The size of a spill file (nil when the daemon cannot say).
function Proc:spill_size(path)
  local e = self._client:stat(path)
  return e and e.size
end

--- {exit_code=, signal=} once the end event arrived, nil, err when the process was lost.
function Proc:wait()
  self._pump_done:await()
  if self._err then return nil, self._err end
  if not self._end then return nil, self:_closed_error() end
  return self:_outcome(self._end)
end

function Proc:close()
  if self._closed then return end
  self._closed = true
  self._stream:close()
  if self._on_close then self:_on_close() end
end

return M
