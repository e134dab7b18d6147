--- The cloud backend of ctx.e2b: E2B's REST control plane plus envd over HTTPS.
--
-- POST /v2/sandboxes creates, POST /v2/sandboxes/{id}/connect reconnects (and
-- resumes a paused sandbox), POST /sandboxes/{id}/pause pauses (409: already
-- paused), DELETE /sandboxes/{id} kills; every call carries X-API-KEY. The key
-- stays on the host: the sandbox only ever sees its envd access token. envd is
-- reached at https://sandbox.<domain> (E2B's router, which reads the
-- E2b-Sandbox-Id header) or https://49983-<id>.<domain>, or at sandboxUrl /
-- E2B_SANDBOX_URL when set (the SDK's own override).
--
-- E2B's timeout is a deadline, not an idle time: work through the context
-- counts as activity by extending it (POST /sandboxes/{id}/timeout, as the
-- SDK's setTimeout does) when half of it has passed since the last
-- extension, and every half timeout while a stream is open. recover() (for
-- dsh.providers.e2b.guard) asks connect, which resumes a paused sandbox.
local async = require "dsh.async"
local envd = require "dsh.envd"
local errors = require "dsh.errors"
local http = require "dsh.http"
local json = require "dsh.json"
local loop = require "dsh.loop"

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

local function envd_client(cfg, data)
  if type(data) ~= "table" or type(data.sandboxID) ~= "string" then
    return nil, errors.new("internal", "E2B API answered without a sandboxID")
  end
  local id = data.sandboxID
  return envd.client {
    url = envd_url(cfg, id, type(data.domain) == "string" and data.domain or nil),
    access_token = type(data.envdAccessToken) == "string" and data.envdAccessToken or nil,
    user = "user",
    headers = { ["E2b-Sandbox-Id"] = id, ["E2b-Sandbox-Port"] = tostring(M.ENVD_PORT) },
  }, id
end

local function handle(cfg, client, data)
  local c, id = envd_client(cfg, data)
  if not c then return nil, id end
  local now = loop.now_ms()
  return setmetatable({ id = id, envd = c, _cfg = cfg, _api = client, _extended_at = now, _active_at = now,
    _holds = 0 }, Handle)
end

local function seconds(ms)
  return math.max(1, math.floor((ms + 999) / 1000))
end

local function iso(ms_ago)
  return os.date("!%Y-%m-%dT%H:%M:%SZ", os.time() - math.floor((ms_ago or 0) / 1000))
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

-- Activity ----------------------------------------------------------------------

--- A call through the context: extends the timeout when half of it has
-- passed since the last extension (in the background; at most one at a time).
function Handle:touch()
  local now = loop.now_ms()
  self._before, self._active_at = self._active_at, now
  if self._extending or self._closed or now - self._extended_at < self._cfg.timeoutMs / 2 then return end
  self._extended_at = now
  self._extending = async.run(function()
    api_call(self._cfg, self._api, "POST", "/sandboxes/" .. self.id .. "/timeout",
      { timeout = seconds(self._cfg.timeoutMs) })
    self._extending = nil
  end)
end

--- A stream opened: while any is, the timeout is extended every half timeout.
function Handle:hold()
  self._holds = self._holds + 1
  if self._holds == 1 and not self._closed then
    self._ticker = self._ticker or loop.timer(function() self:touch() end)
    local period = math.max(500, math.floor(self._cfg.timeoutMs / 2))
    self._ticker:start(period, period)
  end
  self:touch()
end

function Handle:release()
  self._holds = self._holds - 1
  if self._holds == 0 and self._ticker then self._ticker:stop() end
end

-- Recovery ----------------------------------------------------------------------

function Handle:_gone()
  -- the call that found it gone touched too: what counts is the one before
  local quiet = loop.now_ms() - (self._before or self._active_at)
  local why = "it was killed, or its timeout ended it"
  if self._cfg.onTimeout == "kill" and quiet >= self._cfg.timeoutMs then
    why = string.format("its timeout (%d ms, then kill) had passed since the last call through this context",
      self._cfg.timeoutMs)
  end
  return errors.new("SANDBOX_GONE", string.format("sandbox %s is gone: E2B no longer knows it (%s; last call at %s,"
    .. " noticed at %s)", self.id, why, iso(quiet), iso(0)))
end

--- After a call failed as unavailable: connect (which resumes a paused
-- sandbox): "resumed" (envd is a new client), "running", or nil, err
-- (SANDBOX_GONE, or the API's failure).
function Handle:recover()
  local res, err = api_call(self._cfg, self._api, "POST", "/v2/sandboxes/" .. self.id .. "/connect",
    { timeout = seconds(self._cfg.timeoutMs) })
  if not res then return nil, err end
  if res.status == 404 then return nil, self:_gone() end
  if res.status < 200 or res.status > 299 then return nil, api_error("connect", res) end
  self._extended_at = loop.now_ms()
  if res.status ~= 201 then return "running" end
  local c, cerr = envd_client(self._cfg, json.decode(res.body))
  if not c then return nil, cerr end
  self.envd:close()
  self.envd = c
  self.paused = { reason = "had paused (its timeout, or a pause from elsewhere)", resumed_at = iso(0) }
  return "resumed"
end

function Handle:close()
  self._closed = true
  if self._ticker then
    self._ticker:close()
    self._ticker = nil
  end
  if self._extending then pcall(self._extending.await, self._extending) end
  self.envd:close()
  self._api:close()
end

return M
