--- dsh.envd.process: process.Process RPCs of the envd client.
--
-- start/connect return a process stream whose :next() yields data and end
-- events as they arrive (bytes exactly as the daemon sent them). The dshd
-- extensions (group signals, exit signals, replay offsets, group status) are
-- used only when asked for; a stock envd rejects them with its own error.
--
-- wait() returns at the command's exit, as on stock envd, also on dshd, whose
-- stream ends only once the output pipes close: see end_at_exit.
local async = require "dsh.async"
local errors = require "dsh.errors"
local base64 = require "dsh.core.base64"
local signals = require "dsh.signals"

local M = {}
local GroupWatch

-- How long a process runs before end_at_exit watches its group (a command
-- that ends sooner costs no watch; the delay is no part of correctness).
M.EXIT_WATCH_AFTER_MS = 50

-- The signals SendSignal can name (envd's Signal enum with dshd's
-- group-signals extension); numbers and names come from dsh.signals.
M.WIRE_SIGNALS = { "SIGHUP", "SIGINT", "SIGQUIT", "SIGKILL", "SIGTERM", "SIGCONT", "SIGTSTP" }
local WIRE = {}
for _, name in ipairs(M.WIRE_SIGNALS) do WIRE[name] = true end

--- "SIGTERM", "TERM" or 15 -> 15, "SIGTERM"; raises on a signal the wire cannot name.
function M.signal(sig)
  local name = signals.name(sig)
  if not name or not WIRE[name] then
    errors.misuse("dsh.envd", "send_signal: unsupported signal %s (expected %s)", tostring(sig),
      "SIGHUP, SIGINT, SIGQUIT, SIGKILL, SIGTERM, SIGCONT or SIGTSTP")
  end
  return signals.number(name), name
end

---@class dsh.EnvdProcess
---@field pid integer
---@field replay table|nil   with resume: per stream {requested=, from=}; bytes [requested, from) were dropped
local Process = {}
Process.__index = Process
Process.__tostring = function(p)
  return string.format("dsh.envd.process(pid %d%s)", p.pid or -1,
    p._ended and ", ended" or (p._closed and ", closed" or ""))
end

local function end_event(e)
  local code = tonumber(e.exitCode or e.exit_code) or 0
  local sig = tonumber(e.signal)
  return {
    type = "end",
    exit_code = code,
    exited = e.exited == true,
    status = type(e.status) == "string" and e.status or nil,
    error = type(e.error) == "string" and e.error or nil,
    signal = sig and (signals.name(sig) or ("SIG" .. sig)) or nil,
    signal_number = sig,
    core_dumped = e.coreDumped == true or nil,
  }
end

--- The next event: {type="data", stream=, data=, offset=} or {type="end", exit_code=,
-- exited=, status=, error=, signal=}; nil after the stream completed; nil, err on failure.
-- Keepalives are skipped.
function Process:next()
  while true do
    local msg, err = self._stream:next()
    if not msg then
      if err then return nil, err end
      if not self._ended then
        return nil, errors.new("unknown", "Process exited without a result")
      end
      return nil
    end
    if msg.__data then -- decoded by the stream (dsh.envd._stream), whatever form it came in
      return { type = "data", stream = msg.stream, data = msg.data, offset = msg.offset }
    end
    local ev = msg.event
    if type(ev) ~= "table" then
      return nil, errors.new("internal", "process stream message without an event")
    end
    if type(ev["end"]) == "table" then
      self._ended = true
      self:_stop_watch()
      self.result = end_event(ev["end"])
      return self.result
    elseif type(ev.start) == "table" then
      return nil, errors.new("internal", "process stream sent a second start event")
    end
    -- keepalive or an event this client does not know: skip
  end
end

-- Stock envd ends a process's stream when the command exits (it stops
-- reading the output pipes then). dshd reads them until they close, so a
-- command that leaves something running in the background with them open
-- (`sleep 1000 & exit 7`) would keep its stream open as long as that runs.
-- On dshd (its quiescence extension), once the process has run for
-- EXIT_WATCH_AFTER_MS, its group is watched; when the command (the group's
-- leader) has exited and the stream goes on, a SIGKILL to the leader alone,
-- which is gone and so reaches nobody, makes dshd take what is in the pipes
-- and end the stream with the command's status, as envd does at the exit.
-- What the command left in the background keeps running; what it writes
-- later is not read (writing to the closed pipes fails, EPIPE), as on envd.
local function watch_exit(p, ctl)
  local client = p._client
  if not async.sleep(M.EXIT_WATCH_AFTER_MS, ctl.signal) then return end
  if not client:has("quiescence") then return end
  if ctl.signal.aborted then return end
  local w = client:watch_group(p.pid, { signal = ctl.signal })
  if not w then return end
  p._watch = w
  while not ctl.signal.aborted do
    local st = w:next()
    if not st then break end
    if st.leader_exited then
      if not ctl.signal.aborted then client:send_signal(p.pid, "SIGKILL") end
      break
    end
  end
  p._watch = nil
  w:close()
end

--- Make this stream end at the command's exit, as it does on stock envd,
-- even when what the command left in the background holds its output open
-- (dshd; see above): those processes keep running and their later output
-- is not read. wait() does this itself; a caller reading with next() calls
-- it once after start. Stops when the stream ends or is closed.
function Process:end_at_exit()
  if self._exit_ctl or self._ended or self._closed then return end
  local ctl = async.controller()
  self._exit_ctl = ctl
  -- best effort: a closed client or a failed watch leaves the stream as it is
  async.run(function() pcall(watch_exit, self, ctl) end)
end

function Process:_stop_watch()
  local ctl = self._exit_ctl
  if ctl and not ctl.signal.aborted then
    ctl:abort("the process stream ended")
    if self._watch then self._watch:close() end
  end
end

--- Read to the end: {exit_code=, stdout=, stderr=, pty=, status=, error=, signal=}
-- (output collected as strings) or nil, err. Returns at the command's exit
-- (see end_at_exit): what it left in the background keeps running.
function Process:wait()
  self:end_at_exit()
  local out = { stdout = {}, stderr = {}, pty = {} }
  while true do
    local ev, err = self:next()
    if not ev then
      self:_stop_watch()
      if err then return nil, err end
      break
    end
    if ev.type == "data" then out[ev.stream][#out[ev.stream] + 1] = ev.data end
  end
  local r = self.result
  return {
    exit_code = r.exit_code, exited = r.exited, status = r.status, error = r.error,
    signal = r.signal, stdout = table.concat(out.stdout), stderr = table.concat(out.stderr),
    pty = table.concat(out.pty),
  }
end

--- The caller waits for the process to end within within_ms (it was asked
-- to stop): past that, and the envd grace, the stream ends with
-- SANDBOX_UNRESPONSIVE (see dsh.envd._stream's expect_end).
function Process:expect_end(within_ms)
  self._stream:expect_end(within_ms)
end

--- Disconnect (the process keeps running on the daemon).
function Process:close()
  if self._closed then return end
  self._closed = true
  self:_stop_watch()
  self._stream:close()
end

function Process:send_stdin(data) return self._client:send_stdin(self.pid, data) end
function Process:send_pty(data) return self._client:send_pty(self.pid, data) end
function Process:close_stdin() return self._client:close_stdin(self.pid) end
function Process:signal(sig, opts) return self._client:send_signal(self.pid, sig, opts) end
function Process:kill() return self._client:send_signal(self.pid, "SIGKILL") end
function Process:resize(rows, cols) return self._client:update_pty(self.pid, rows, cols) end

-- opts.via: the object the process's later calls (input, signals, resize)
-- go through; the client itself unless a session stands in front of it.
local function open_process(client, path, msg, opts)
  local stream, err = client:stream(path, msg, opts)
  if not stream then return nil, err end
  local first, ferr = stream:next()
  if not first then
    stream:close()
    return nil, ferr or errors.new("unknown", "missing EndStreamResponse")
  end
  local start = type(first.event) == "table" and first.event.start
  if type(start) ~= "table" or not tonumber(start.pid) then
    stream:close()
    return nil, errors.new("internal", "Expected start event")
  end
  return setmetatable({
    pid = tonumber(start.pid),
    replay = type(start.replay) == "table" and start.replay or nil,
    _stream = stream,
    _client = opts and opts.via or client,
  }, Process)
end

---@class dsh.EnvdGroupWatch
GroupWatch = {}
GroupWatch.__index = GroupWatch
GroupWatch.__tostring = function() return "dsh.envd.group_watch" end

function GroupWatch:next()
  local msg, err = self._stream:next()
  if not msg then return nil, err end
  return { leader_exited = msg.leaderExited == true, quiescent = msg.quiescent == true }
end

--- The caller waits for the group to empty within within_ms (see Process:expect_end).
function GroupWatch:expect_end(within_ms)
  self._stream:expect_end(within_ms)
end

function GroupWatch:close()
  self._stream:close()
end

local function selector(pid)
  errors.check("dsh.envd", "pid", pid, "number")
  return { pid = pid }
end

function M.mixin(Client)
  ---@class dsh.EnvdStartOpts
  ---@field cmd string
  ---@field args string[]|nil
  ---@field envs table<string,string>|nil
  ---@field cwd string|nil
  ---@field tag string|nil
  ---@field stdin boolean|nil     keep a stdin pipe open (default false: /dev/null)
  ---@field pty {rows:integer, cols:integer}|nil
  ---@field user string|nil
  ---@field timeout_ms number|nil  Connect-Timeout-Ms: the daemon kills the process after it (nil/0: none)
  ---@field env_scrub table|nil     dshd env-scrub: {contains={...}, prefixes={...}}
  ---@field spill table|nil         dshd spill: {stdout={path=, maxBytes=}, stderr=...}
  ---@field signal table|nil       abort signal: disconnects (the process keeps running)
  ---@field via table|nil          what the process's later calls go through (default this client; a
  ---                              session in front of it, like ctx.e2b's, passes itself)

  --- Start a process; returns its stream once the start event arrived.
  ---@param opts dsh.EnvdStartOpts
  ---@return dsh.EnvdProcess|nil, dsh.Error|nil
  function Client:start(opts)
    self:_check_open("start")
    errors.check("dsh.envd", "start", opts, "table")
    errors.check("dsh.envd", "start: cmd", opts.cmd, "string")
    local process = { cmd = opts.cmd }
    if opts.args and #opts.args > 0 then process.args = opts.args end
    if opts.envs and next(opts.envs) then process.envs = opts.envs end
    if opts.cwd then process.cwd = opts.cwd end
    local msg = { process = process, tag = opts.tag }
    -- dshd extensions (env-scrub, spill); a stock envd ignores unknown fields
    if opts.env_scrub then msg.envScrub = opts.env_scrub end
    if opts.spill then msg.spill = opts.spill end
    if opts.pty then
      msg.pty = { size = { rows = opts.pty.rows or 24, cols = opts.pty.cols or 80 } }
    else
      msg.stdin = opts.stdin == true
    end
    return open_process(self, "/process.Process/Start", msg, opts)
  end

  --- Attach to a running process by pid. opts.resume = {stdout=, stderr=, pty=}
  -- replays retained output from those byte offsets (dshd only); opts.via as start's.
  function Client:connect(pid, opts)
    self:_check_open("connect")
    opts = opts or {}
    local msg = { process = selector(pid) }
    if opts.resume then msg.resume = opts.resume end
    return open_process(self, "/process.Process/Connect", msg, opts)
  end

  --- Live processes: list of {pid=, tag=, config={cmd=, args=, envs=, cwd=}}.
  function Client:list(opts)
    local resp, err = self:call("/process.Process/List", {}, opts)
    if not resp then return nil, err end
    local out = {}
    for _, p in ipairs(type(resp.processes) == "table" and resp.processes or {}) do
      out[#out + 1] = { pid = tonumber(p.pid), tag = type(p.tag) == "string" and p.tag or nil, config = p.config }
    end
    return out
  end

  function Client:send_stdin(pid, data, opts)
    errors.check("dsh.envd", "send_stdin: data", data, "string")
    local resp, err = self:call("/process.Process/SendInput",
      { process = selector(pid), input = { stdin = base64.encode(data) } }, opts)
    if not resp then return nil, err end
    return true
  end

  function Client:send_pty(pid, data, opts)
    errors.check("dsh.envd", "send_pty: data", data, "string")
    local resp, err = self:call("/process.Process/SendInput",
      { process = selector(pid), input = { pty = base64.encode(data) } }, opts)
    if not resp then return nil, err end
    return true
  end

  function Client:close_stdin(pid, opts)
    local resp, err = self:call("/process.Process/CloseStdin", { process = selector(pid) }, opts)
    if not resp then return nil, err end
    return true
  end

  --- Send a signal. opts.group = true signals the whole process group (dshd);
  -- opts.grace_ms with SIGTERM: dshd escalates to SIGKILL after it unless the
  -- group is empty by then. Returns true, or nil, err (not_found when the pid
  -- is unknown).
  function Client:send_signal(pid, sig, opts)
    local _, name = M.signal(sig)
    local msg = { process = selector(pid), signal = "SIGNAL_" .. name }
    if opts and opts.group then msg.group = true end
    if opts and opts.grace_ms then msg.graceMs = math.floor(opts.grace_ms) end
    local resp, err = self:call("/process.Process/SendSignal", msg, opts)
    if not resp then return nil, err end
    return true
  end

  --- dshd terminal-sessions: sig to a PTY process's terminal. opts.foreground:
  -- to its foreground process group (returns that pgid); opts.session: to
  -- every process group of its session (returns true). nil, err otherwise.
  function Client:signal_terminal(pid, sig, opts)
    local _, name = M.signal(sig)
    local msg = { process = selector(pid), signal = "SIGNAL_" .. name }
    if opts and opts.foreground then msg.foreground = true end
    if opts and opts.session then msg.session = true end
    local resp, err = self:call("/process.Process/SendSignal", msg, opts)
    if not resp then return nil, err end
    if msg.foreground then
      local pg = tonumber(resp.pgid)
      if not pg then return nil, errors.new("internal", "SendSignal answered without the pgid") end
      return pg
    end
    return true
  end

  function Client:update_pty(pid, rows, cols, opts)
    errors.check("dsh.envd", "update_pty: rows", rows, "number")
    errors.check("dsh.envd", "update_pty: cols", cols, "number")
    local resp, err = self:call("/process.Process/Update",
      { process = selector(pid), pty = { size = { rows = rows, cols = cols } } }, opts)
    if not resp then return nil, err end
    return true
  end

  --- dshd: whether a process's group has fully exited, now. To wait until it
  -- has, use watch_group. Returns {leader_exited=, quiescent=} or nil, err.
  function Client:group_status(pid, opts)
    local resp, err = self:call("/process.Process/GroupStatus", { process = selector(pid) }, opts)
    if not resp then return nil, err end
    return { leader_exited = resp.leaderExited == true, quiescent = resp.quiescent == true,
      foreground_pgid = tonumber(resp.foregroundPgid) }
  end

  --- dshd: a stream of a process group's state, {leader_exited=, quiescent=}
  -- now and on every change; it ends after the quiescent one. :next() returns
  -- the next state, nil once ended, nil, err on failure; :close() stops.
  function Client:watch_group(pid, opts)
    opts = opts or {}
    local stream, err = self:stream("/process.Process/WatchGroup", { process = selector(pid) },
      { signal = opts.signal, user = opts.user, keepalive_s = opts.keepalive_s })
    if not stream then return nil, err end
    return setmetatable({ _stream = stream }, GroupWatch)
  end
end

M.Process = Process
return M
