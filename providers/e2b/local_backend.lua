--- The local backend of ctx.e2b: a dsh.sandbox on this machine (dshd in bubblewrap).
--
-- Activity is dshd's to count: a request, or an open stream, keeps its idle
-- timeout from expiring, so nothing is sent to extend it. recover() (for
-- dsh.providers.e2b.session) reads the host's records: a paused sandbox is
-- resumed (its processes ended with the pause), a deleted one is gone, and
-- the records say why and when. list, info and metrics speak E2B's shapes
-- (as the cloud backend returns them) from the host's records and the
-- sandbox's cgroups (dsh.sandbox.metrics).
local async = require "dsh.async"
local errors = require "dsh.errors"
local loop = require "dsh.core.loop"
local metrics = require "dsh.sandbox.metrics"
local sandbox = require "dsh.sandbox"

local M = { name = "local" }

-- How long a sandbox recorded as running may fail to answer before a call's
-- failure is returned (a pause in progress ends within milliseconds).
M.UNHEALTHY_MS = 1500

local Handle = {}
Handle.__index = Handle

local function wrap(sb)
  return setmetatable({ id = sb.id, envd = sb.envd, _sb = sb, keeps_processes = false }, Handle)
end

function M.create(cfg)
  local sb, err = sandbox.create {
    timeoutMs = cfg.timeoutMs, onTimeout = cfg.onTimeout, network = cfg.network,
    envs = cfg.envs, metadata = cfg.metadata,
    maxProcesses = cfg.maxProcesses, memoryMb = cfg.memoryMb, cpus = cfg.cpus,
    maxOpenFiles = cfg.maxOpenFiles, diskMb = cfg.diskMb,
  }
  if not sb then return nil, err end
  return wrap(sb)
end

function M.connect(_, id)
  local sb, err = sandbox.connect(id)
  if not sb then return nil, err end
  return wrap(sb)
end

local function gone(id, st)
  if st.state == "gone" then
    return errors.new("SANDBOX_GONE", string.format("sandbox %s is gone: %s at %s", id, st.reason or "deleted",
      st.at or "an unknown time"), { reason = st.reason, at = st.at })
  end
  return errors.new("SANDBOX_GONE", string.format("sandbox %s is gone: this host has no record of it (deleted "
    .. "by hand, or more than a week ago)", id))
end

--- After a call failed as unavailable: "resumed" (it was paused; envd is a
-- new client), "running" (it answers now), or nil, err (SANDBOX_GONE, or why
-- it cannot be reached).
function Handle:recover()
  local start = loop.now_ms()
  while true do
    local st = sandbox.status(self.id)
    if st.state == "paused" then
      local sb, err = sandbox.connect(self.id)
      if sb then
        self._sb:close()
        self._sb, self.envd = sb, sb.envd
        self.paused = { reason = st.reason or "paused", at = st.at, resumed_at = os.date("!%Y-%m-%dT%H:%M:%SZ") }
        return "resumed"
      end
      if sandbox.status(self.id).state == "paused" then return nil, err end
    elseif st.state == "running" then
      if self.envd:health { timeout_ms = 2000 } then return "running" end
      if loop.now_ms() - start > M.UNHEALTHY_MS then
        return nil, errors.new("unavailable", "sandbox " .. self.id .. " runs, but its daemon does not answer")
      end
      async.sleep(50)
    else
      return nil, gone(self.id, st)
    end
  end
end

--- true when killed now, false when it was gone already (E2B's answer shape).
function Handle:kill()
  local ok, err = sandbox.kill(self.id)
  if not ok and err.code == "not_found" then return false end
  return ok, err
end

--- true when paused now, false when it already was (E2B's answer shape).
function Handle:pause()
  local running = sandbox.status(self.id).state == "running"
  local ok, err = sandbox.pause(self.id)
  if not ok then return nil, err end
  return running
end

function Handle:close()
  self._sb:close()
end

-- What the host's records say of sandboxes ---------------------------------------------

local function info_of(s)
  local lim = s.limits or {}
  return {
    sandboxId = s.id, state = s.state, metadata = s.metadata or {}, startedAt = s.created_at,
    cpuCount = lim.cpus, memoryMB = lim.memoryMb, network = s.network, onTimeout = s.on_timeout,
    timeoutMs = s.timeout_ms, backend = "local",
  }
end

--- Local sandboxes as E2B lists them, newest first: query.state (a list of
-- "running", "paused"), query.metadata (every pair must match).
function M.list(_, query)
  query = query or {}
  local states = {}
  for _, st in ipairs(query.state or { "running", "paused" }) do states[st] = true end
  local out = {}
  for _, s in ipairs(sandbox.list()) do
    local ok = states[s.state]
    for k, v in pairs(query.metadata or {}) do
      if (s.metadata or {})[k] ~= v then ok = false end
    end
    if ok then table.insert(out, 1, info_of(s)) end
  end
  return out
end

function M.info(_, id)
  for _, s in ipairs(sandbox.list()) do
    if s.id == id then return info_of(s) end
  end
  return nil, errors.new("not_found", "sandbox " .. tostring(id) .. " not found")
end

--- One sample, now (E2B's metrics are a series; a local sandbox keeps none).
function M.metrics(_, id, opts)
  local m, err = metrics.sample(id, opts)
  if not m then return nil, err end
  return { m }
end

function Handle:info() return M.info(nil, self.id) end
function Handle:metrics(opts) return M.metrics(nil, self.id, opts) end

return M
