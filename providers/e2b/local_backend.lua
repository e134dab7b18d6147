--- The local backend of ctx.e2b: a dsh.sandbox on this machine (dshd in bubblewrap).
local sandbox = require "dsh.sandbox"

local M = { name = "local" }

local Handle = {}
Handle.__index = Handle

local function wrap(sb)
  return setmetatable({ id = sb.id, envd = sb.envd, _sb = sb }, Handle)
end

function M.create(cfg)
  local sb, err = sandbox.create {
    timeoutMs = cfg.timeoutMs, onTimeout = cfg.onTimeout, network = cfg.network,
    envs = cfg.envs, metadata = cfg.metadata,
    maxProcesses = cfg.maxProcesses, memoryMb = cfg.memoryMb, cpus = cfg.cpus,
  }
  if not sb then return nil, err end
  return wrap(sb)
end

function M.connect(_, id)
  local sb, err = sandbox.connect(id)
  if not sb then return nil, err end
  return wrap(sb)
end

--- true when killed now, false when it was gone already (E2B's answer shape).
function Handle:kill()
  local ok, err = sandbox.kill(self.id)
  if not ok and err.code == "not_found" then return false end
  return ok, err
end

--- true when paused now, false when it already was (E2B's answer shape).
function Handle:pause()
  local running = false
  for _, s in ipairs(sandbox.list()) do
    if s.id == self.id then running = s.state == "running" end
  end
  local ok, err = sandbox.pause(self.id)
  if not ok then return nil, err end
  return running
end

function Handle:close()
  self._sb:close()
end

return M
