--- Config of the ctx.e2b owner: defaults, validation, messages (reference §2.1).
--
-- Raises on bad config, synchronously, before any sandbox is created or
-- contacted (an unknown key too, naming the closest known one). Returns the
-- normalised config. The local backend's limits (maxProcesses, memoryMb,
-- cpus) are dsh.sandbox's, checked with its bounds; on this host's defaults
-- when absent.
--
-- Three backends: "local" (a dsh.sandbox), "cloud" (E2B's control plane:
-- apiKey, apiUrl, domain, sandboxUrl, template, autoResume) and "envd" (no
-- control plane: an envd, or a dshd, at envdUrl, as E2B's SDK in debug
-- mode). A cloud config with debug = true, or with E2B_DEBUG=true in the
-- environment, is an envd config as the SDK's debug mode has it: envd at
-- sandboxUrl, E2B_SANDBOX_URL or http://localhost:49983, no API key, and
-- kill, pause and timeouts doing nothing.
local api = require "dsh.providers.e2b.cloud_api"
local errors = require "dsh.errors"
local limits = require "dsh.sandbox.limits"
local schema = require "dsh.schema"
local M = {}

M.KEYS = {
  "backend", "cwd", "runtimeRoot", "timeoutMs", "onTimeout", "onDispose", "network", "envs", "metadata", "sandboxId",
  "template", "apiKey", "apiUrl", "domain", "sandboxUrl", "maxProcesses", "memoryMb", "cpus", "maxOpenFiles", "diskMb",
  "disposeTimeoutMs",
  "autoResume", "debug", "envdUrl", "envdAccessToken",
}
M.LOCAL_ONLY = { "maxProcesses", "memoryMb", "cpus", "maxOpenFiles", "diskMb" }
M.ENVD_ONLY = { "envdUrl", "envdAccessToken" }
-- What an envd backend cannot do without a control plane.
M.NOT_ENVD = { "timeoutMs", "onTimeout", "template", "autoResume", "envs", "metadata", "network" }
M.DEBUG_ENVD_URL = "http://localhost:49983"

M.DEFAULTS = {
  backend = "local",
  cwd = "/home/user/workspace",
  -- outside the workspace, unlike the reference's <cwd>/.dsh-e2b (docs/decisions.md)
  runtimeRoot = "/tmp/.dsh-e2b",
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

-- cwd and the runtime root (the providers' own files, outside the workspace).
local function paths(cfg, out)
  local cwd = cfg.cwd == nil and M.DEFAULTS.cwd or cfg.cwd
  if type(cwd) ~= "string" or cwd:sub(1, 1) ~= "/" or cwd:find("%z") then
    fail("cwd must be an absolute Linux path: " .. tostring(cwd))
  end
  out.cwd = cwd == "/" and "/" or cwd:gsub("/+$", "")
  local root = cfg.runtimeRoot == nil and M.DEFAULTS.runtimeRoot or cfg.runtimeRoot
  if type(root) ~= "string" or root:sub(1, 1) ~= "/" or root:find("%z") or root:match("^/+$") then
    fail("runtimeRoot must be an absolute Linux path other than /: " .. tostring(root))
  end
  out.runtimeRoot = root:gsub("/+$", "")
  if out.runtimeRoot == out.cwd then fail("runtimeRoot must not be cwd (" .. out.cwd .. ")") end
end

function M.validate(cfg)
  schema.keys("dsh-e2b", cfg, M.KEYS)
  local out = {}
  out.backend = cfg.backend or M.DEFAULTS.backend
  if out.backend ~= "local" and out.backend ~= "cloud" and out.backend ~= "envd" then
    fail('backend must be "local", "cloud" or "envd"')
  end
  if cfg.debug ~= nil and type(cfg.debug) ~= "boolean" then fail("debug must be a boolean") end
  if cfg.debug ~= nil and out.backend ~= "cloud" then fail("debug applies only to the cloud backend") end
  if out.backend == "cloud" and (cfg.debug == true
    or (cfg.debug == nil and (os.getenv("E2B_DEBUG") or ""):lower() == "true")) then
    return M.debug(cfg)
  end
  for _, k in ipairs(M.ENVD_ONLY) do
    if cfg[k] ~= nil and out.backend ~= "envd" then fail(k .. ' applies only to the envd backend') end
  end
  if out.backend == "envd" then return M.envd(cfg) end
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
  paths(cfg, out)
  local t = cfg.timeoutMs == nil and M.DEFAULTS.timeoutMs or cfg.timeoutMs
  -- The reference accepts fractions; whole milliseconds are required here (§8).
  if type(t) ~= "number" or t ~= t or t <= 0 or t == math.huge or t % 1 ~= 0 then
    fail("timeoutMs must be a positive finite number of whole milliseconds")
  end
  if out.backend == "cloud" and api.seconds(t) > api.MAX_TIMEOUT_S then
    fail(string.format("timeoutMs must be at most %d: E2B takes whole seconds in a 32-bit integer",
      api.MAX_TIMEOUT_S * 1000))
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
  if cfg.autoResume ~= nil then
    if type(cfg.autoResume) ~= "boolean" then fail("autoResume must be a boolean") end
    if out.backend ~= "cloud" then
      fail("autoResume applies only to the cloud backend (a local sandbox is resumed by the next call"
        .. " through its context)")
    end
    if cfg.autoResume and out.onTimeout ~= "pause" then
      fail('autoResume can only be true when onTimeout is "pause"')
    end
    out.autoResume = cfg.autoResume
  end
  -- the sandbox's environment: a name the subprocess seam scrubs would be
  -- dropped from every process anyway, so it never leaves the host (not to
  -- dshd's memory, nor to E2B's control plane)
  out.disposeTimeoutMs = schema.integer("dsh-e2b", cfg, "disposeTimeoutMs", M.DEFAULTS.disposeTimeoutMs, 1,
    600000)
  out.envs = require("dsh.subprocess").scrub_env(string_map("envs", cfg.envs))
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
  out.maxOpenFiles = schema.integer("dsh-e2b", cfg, "maxOpenFiles", nil, limits.MIN_MAX_OPEN_FILES,
    limits.MAX_MAX_OPEN_FILES)
  out.diskMb = schema.integer("dsh-e2b", cfg, "diskMb", nil, limits.MIN_DISK_MB, 2 ^ 40)
  return out
end

local function common_envd(cfg, out)
  paths(cfg, out)
  if cfg.sandboxId ~= nil and (type(cfg.sandboxId) ~= "string" or cfg.sandboxId == "") then
    fail("sandboxId must be non-empty when provided")
  end
  out.sandboxId = cfg.sandboxId
  for _, k in ipairs(M.LOCAL_ONLY) do
    if cfg[k] ~= nil then fail(k .. " applies only to the local backend") end
  end
  out.timeoutMs, out.onTimeout, out.network, out.envs, out.metadata = M.DEFAULTS.timeoutMs, "kill", true, {}, {}
  out.disposeTimeoutMs = schema.integer("dsh-e2b", cfg, "disposeTimeoutMs", M.DEFAULTS.disposeTimeoutMs, 1,
    600000)
  return out
end

--- The envd backend: an envd (or dshd) at envdUrl, no control plane.
function M.envd(cfg)
  local out = { backend = "envd" }
  for _, k in ipairs(M.NOT_ENVD) do
    if cfg[k] ~= nil then
      fail(k .. " needs a control plane: the envd backend attaches to a sandbox that exists (use the cloud or"
        .. " local backend)")
    end
  end
  for _, k in ipairs { "apiKey", "apiUrl", "domain", "sandboxUrl" } do
    if cfg[k] ~= nil then fail(k .. " applies only to the cloud backend (the envd backend takes envdUrl)") end
  end
  local url = cfg.envdUrl
  if url == nil then url = os.getenv("E2B_SANDBOX_URL") end
  if url == nil or url == "" then url = M.DEBUG_ENVD_URL end
  if type(url) ~= "string" or not url:match("^https?://[^/]") then
    fail("envdUrl must be an http:// or https:// URL: " .. tostring(url))
  end
  out.envdUrl = url
  if cfg.envdAccessToken ~= nil and (type(cfg.envdAccessToken) ~= "string" or cfg.envdAccessToken == "") then
    fail("envdAccessToken must be a non-empty string")
  end
  out.envdAccessToken = cfg.envdAccessToken
  out.onDispose = cfg.onDispose or "leave"
  if out.onDispose ~= "leave" then
    fail('onDispose must be "leave" with the envd backend: there is no control plane to kill or pause it')
  end
  return common_envd(cfg, out)
end

--- A cloud config in E2B's debug mode: the envd backend as the SDK's debug
-- mode has it (envd at sandboxUrl or E2B_SANDBOX_URL or localhost:49983;
-- kill, pause and timeouts do nothing).
function M.debug(cfg)
  local out = { backend = "envd", debug = true }
  local url = cfg.sandboxUrl or os.getenv("E2B_SANDBOX_URL")
  if url == nil or url == "" then url = M.DEBUG_ENVD_URL end
  if type(url) ~= "string" then fail("sandboxUrl must be a string") end
  out.envdUrl = url
  if cfg.envdAccessToken ~= nil and (type(cfg.envdAccessToken) ~= "string" or cfg.envdAccessToken == "") then
    fail("envdAccessToken must be a non-empty string")
  end
  out.envdAccessToken = cfg.envdAccessToken
  out.onDispose = cfg.onDispose or M.DEFAULTS.onDispose
  if out.onDispose ~= "kill" and out.onDispose ~= "pause" and out.onDispose ~= "leave" then
    fail('onDispose must be "kill", "pause" or "leave"')
  end
  return common_envd(cfg, out)
end

return M
