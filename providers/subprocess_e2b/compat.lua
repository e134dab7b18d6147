--- subprocess-e2b on a stock envd (no Dshd-Extensions): the reference's
-- setsid wrapper (§2.3 "Wrapper"), with three fixes from §8.
--
--   envd runs  /bin/bash -c OUTER INNER <stdin-mode> <spill-dir> <out-cap> <err-cap> argv...
--   OUTER      exec setsid --wait -- /bin/bash -c INNER dsh-e2b ...  (setsid's own
--              complaints go to /dev/null; the real stderr travels as fd 3)
--   INNER      publishes its pgid ($$, a session leader) as the first line of
--              stderr — the host strips it, so there is no pid file to poll;
--              reads the explicit env as NUL-terminated records from stdin (an
--              empty record ends them) — values never touch the disk or a
--              command line; drops ambient names matching the seam's one scrub
--              definition (a case pattern generated from subprocess.scrub_rules);
--              tees spilled streams into head -c <cap> (cap = maxBytes);
--              then execs the payload, which so leads the session's group.
--              `setsid --wait` exits with the payload's status — for a death
--              by signal, the raw wait status (the signal's number).
--
-- Signals and quiescence are `kill` run in the sandbox: the terminate ladder
-- and the "group gone" wait each run as one remote loop (20 ms ticks inside
-- the sandbox, no host round trip per tick). The exit signal is inferred,
-- only after a terminate (see _outcome). Stock envd has no replay: output
-- produced while a dropped stream reconnects may be lost.
local async = require "dsh.async"
local errors = require "dsh.errors"
local signals = require "dsh.signals"
local remote = require "dsh.providers.subprocess_e2b.remote"
local subprocess = require "dsh.subprocess"

local M = {}
local NAME = "subprocess-e2b"
local TICK_S = "0.02"

M.OUTER = [[exec setsid --wait -- /bin/bash -c "$0" dsh-e2b "$@" 3>&2 2>/dev/null]]

local SCRUB = [[
a=()
while IFS= read -r -d '' r; do
  case ${r%%=*} in @SCRUB@) ;; *) a+=("$r") ;; esac
done < <(env -0)
]]

--- A POSIX `case` pattern matching exactly the names the seam scrubs, ASCII
-- case-insensitive whatever the shell's locale: "[Dd][Ss][Hh]_*|*[Kk][Ee][Yy]*|...".
function M.scrub_case_pattern()
  local function ci(s)
    assert(s:match("^[%w_]+$"), "scrub rules must be identifier characters")
    return (s:gsub("%a", function(c) return "[" .. c:upper() .. c:lower() .. "]" end))
  end
  local r, alts = subprocess.scrub_rules, {}
  for _, p in ipairs(r.prefixes) do alts[#alts + 1] = ci(p) .. "*" end
  for _, c in ipairs(r.contains) do alts[#alts + 1] = "*" .. ci(c) .. "*" end
  return table.concat(alts, "|")
end

-- The scrub loop, its case pattern generated from the seam's one definition.
local function scrub_loop()
  return (SCRUB:gsub("@SCRUB@", function() return M.scrub_case_pattern() end))
end

M.INNER = ([[
set +e
umask 077
printf '%s\n' "$$" >&3
m=$1 d=$2 oc=$3 ec=$4
shift 4
e=()
while IFS= read -r -d '' r && [ -n "$r" ]; do e+=("$r"); done
@SCRUBLOOP@
if [ "$m" = ignore ]; then exec </dev/null; fi
if [ -n "$d" ]; then mkdir -p -- "$d"; fi
if [ -n "$oc" ]; then exec > >(tee --output-error=warn-nopipe >(head -c "$oc" >"$d/stdout.log")); fi
if [ -n "$ec" ]; then exec 3> >(tee --output-error=warn-nopipe >(head -c "$ec" >"$d/stderr.log") >&3); fi
exec env -i "${a[@]}" "${e[@]}" "$@" 2>&3 3>&-
]]):gsub("@SCRUBLOOP@", scrub_loop)

-- A PTY has one stream: echo goes off, a marker says so, then the env block is typed.
M.READY = "dsh-e2b-env-ready\n"
M.PTY_INNER = ([[
t=$(stty -g)
stty raw -echo
printf 'dsh-e2b-env-ready\n'
e=()
while IFS= read -r -d '' r && [ -n "$r" ]; do e+=("$r"); done
stty "$t"
@SCRUBLOOP@
exec env -i "${a[@]}" "${e[@]}" "$@"
]]):gsub("@SCRUBLOOP@", scrub_loop)

M.LADDER = [[
kill -TERM -- "-$1" 2>/dev/null || exit 0
i=0
while [ "$i" -lt "$2" ]; do kill -0 -- "-$1" 2>/dev/null || exit 0; sleep ]] .. TICK_S .. [[; i=$((i+1)); done
kill -KILL -- "-$1" 2>/dev/null && echo killed
exit 0
]]

M.WAITER = [[while kill -0 -- "-$1" 2>/dev/null; do sleep ]] .. TICK_S .. [[; done]]

--- NAME=value\0 records, then the empty record that ends them.
function M.env_block(env)
  local names = {}
  for k in pairs(env or {}) do names[#names + 1] = k end
  table.sort(names)
  local parts = {}
  for i, k in ipairs(names) do parts[i] = k .. "=" .. env[k] .. "\0" end
  return table.concat(parts) .. "\0"
end

local Compat = setmetatable({}, { __index = remote.Proc })
Compat.__index = Compat
Compat.__tostring = remote.Proc.__tostring

local function exec_script(bp, script, ...)
  return bp._backend.e2b:exec({ "/bin/bash", "-c", script, "dsh-e2b", ... })
end

-- Kill whatever a failed start left in the provisional group (the envd
-- process's own) and wait, bounded, until it is gone.
local function rollback(bp)
  exec_script(bp, [[kill -KILL -- "-$1" 2>/dev/null; exit 0]], tostring(bp._envd_pid))
  bp._client:send_signal(bp._envd_pid, "SIGKILL")
  bp.pid = bp._envd_pid
  async.timeout(subprocess.ROLLBACK_TIMEOUT_MS, function(signal) return bp:wait_quiescent(signal) end)
  bp:close()
end

-- The first stderr line is the wrapper's pgid; everything after it is the payload's.
function Compat:_filter(key, data)
  if self._published:done() or key ~= (self._pty and "pty" or "stderr") then return data end
  self._hdr = self._hdr .. data
  if self._pty then
    local at = self._hdr:find(M.READY, 1, true)
    if not at then return "" end
    local rest = self._hdr:sub(at + #M.READY)
    self._hdr = ""
    self._published:resolve(self._envd_pid)
    return rest
  end
  local line, rest = self._hdr:match("^([^\n]*)\n(.*)$")
  if not line then
    if #self._hdr > 64 then self:_publish_invalid(self._hdr) end
    return ""
  end
  self._hdr = ""
  local n = line:match("^[1-9][0-9]*$") and tonumber(line)
  if n and n <= 2 ^ 31 - 1 then self._published:resolve(n) else self:_publish_invalid(line) end
  return rest
end

function Compat:_publish_invalid(v)
  self._published:resolve(nil, errors.new("SUBPROCESS_START",
    string.format('%s: remote wrapper published invalid process-group id "%s"', NAME, v:sub(1, 64))))
end

function Compat:_on_pump_end()
  if not self._published:done() then
    self._published:resolve(nil, self._err or errors.new("SUBPROCESS_START",
      NAME .. ": remote command exited before publishing its process-group id"))
  end
end

function M.start(backend, client, spec)
  local args = { "-c" }
  if spec.pty then
    args[2], args[3] = M.PTY_INNER, "dsh-e2b"
  else
    local dir, oc, ec = "", "", ""
    for _, name in ipairs { "stdout", "stderr" } do
      local s = spec[name].spill
      if s then
        dir = s.path:match("^(.*)/[^/]+$")
        if name == "stdout" then oc = tostring(s.maxBytes) else ec = tostring(s.maxBytes) end
      end
    end
    args[2], args[3], args[4], args[5], args[6], args[7] = M.OUTER, M.INNER, spec.stdin, dir, oc, ec
  end
  for i = 1, #spec.argv do args[#args + 1] = spec.argv[i] end
  local p, err = client:start { cmd = "/bin/bash", args = args, cwd = spec.cwd, pty = spec.pty, stdin = true }
  if not p then return nil, err end
  local bp = setmetatable(remote.new({ backend = backend, client = client, spec = spec, flavor = "envd",
    resume = false }, p, -1), Compat)
  bp._published, bp._hdr = async.future(), ""
  bp:start_pump()
  local ok, serr = true, nil
  if not spec.pty then
    ok, serr = client:send_stdin(p.pid, M.env_block(spec.env))
    if ok and spec.stdin == "ignore" then
      ok, serr = client:close_stdin(p.pid)
      -- with its environment read, the wrapper may have run the whole command
      -- already: a process envd no longer knows has no stdin left to close
      if not ok and serr.code == "not_found" then ok, serr = true, nil end
    end
  end
  local pgid, perr = bp._published:await()
  if pgid and spec.pty then ok, serr = client:send_pty(p.pid, M.env_block(spec.env)) end
  if not ok or not pgid then
    rollback(bp)
    return nil, perr or serr
  end
  bp.pid = pgid
  return bp
end

-- After a terminate, `setsid --wait` exiting 15 or 9 means TERM or KILL
-- ended the payload (it exits with the raw wait status of a signalled child;
-- envd reports setsid itself killed after a rollback). Without a terminate
-- nothing is inferred: a status is a status.
function Compat:_outcome(e)
  if self._term_sent and e.exited then
    if e.exit_code == signals.number("SIGTERM") then return { exit_code = nil, signal = "SIGTERM" } end
    if e.exit_code == signals.number("SIGKILL") then return { exit_code = nil, signal = "SIGKILL" } end
  end
  if not e.exited and e.status then
    local what = e.status:match("^signal: (%a+)")
    if what == "killed" then return { exit_code = nil, signal = "SIGKILL" } end
    if what == "terminated" then return { exit_code = nil, signal = "SIGTERM" } end
  end
  return { exit_code = e.exit_code, signal = nil }
end

function Compat:signal(sig)
  local num = type(sig) == "number" and sig or signals.number(sig)
  if not num then errors.misuse(NAME, "signal: unknown signal %s", tostring(sig)) end
  local r, err = exec_script(self, [[kill -s "$2" -- "-$1"]], tostring(self.pid), tostring(num))
  if not r then return nil, err end
  if r.exit_code ~= 0 then
    return nil, errors.new("SUBPROCESS_NOT_FOUND", "process group " .. self.pid .. " is gone")
  end
  return true
end

function Compat:terminate(grace_ms)
  if self._term_sent then return true end
  self._term_sent = true
  local r, err = exec_script(self, M.LADDER, tostring(self.pid), tostring(math.ceil(grace_ms / 20)))
  if not r then
    self:_stop_sent(nil, err)
    return nil, err
  end
  if r.stdout:find("killed", 1, true) then
    self._client:send_signal(self._envd_pid, "SIGKILL") -- the setsid process too; errors mean it is gone
  end
  return true
end

function Compat:kill()
  self._term_sent = true
  local r, err = exec_script(self, [[kill -KILL -- "-$1" 2>/dev/null; exit 0]], tostring(self.pid))
  if not r then self:_stop_sent(nil, err) end
  self._client:send_signal(self._envd_pid, "SIGKILL")
  return true
end

--- true once `kill -0 -- -pgid` fails in the sandbox (one remote loop),
-- false when signal aborted, nil, err when the daemon stayed unreachable.
function Compat:wait_quiescent(signal)
  if self._quiet then return true end
  if self._err and self._err.code == "SANDBOX_GONE" then return true end -- every group went with it
  if self._err then return nil, self._err end -- the daemon is gone: its groups' fate is unknowable
  if self._abandoned then return nil, self._abandoned end -- it does not answer: nor can it say
  local retry = remote.backoff(self._backend.reconnect_ms, self.pid)
  while true do
    if signal and signal.aborted then return false end
    local sb, serr = self._backend.e2b:getSandbox()
    if not sb and serr.code == "SANDBOX_GONE" then return true end
    if not sb then return nil, serr end
    local args = { "-c", M.WAITER, "dsh-e2b", tostring(self.pid) }
    local p, err = sb.envd:start { cmd = "/bin/bash", args = args }
    if p then
      retry.reset()
      local off = signal and signal:on_abort(function() p:close() end)
      local r, werr = p:wait()
      if off then off() end
      p:close()
      if r then
        self._quiet = true
        return true
      end
      if signal and signal.aborted then
        async.run(function() sb.envd:send_signal(p.pid, "SIGKILL") end)
        return false
      end
      err = werr
    end
    if remote.unresponsive(err) then return nil, err end
    local waited, lost = retry.wait(err, signal)
    if not waited then return nil, lost end
  end
end

return M
