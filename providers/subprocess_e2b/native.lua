--- subprocess-e2b on dshd: its extensions do the work natively.
--
-- Start carries the explicit env in `envs` and the seam's scrub rules in
-- `envScrub` (dshd scrubs its own ambient environment; nothing is written to
-- disk), spill paths in `spill` (dshd copies the first maxBytes bytes while
-- it reads). The leader leads its process group, so pid == pgid. terminate is
-- one SendSignal {SIGTERM, group, graceMs} — dshd escalates to SIGKILL itself;
-- quiescence is a WatchGroup stream that ends once the group is empty; the
-- end event carries the exact exit signal. A dropped stream is resumed by
-- byte offset (remote.lua).
local errors = require "dsh.errors"
local loop = require "dsh.core.loop"
local remote = require "dsh.providers.subprocess_e2b.remote"
local subprocess = require "dsh.subprocess"

local M = {}

--- Extensions this flavour needs (advertised by dshd's /health).
M.REQUIRED = {
  "process-groups", "group-signals", "exit-signals", "replay", "quiescence", "env-scrub", "spill",
}

--- The seam's scrub rules as dshd's StartRequest.envScrub carries them.
function M.env_scrub()
  local r = subprocess.scrub_rules
  return { contains = { unpack(r.contains) }, prefixes = { unpack(r.prefixes) } }
end

local Native = setmetatable({}, { __index = remote.Proc })
Native.__index = Native
Native.__tostring = remote.Proc.__tostring

function M.start(backend, client, spec)
  local args = {}
  for i = 2, #spec.argv do args[i - 1] = spec.argv[i] end
  local spill
  for _, name in ipairs { "stdout", "stderr" } do
    local s = spec[name].spill
    if s then
      spill = spill or {}
      spill[name] = { path = s.path, maxBytes = s.maxBytes }
    end
  end
  local p, err = client:start {
    cmd = spec.argv[1], args = args, envs = spec.env, cwd = spec.cwd, pty = spec.pty,
    stdin = spec.stdin == "pipe", env_scrub = M.env_scrub(), spill = spill,
  }
  if not p then return nil, err end
  local bp = setmetatable(remote.new({ backend = backend, client = client, spec = spec, flavor = "dshd",
    resume = true }, p, p.pid), Native)
  bp:start_pump()
  return bp
end

function Native._outcome(_, e)
  if e.signal then return { exit_code = nil, signal = e.signal } end
  return { exit_code = e.exit_code, signal = nil }
end

function Native:signal(sig)
  return remote.contract(self._client:send_signal(self.pid, sig, { group = true }))
end

-- How long a group may take to end after SIGKILL before the host gives up on it.
M.KILL_WITHIN_MS = 500

function Native:terminate(grace_ms)
  local ok, err = self._client:send_signal(self.pid, "SIGTERM", { group = true, grace_ms = grace_ms })
  if not ok and err.code == "not_found" then return true end -- the group is gone already
  self:_stop_sent(ok, err, (grace_ms or 0) + M.KILL_WITHIN_MS)
  return ok, err
end

function Native:kill()
  local ok, err = self._client:send_signal(self.pid, "SIGKILL", { group = true })
  if not ok and err.code == "not_found" then return true end
  self:_stop_sent(ok, err, M.KILL_WITHIN_MS)
  return ok, err
end

-- Terminals, with dshd's terminal-sessions extension: the foreground group
-- and the session's other groups natively (no ps in the sandbox); without
-- it, what stock envd gets (remote.lua runs ps/pkill in the sandbox).
local function sessions(self)
  return self._backend:has_extension(self._client, "terminal-sessions")
end

function Native:foreground()
  if not sessions(self) then return remote.Proc.foreground(self) end
  local st, err = self._client:group_status(self.pid)
  if not st then return remote.contract(nil, err) end
  if not st.foreground_pgid then
    return nil, errors.new("SUBPROCESS_NOT_FOUND", "the terminal has no foreground process group")
  end
  return st.foreground_pgid
end

function Native:signal_foreground(sig)
  if not sessions(self) then return remote.Proc.signal_foreground(self, sig) end
  return remote.contract(self._client:signal_terminal(self.pid, sig, { foreground = true }))
end

--- To every group of the session natively (dshd sends SIGCONT after a
-- SIGTERM itself); listing them is remote.lua's (a command in the sandbox).
function Native:signal_session(sig)
  if not sessions(self) then return remote.Proc.signal_session(self, sig) end
  local ok, err = self._client:signal_terminal(self.pid, sig, { session = true })
  if not ok and err.code == "not_found" then return true end -- nothing of it is left
  return ok, err
end

function Native:kill_session()
  return self:signal_session("SIGKILL")
end

--- true once the group is empty (WatchGroup ends), false when signal
-- aborted, nil, err when the daemon stayed unreachable for reconnectMs (or
-- at once when it was found unresponsive). After a stop request the group
-- must empty by its time (see remote.lua's _expect_end).
function Native:wait_quiescent(signal)
  if self._err and self._err.code == "SANDBOX_GONE" then return true end -- every group went with it
  -- the daemon answered that it has no such process (a new incarnation after
  -- dshd died or the sandbox paused, or a record long expired): gone too
  local cause = self._err and self._err.cause
  if cause and cause.code == "not_found" then return true end
  if self._err then return nil, self._err end -- the daemon is gone: its groups' fate is unknowable
  if self._abandoned then return nil, self._abandoned end -- it does not answer: nor can it say
  local retry = remote.backoff(self._backend.reconnect_ms, self.pid) -- from the first failure in a row
  while true do
    if signal and signal.aborted then return false end
    local w, err = self._client:watch_group(self.pid, { signal = signal })
    if w then
      retry.reset()
      self._group_watch = w
      if self._stop_by then w:expect_end(math.max(0, self._stop_by - loop.now_ms())) end
      while true do
        local st, werr = w:next()
        if not st or st.quiescent then
          w:close()
          self._group_watch = nil
          if st or not werr then return true end
          err = werr
          break
        end
      end
    end
    if signal and signal.aborted then return false end
    if self._abandoned then return nil, self._abandoned end
    if remote.unresponsive(err) then return nil, err end
    -- a record dshd no longer has belongs to a group that ended long ago
    if err.code == "not_found" or err.code == "SANDBOX_GONE" then return true end
    local waited, lost = retry.wait(err, signal)
    if not waited then return nil, lost end
  end
end

return M
