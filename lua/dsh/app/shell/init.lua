--- dsh.app.shell: `dsh shell [--new] [--cwd DIR] ID` — an interactive terminal in a
-- sandbox, attached to this one.
--
-- The local terminal goes into raw mode: every key (Ctrl-C included) is typed
-- into the sandbox's shell, its output is printed as it comes, and a window
-- size change (SIGWINCH) resizes the remote terminal. Ctrl-] detaches: this
-- command ends, the shell keeps running in the sandbox (tagged dsh-shell), and
-- the next `dsh shell ID` re-attaches to it, first replaying what dshd kept of
-- its output (the scrollback; a note says when older output is gone) without
-- the terminal queries in it, and dropping what the local terminal answers
-- to any query it still sees until it answered one of our own
-- (dsh.app.shell.replay): replayed output must never type into the shell. When
-- the shell exits, this command exits with its status (128 + N after signal
-- N). A hangup or TERM of this command detaches too. --new starts another
-- shell even when one is detached; --cwd DIR applies to a new shell only, so
-- with a detached one it is refused unless --new is given.
local async = require "dsh.async"
local loop = require "dsh.core.loop"
local native = require "dsh.providers.subprocess_e2b.native"
local proc = require "dsh.core.proc"
local replay = require "dsh.app.shell.replay"
local tty = require "dsh.core.tty"

local M = {}
M.TAG = "dsh-shell"
M.DETACH = "\29" -- Ctrl-]
M.USAGE = "usage: dsh shell [--new] [--cwd DIR] ID"

-- this process's own signals (the host's numbers)
local SIGHUP, SIGTERM, SIGWINCH = proc.signum("SIGHUP"), proc.signum("SIGTERM"), proc.signum("SIGWINCH")

local function fail(msg)
  io.stderr:write("dsh shell: ", msg, "\n")
  return 1
end

local function parse(args)
  local o = {}
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "--new" then
      o.new = true
    elseif a == "--cwd" then
      i = i + 1
      o.cwd = args[i]
      if not o.cwd then return nil, "--cwd needs a value" end
    elseif a:sub(1, 2) == "--" then
      return nil, "unknown option " .. a
    elseif o.id then
      return nil, "unexpected argument " .. a
    else
      o.id = a
    end
    i = i + 1
  end
  if not o.id then return nil, M.USAGE end
  return o
end

-- Further than any output dshd can hold: a Connect resuming there starts at
-- the live end, so its replay.from is where live output begins. (14 digits:
-- dsh.json writes numbers with 14 significant digits.)
local LIVE_END = 99999999999999

-- The detached shell of the sandbox (a process record), or nil.
local function detached(client)
  for _, p in ipairs(client:list() or {}) do
    if p.tag == M.TAG then return p end
  end
end

-- Attach to the detached shell pid with its retained output: the stream,
-- and the offset where live output begins (bytes before it are a replay).
-- nil when it is gone; nil, err on failure.
local function attach(client, pid)
  local probe, perr = client:connect(pid, { resume = { pty = LIVE_END } })
  if not probe then return nil, perr end
  local rp = probe.replay and probe.replay.pty
  local live = rp and tonumber(rp.from) or 0
  probe:close()
  local s, err = client:connect(pid, { resume = { pty = 0 } })
  if not s then return nil, err end
  return s, live
end

-- The detached shell attached, or a new one: stream, live offset (nil for a
-- new shell), or nil, err.
local function open(client, o, rows, cols)
  if not o.new then
    local p = detached(client)
    if p and o.cwd then
      return nil, nil, "a detached shell runs in this sandbox and --cwd applies to a new one only; add --new "
        .. "to start another shell in " .. o.cwd .. ", or leave --cwd out to re-attach"
    end
    if p then
      local s, live = attach(client, p.pid)
      if s then return s, live end
      if live.code ~= "not_found" then return nil, nil, live end
    end
  end
  local s, err = client:start { cmd = "/bin/bash", args = { "-l" }, tag = M.TAG, cwd = o.cwd,
    pty = { rows = rows, cols = cols }, env_scrub = native.env_scrub(),
    envs = { TERM = os.getenv("TERM") or "xterm-256color", LANG = os.getenv("LANG") or "C.UTF-8" } }
  return s, nil, err
end

-- Prints the replay (bytes up to live) without its queries, then asks the
-- terminal the fence's question: on(data) takes each output event, returns
-- true once the replay is over.
local function replayer(live, fence)
  local parts, done = {}, live == nil
  local function finish()
    done = true
    local bytes = replay.strip(table.concat(parts))
    if bytes ~= "" then
      io.stdout:write(bytes, replay.FENCE_QUERY)
      io.stdout:flush()
      fence.arm()
    end
  end
  return function(ev)
    if done then return false end
    if not ev then return finish() end
    local at = ev.offset or live
    if at + #ev.data <= live then
      parts[#parts + 1] = ev.data
      if at + #ev.data == live then finish() end
      return true
    end
    if at < live then parts[#parts + 1] = ev.data:sub(1, live - at) end
    finish()
    ev.data = ev.data:sub(math.max(0, live - at) + 1)
    return false
  end
end

--- Run the command; returns the exit status.
function M.main(args)
  local o, perr = parse(args)
  if not o then return fail(perr) end
  if not tty.isatty(0) then return fail("stdin is not a terminal") end
  local sb, cerr = require("dsh.sandbox").connect(o.id)
  if not sb then return fail(tostring(cerr)) end
  local rows, cols = tty.size(0)
  rows, cols = rows or 24, cols or 80
  local p, live, oerr = open(sb.envd, o, rows, cols)
  if not p then
    sb:close()
    return fail(tostring(oerr))
  end
  local attached = live ~= nil
  local saved = tty.raw(0)
  if attached then
    sb.envd:update_pty(p.pid, rows, cols)
    local rp = p.replay and p.replay.pty
    local dropped = rp and (tonumber(rp.from) or 0) - (tonumber(rp.requested) or 0) or 0
    if dropped > 0 then
      io.stdout:write(string.format("[dsh: the first %d bytes of this shell's output are no longer kept]\r\n",
        dropped))
    end
  end
  local finished = async.future() -- resolves "detach", or the end event, or nil, err
  local reader = tty.reader(0)
  -- the local terminal's answers to replayed queries are dropped until it answered the fence
  local fence = { filter = function(_, d) return d end }
  local expiry = loop.timer(function()
    local held = fence:expire()
    if held ~= "" then async.run(function() sb.envd:send_pty(p.pid, held) end) end
  end)
  function fence.arm()
    local f = replay.fence()
    fence.filter = function(_, d) return f:filter(d) end
    fence.expire = function() return f:expire() end
    expiry:start(replay.FENCE_MS)
  end
  local in_replay = replayer(live, fence)
  local watchers = {}
  watchers[#watchers + 1] = loop.on_signal(SIGWINCH, function()
    local r, c = tty.size(0)
    if r then async.run(function() sb.envd:update_pty(p.pid, r, c) end) end
  end)
  for _, sig in ipairs { SIGHUP, SIGTERM } do
    watchers[#watchers + 1] = loop.on_signal(sig, function() finished:resolve("detach") end)
  end
  async.run(function() -- keys, in order
    while not finished:done() do
      local data = reader:read()
      if not data then return finished:resolve("detach") end
      data = fence:filter(data)
      local k = data:find(M.DETACH, 1, true)
      local send = k and data:sub(1, k - 1) or data
      if send ~= "" then sb.envd:send_pty(p.pid, send) end
      if k then return finished:resolve("detach") end
    end
  end)
  async.run(function() -- output, then the end
    while true do
      local ev, err = p:next()
      if not ev then return finished:resolve(nil, err) end
      if ev.type == "data" then
        if not in_replay(ev) and ev.data ~= "" then
          io.stdout:write(ev.data)
          io.stdout:flush()
        end
      else
        in_replay(nil)
        return finished:resolve(ev)
      end
    end
  end)
  local res, err = finished:await()
  expiry:close()
  reader:close()
  for _, w in ipairs(watchers) do w:close() end
  p:close()
  tty.restore(saved)
  sb:close()
  if res == "detach" then
    io.stderr:write("\r\n[dsh: detached; the shell keeps running; `dsh shell ", o.id, "` re-attaches]\r\n")
    return 0
  end
  if not res then
    return fail("lost the connection to the sandbox (" .. tostring(err) .. "); `dsh shell " .. o.id
      .. "` re-attaches")
  end
  if res.signal_number then return 128 + res.signal_number end
  return res.exit_code or 0
end

return M
