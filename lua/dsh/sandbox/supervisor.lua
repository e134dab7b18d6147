--- dsh.sandbox.supervisor: the one host process that keeps a local sandbox up.
--
-- Started detached (its own session) by create/connect. It runs bubblewrap
-- with --die-with-parent, hands dshd its access token on stdin, and waits. On
-- SIGTERM (pause or kill from the host) it SIGKILLs the sandbox's process
-- group, which ends the pid namespace and every process in it; files stay.
-- When dshd exits on its idle timeout, onTimeout decides: "pause" keeps the
-- files, "kill" deletes the sandbox. If this process dies, bubblewrap (and so
-- the sandbox) dies with it.
local async = require "dsh.async"
local loop = require "dsh.loop"
local proc = require "dsh.proc"
local sys = require "dsh.sysutil"
local state = require "dsh.sandbox.state"
local bwrap = require "dsh.sandbox.bwrap"

local M = {}

M.EXIT_IDLE = 3 -- dshd's exit status after --idle-timeout-ms

local function log(fmt, ...)
  io.stderr:write(os.date("!%Y-%m-%dT%H:%M:%SZ "), string.format(fmt, ...), "\n")
  io.stderr:flush()
end

local function main(id)
  local dir = state.dir(id)
  local meta = assert(state.read_meta(id), "sandbox " .. id .. " has no meta.json")
  assert(sys.write_file(dir .. "/supervisor.pid", sys.pid_record() .. "\n", "600"))
  os.remove(dir .. "/run/ready")
  os.remove(dir .. "/run/dshd.sock")

  local argv = bwrap.argv {
    id = id, dir = dir, network = meta.network ~= false, dshd = meta.dshd,
    listen = meta.network ~= false and "127.0.0.1:0" or "/run/dsh/dshd.sock",
    idle_timeout_ms = meta.timeout_ms,
  }
  local p, err = proc.spawn { argv = argv, env = bwrap.env(), stdin = "pipe", stdout = "inherit", stderr = "inherit" }
  if not p then
    log("cannot start bubblewrap: %s", tostring(err))
    os.remove(dir .. "/supervisor.pid")
    return 1
  end
  log("sandbox %s started (pid %d)", id, p.pid)
  p:write(meta.token)
  p:close_stdin()

  local stopping = false
  local watchers = {}
  for _, sig in ipairs { 15, 2, 1 } do
    watchers[#watchers + 1] = loop.on_signal(sig, function()
      stopping = true
      p:signal("SIGKILL", true)
    end)
  end
  local st = p:wait()
  p:wait_quiescent()
  p:close()
  for _, w in ipairs(watchers) do w:close() end
  os.remove(dir .. "/run/ready")
  os.remove(dir .. "/run/dshd.sock")

  local idle = not stopping and st.exit_code == M.EXIT_IDLE
  log("sandbox %s stopped (%s)", id, stopping and "requested" or (idle and "idle timeout")
    or ("exit " .. tostring(st.exit_code or st.signal)))
  if idle and meta.on_timeout == "kill" then
    sys.rm_rf(dir)
    return 0
  end
  os.remove(dir .. "/supervisor.pid")
  return 0
end

--- Entry point of the detached supervisor process.
function M.run(id)
  assert(state.valid_id(id), "invalid sandbox id")
  local code = async.run(main, id):await()
  os.exit(code or 0)
end

return M
