--- The cloud backend of ctx.e2b: E2B's REST control plane plus envd over HTTPS.
--
-- POST /v2/sandboxes creates, POST /v2/sandboxes/{id}/connect reconnects (and
-- resumes a paused sandbox), POST /sandboxes/{id}/pause pauses (409: already
-- paused), DELETE /sandboxes/{id} kills; every call carries X-API-KEY. The key
-- stays on the host: the sandbox only ever sees its envd access token. envd is
-- reached at https://sandbox.<domain> (E2B's router, which reads the
-- E2b-Sandbox-Id header) or https://49983-<id>.<domain>, or at sandboxUrl /
-- E2B_SANDBOX_URL when set (the SDK's own override).
local envd = require "dsh.envd"
local errors = require "dsh.errors"
local http = require "dsh.http"
local json = require "dsh.json"

local M = { name = "cloud" }

M.ENVD_PORT = 49983
M.ROUTED_DOMAINS = { ["e2b.app"] = true, ["e2b.dev"] = true, ["e2b.pro"] = true, ["e2b-staging.dev"] = true }

local Handle = {}
Handle.__index = Handle

local function api_base(cfg)
  return (cfg.apiUrl or ("https://api." .. cfg.domain)):gsub("/+$", "")
end

local function api_call(cfg, client, method, path, body)
  local res, err = client:fetch {
    method = method, url = api_base(cfg) .. path, timeout_ms = 60000,
    headers = { ["X-API-KEY"] = cfg.apiKey, ["Content-Type"] = "application/json",
      ["User-Agent"] = "dsh/0.1" },
    body = body and json.encode(body) or nil,
  }
  if not res then return nil, errors.new("unavailable", "E2B API unreachable: " .. tostring(err.message)) end
  return res
end

local function api_error(what, res)
  local decoded = json.decode(res.body or "")
  local msg = type(decoded) == "table" and type(decoded.message) == "string" and decoded.message or res.body
  local code = ({ [401] = "unauthenticated", [403] = "permission_denied", [404] = "not_found",
    [409] = "failed_precondition", [429] = "resource_exhausted" })[res.status] or "unknown"
  return errors.new(code, string.format("E2B API %s failed (%d): %s", what, res.status, tostring(msg)))
end

local function envd_url(cfg, id, domain)
  local override = cfg.sandboxUrl or os.getenv("E2B_SANDBOX_URL")
  if override and override ~= "" then return override end
  domain = domain or cfg.domain
  if M.ROUTED_DOMAINS[domain] then return "https://sandbox." .. domain end
  return "https://" .. M.ENVD_PORT .. "-" .. id .. "." .. domain
end

local function handle(cfg, client, data)
  if type(data) ~= "table" or type(data.sandboxID) ~= "string" then
    return nil, errors.new("internal", "E2B API answered without a sandboxID")
  end
  local id = data.sandboxID
  local c = envd.client {
    url = envd_url(cfg, id, type(data.domain) == "string" and data.domain or nil),
    access_token = type(data.envdAccessToken) == "string" and data.envdAccessToken or nil,
    user = "user",
    headers = { ["E2b-Sandbox-Id"] = id, ["E2b-Sandbox-Port"] = tostring(M.ENVD_PORT) },
  }
  return setmetatable({ id = id, envd = c, _cfg = cfg, _api = client }, Handle)
end

local function seconds(ms)
  return math.max(1, math.floor((ms + 999) / 1000))
end

function M.create(cfg)
  local client = http.client()
  local res, err = api_call(cfg, client, "POST", "/v2/sandboxes", {
    templateID = cfg.template or "base",
    timeout = seconds(cfg.timeoutMs),
    metadata = next(cfg.metadata) and cfg.metadata or nil,
    envVars = next(cfg.envs) and cfg.envs or nil,
    secure = true,
    autoPause = cfg.onTimeout == "pause",
    autoResume = { enabled = cfg.onTimeout == "pause" }, -- as the SDK sends lifecycle.autoResume
  })
  if not res then client:close() return nil, err end
  if res.status < 200 or res.status > 299 then client:close() return nil, api_error("create", res) end
  local h, herr = handle(cfg, client, json.decode(res.body))
  if not h then client:close() end
  return h, herr
end

function M.connect(cfg, id)
  local client = http.client()
  local res, err = api_call(cfg, client, "POST", "/v2/sandboxes/" .. id .. "/connect",
    { timeout = seconds(cfg.timeoutMs) })
  if not res then client:close() return nil, err end
  if res.status == 404 then
    client:close()
    return nil, errors.new("not_found", "sandbox " .. id .. " not found")
  end
  if res.status < 200 or res.status > 299 then client:close() return nil, api_error("connect", res) end
  local h, herr = handle(cfg, client, json.decode(res.body))
  if not h then client:close() end
  return h, herr
end

function Handle:kill()
  local res, err = api_call(self._cfg, self._api, "DELETE", "/sandboxes/" .. self.id)
  if not res then return nil, err end
  if res.status == 404 then return false end
  if res.status < 200 or res.status > 299 then return nil, api_error("kill", res) end
  return true
end

--- true when paused now, false when it already was.
function Handle:pause()
  local res, err = api_call(self._cfg, self._api, "POST", "/sandboxes/" .. self.id .. "/pause", {})
  if not res then return nil, err end
  if res.status == 409 then return false end
  if res.status == 404 then return nil, errors.new("not_found", "sandbox " .. self.id .. " not found") end
  if res.status < 200 or res.status > 299 then return nil, api_error("pause", res) end
  return true
end

function Handle:close()
  self.envd:close()
  self._api:close()
end

return M
