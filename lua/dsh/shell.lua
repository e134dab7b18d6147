--- dsh.shell: `dsh shell [--new] [--cwd DIR] ID` — an interactive terminal in a
-- sandbox, attached to this one.
--
-- The local terminal goes into raw mode: every key (Ctrl-C included) is typed
-- into the sandbox's shell, its output is printed as it comes, and a window
-- size change (SIGWINCH) resizes the remote terminal. Ctrl-] detaches: this
-- command ends, the shell keeps running in the sandbox (tagged dsh-shell), and
-- the next `dsh shell ID` re-attaches to it, first replaying what dshd kept of
-- its output (the scrollback; a note says when older output is gone). When the
-- shell exits, this command exits with its status (128 + N after signal N).
-- A hangup or TERM of this command detaches too. --new starts another shell
-- even when one is detached.
local async = require "dsh.async"
local loop = require "dsh.loop"
local native = require "dsh.providers.subprocess_e2b.native"
local proc = require "dsh.proc"
local tty = require "dsh.tty"

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

-- The detached shell of the sandbox, attached with its retained output, or a new one.
local function open(client, o, rows, cols)
  if not o.new then
    local list = client:list() or {}
    for _, p in ipairs(list) do
      if p.tag == M.TAG then
        local s, err = client:connect(p.pid, { resume = { pty = 0 } })
        if s then return s, true end
        if err.code ~= "not_found" then return nil, err end
      end
    end
  end
  local s, err = client:start { cmd = "/bin/bash", args = { "-l" }, tag = M.TAG, cwd = o.cwd,
    pty = { rows = rows, cols = cols }, env_scrub = native.env_scrub(),
    envs = { TERM = os.getenv("TERM") or "xterm-256color", LANG = os.getenv("LANG") or "C.UTF-8" } }
  return s, false, err
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
  local p, attached, oerr = open(sb.envd, o, rows, cols)
  if not p then
    sb:close()
    return fail(tostring(oerr))
  end
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
        io.stdout:write(ev.data)
        io.stdout:flush()
      else
        return finished:resolve(ev)
      end
    end
  end)
  local res, err = finished:await()
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
