--- Config of the ctx.e2b owner: defaults, validation, messages (reference §2.1).
--
-- Raises on bad config, synchronously, before any sandbox is created or
-- contacted (an unknown key too, naming the closest known one). Returns the
-- normalised config. The local backend's limits (maxProcesses, memoryMb,
-- cpus) are dsh.sandbox's, checked with its bounds; on this host's defaults
-- when absent.
local errors = require "dsh.errors"
local limits = require "dsh.sandbox.limits"
local schema = require "dsh.schema"
local M = {}

M.KEYS = {
  "backend", "cwd", "timeoutMs", "onTimeout", "onDispose", "network", "envs", "metadata", "sandboxId",
  "template", "apiKey", "apiUrl", "domain", "sandboxUrl", "maxProcesses", "memoryMb", "cpus", "disposeTimeoutMs",
}
M.LOCAL_ONLY = { "maxProcesses", "memoryMb", "cpus" }

M.DEFAULTS = {
  backend = "local",
  cwd = "/home/user/workspace",
  timeoutMs = 300000,
  onTimeout = "pause",
  onDispose = "kill",
  network = true,
  disposeTimeoutMs = 4000, -- then the disposition is applied from outside: dispose ends within about 5 s
}

local function fail(msg)
  errors.misuse("dsh-e2b", "%s", msg)
end

local function string_map(name, v)
  if v == nil then return {} end
  if type(v) ~= "table" then fail(name .. " must be a table of strings") end
  for k, val in pairs(v) do
    if type(k) ~= "string" or type(val) ~= "string" then fail(name .. " must map strings to strings") end
  end
  return v
end

function M.validate(cfg)
  schema.keys("dsh-e2b", cfg, M.KEYS)
  local out = {}
  out.backend = cfg.backend or M.DEFAULTS.backend
  if out.backend ~= "local" and out.backend ~= "cloud" then
    fail('backend must be "local" or "cloud"')
  end
  if out.backend == "cloud" then
    local key = cfg.apiKey
    if key == nil or key == "" then key = os.getenv("E2B_API_KEY") end
    if type(key) ~= "string" or key == "" then fail("configure apiKey or set E2B_API_KEY") end
    out.apiKey = key
    out.apiUrl = cfg.apiUrl or os.getenv("E2B_API_URL")
    out.domain = cfg.domain or os.getenv("E2B_DOMAIN") or "e2b.app"
    out.sandboxUrl = cfg.sandboxUrl
    for _, k in ipairs { "apiUrl", "domain", "sandboxUrl" } do
      if out[k] ~= nil and type(out[k]) ~= "string" then fail(k .. " must be a string") end
    end
  elseif cfg.apiKey ~= nil and type(cfg.apiKey) ~= "string" then
    fail("apiKey must be a string")
  end
  if cfg.sandboxId ~= nil then
    if type(cfg.sandboxId) ~= "string" or cfg.sandboxId == "" then
      fail("sandboxId must be non-empty when provided")
    end
    out.sandboxId = cfg.sandboxId
  end
  if cfg.template ~= nil then
    if out.sandboxId then fail("template applies only when creating; omit it when sandboxId reconnects") end
    if type(cfg.template) ~= "string" or cfg.template == "" then fail("template must be a non-empty string") end
    if out.backend == "local" then
      fail("template is not supported by the local backend (it has one image: the host's system)")
    end
    out.template = cfg.template
  end
  local cwd = cfg.cwd == nil and M.DEFAULTS.cwd or cfg.cwd
  if type(cwd) ~= "string" or cwd:sub(1, 1) ~= "/" or cwd:find("%z") then
    fail("cwd must be an absolute Linux path: " .. tostring(cwd))
  end
  out.cwd = cwd == "/" and "/" or cwd:gsub("/+$", "")
  local t = cfg.timeoutMs == nil and M.DEFAULTS.timeoutMs or cfg.timeoutMs
  -- The reference accepts fractions; whole milliseconds are required here (§8).
  if type(t) ~= "number" or t ~= t or t <= 0 or t == math.huge or t % 1 ~= 0 then
    fail("timeoutMs must be a positive finite number of whole milliseconds")
  end
  out.timeoutMs = t
  out.onTimeout = cfg.onTimeout or M.DEFAULTS.onTimeout
  if out.onTimeout ~= "kill" and out.onTimeout ~= "pause" then fail('onTimeout must be "kill" or "pause"') end
  out.onDispose = cfg.onDispose or M.DEFAULTS.onDispose
  if out.onDispose ~= "kill" and out.onDispose ~= "pause" and out.onDispose ~= "leave" then
    fail('onDispose must be "kill", "pause" or "leave"')
  end
  if cfg.network ~= nil and type(cfg.network) ~= "boolean" then fail("network must be a boolean") end
  out.network = cfg.network ~= false
  out.disposeTimeoutMs = schema.integer("dsh-e2b", cfg, "disposeTimeoutMs", M.DEFAULTS.disposeTimeoutMs, 1,
    600000)
  out.envs = string_map("envs", cfg.envs)
  out.metadata = string_map("metadata", cfg.metadata)
  for _, k in ipairs(M.LOCAL_ONLY) do
    if cfg[k] ~= nil and out.backend ~= "local" then
      fail(k .. " applies only to the local backend (an E2B sandbox's size is its template's)")
    end
  end
  out.maxProcesses = schema.integer("dsh-e2b", cfg, "maxProcesses", nil, limits.MIN_MAX_PROCESSES,
    limits.MAX_MAX_PROCESSES)
  out.memoryMb = schema.integer("dsh-e2b", cfg, "memoryMb", nil, limits.MIN_MEMORY_MB, 2 ^ 40)
  out.cpus = schema.number("dsh-e2b", cfg, "cpus", nil, 0.01, 4096)
  return out
end

return M
