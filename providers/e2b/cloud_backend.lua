--- The cloud backend of ctx.e2b: E2B's REST control plane plus envd over HTTPS.
--
-- POST /sandboxes creates, POST /sandboxes/{id}/connect reconnects (200: it
-- was running, 201: it was resumed; 409 while it changes state: asked
-- again), POST /sandboxes/{id}/pause pauses (409: already paused, or
-- changing state: the record says which), POST /sandboxes/{id}/timeout
-- moves the deadline, DELETE /sandboxes/{id} kills, GET /v2/sandboxes lists,
-- GET /sandboxes/{id} and /sandboxes/{id}/metrics describe one (what every
-- call shares, retries and the API key's refusal, is dsh.providers.e2b.cloud_api).
-- The unversioned create and connect are the ones every E2B server has
-- served (docs/decisions.md, "Cloud backend"). The key stays on the host:
-- the sandbox only ever sees its envd access token. envd is reached at
-- https://sandbox.<domain> (E2B's router, which reads the E2b-Sandbox-Id
-- header) or https://49983-<id>.<domain>, or at sandboxUrl / E2B_SANDBOX_URL
-- when set (the SDK's own override).
--
-- A template's envd must serve what dsh uses on every sandbox (ENVD_FEATURES,
-- required): an older one is refused at create (the sandbox is killed, as
-- the SDK does with a template it cannot use) and at connect, naming the
-- features and the versions they need.
--
-- E2B's timeout is a deadline, not an idle time: work through the context
-- counts as activity by extending it (POST /sandboxes/{id}/timeout, as the
-- SDK's setTimeout does) when half of it has passed since the last
-- extension, and every half timeout while a stream is open. An extension
-- that failed is tried again by the next call (its error is kept in
-- handle.timeout_error). recover() (for dsh.providers.e2b.session) asks
-- connect, which resumes a paused sandbox.
local api = require "dsh.providers.e2b.cloud_api"
local async = require "dsh.async"
local envd = require "dsh.envd"
local errors = require "dsh.errors"
local loop = require "dsh.core.loop"

local M = { name = "cloud" }

M.ENVD_PORT = 49983
M.ROUTED_DOMAINS = { ["e2b.app"] = true, ["e2b.dev"] = true, ["e2b.pro"] = true, ["e2b-staging.dev"] = true }
M.MAX_LIST_PAGES = 50

-- What dsh asks of a template's envd, with the version that brought it
-- (E2B's SDK gates the same features on the same versions).
M.ENVD_FEATURES = {
  { version = "0.3.0", required = true, feature = "starting a process without stdin (the stdin flag)" },
  { version = "0.5.2", required = true, feature = "closing a process's stdin (commands fed on stdin)" },
  { version = "0.5.7", required = true, feature = "file writes as application/octet-stream (ctx.fs writes)" },
  { version = "0.6.2", required = false, feature = "file metadata on upload (X-Metadata-*)" },
  { version = "0.6.3", required = false, feature = "watch events with entry info (includeEntry)" },
}

local Handle = {}
Handle.__index = Handle

local function parse_version(v)
  if type(v) ~= "string" then return nil end
  local a, b, c = v:match("^v?(%d+)%.(%d+)%.(%d+)")
  if not a then return nil end
  return { tonumber(a), tonumber(b), tonumber(c) }
end

--- -1, 0 or 1 as version a is older than, the same as or newer than b; nil when one is unreadable.
function M.compare_versions(a, b)
  local x, y = parse_version(a), parse_version(b)
  if not x or not y then return nil end
  for i = 1, 3 do
    if x[i] ~= y[i] then return x[i] < y[i] and -1 or 1 end
  end
  return 0
end

--- The features of ENVD_FEATURES an envd of version v lacks: required, optional (lists of entries).
function M.envd_missing(v)
  local required, optional = {}, {}
  for _, f in ipairs(M.ENVD_FEATURES) do
    local c = M.compare_versions(v, f.version)
    if c == nil or c < 0 then
      local list = f.required and required or optional
      list[#list + 1] = f
    end
  end
  return required, optional
end

-- nil when dsh can use an envd of this version, else the error saying why not.
local function envd_refusal(version, template)
  local what = template and ('template "' .. template .. '"') or "the sandbox"
  if type(version) ~= "string" then
    return errors.new("internal", "E2B API answered without the sandbox's envdVersion")
  end
  if not parse_version(version) then
    return errors.new("failed_precondition", string.format("%s runs envd %q, a version dsh cannot read", what,
      version))
  end
  local required = M.envd_missing(version)
  if #required == 0 then return nil end
  local needs = {}
  for _, f in ipairs(required) do needs[#needs + 1] = f.feature .. " needs envd >= " .. f.version end
  return errors.new("failed_precondition", string.format("%s runs envd %s, too old for dsh: %s; rebuild the "
    .. "template on a current E2B base image", what, version, table.concat(needs, "; ")),
    { envdVersion = version })
end
M.envd_refusal = envd_refusal

local function envd_url(cfg, id, domain)
  local override = cfg.sandboxUrl or os.getenv("E2B_SANDBOX_URL")
  if override and override ~= "" then return override end
  domain = domain or cfg.domain
  if M.ROUTED_DOMAINS[domain] then return "https://sandbox." .. domain end
  return "https://" .. M.ENVD_PORT .. "-" .. id .. "." .. domain
end

-- The envd client for E2B's Sandbox answer, or nil, err when it is not one.
local function envd_client(cfg, data)
  if type(data) ~= "table" or type(data.sandboxID) ~= "string" or data.sandboxID == "" then
    return nil, errors.new("internal", "E2B API answered without a sandboxID")
  end
  if data.envdAccessToken ~= nil and type(data.envdAccessToken) ~= "string" then
    return nil, errors.new("internal", "E2B API answered an envdAccessToken that is not a string")
  end
  local id = data.sandboxID
  return envd.client {
    url = envd_url(cfg, id, type(data.domain) == "string" and data.domain or nil),
    access_token = data.envdAccessToken,
    user = "user",
    headers = { ["E2b-Sandbox-Id"] = id, ["E2b-Sandbox-Port"] = tostring(M.ENVD_PORT) },
  }, id
end

-- asked_ms: when the call that set the sandbox's timeout (create, connect)
-- was sent; its deadline is no earlier than that plus timeoutMs.
local function handle(cfg, client, data, asked_ms)
  local c, id = envd_client(cfg, data)
  if not c then return nil, id end
  local now = loop.now_ms()
  return setmetatable({ id = id, envd = c, envdVersion = data.envdVersion, _cfg = cfg, _api = client,
    _extended_at = now, _deadline_from = asked_ms, _active_at = now, _holds = 0 }, Handle)
end

local function iso(ms_ago)
  return os.date("!%Y-%m-%dT%H:%M:%SZ", os.time() - math.floor((ms_ago or 0) / 1000))
end

local function path_id(id)
  return (id:gsub("[^%w%-_.~]", function(c) return string.format("%%%02X", c:byte()) end))
end

-- POST /sandboxes/{id}/connect until it is not changing state:
-- {status (200|201), data} or nil, err (404 is not_found).
local function connect_call(client, cfg, id)
  local res, err
  for n = 1, api.RETRY.attempts do
    res, err = client:call("connect", "POST", "/sandboxes/" .. path_id(id) .. "/connect",
      { timeout = api.seconds(cfg.timeoutMs) })
    if not res then return nil, err end
    if res.status ~= 409 or n == api.RETRY.attempts then break end
    async.sleep(api.backoff_ms(n))
  end
  if res.status == 200 or res.status == 201 then return res end
  if res.status == 404 then
    return nil, errors.new("not_found", "sandbox " .. id .. " not found")
  end
  if res.status == 409 then
    local e = api.error("connect", res, { status = 409 })
    e.message = string.format("%s (the sandbox was still changing state after %d attempts)", e.message,
      api.RETRY.attempts)
    return nil, e
  end
  return nil, api.error("connect", res, { status = res.status })
end

local function create_body(cfg)
  local body = {
    templateID = cfg.template or "base",
    timeout = api.seconds(cfg.timeoutMs),
    metadata = next(cfg.metadata) and cfg.metadata or nil,
    envVars = next(cfg.envs) and cfg.envs or nil,
    secure = true,
    autoPause = cfg.onTimeout == "pause",
  }
  -- as the SDK: only what was asked for
  if cfg.autoResume ~= nil then body.autoResume = { enabled = cfg.autoResume } end
  if cfg.network == false then body.allow_internet_access = false end
  return body
end
M.create_body = create_body

function M.create(cfg)
  local client = api.new(cfg)
  local asked = loop.now_ms()
  local res, err = client:call("create", "POST", "/sandboxes", create_body(cfg))
  if res and res.status ~= 201 then res, err = nil, api.error("create", res, { status = res.status }) end
  if not res then client:close() return nil, err end
  local h, herr = handle(cfg, client, res.data, asked)
  if not h then
    -- an answer we cannot use may still have made a sandbox
    if type(res.data) == "table" and type(res.data.sandboxID) == "string" then
      client:call("kill", "DELETE", "/sandboxes/" .. path_id(res.data.sandboxID))
    end
    client:close()
    return nil, herr
  end
  local refusal = envd_refusal(h.envdVersion, cfg.template or "base")
  if refusal then
    h:kill()
    h:close()
    return nil, refusal
  end
  return h
end

function M.connect(cfg, id)
  local client = api.new(cfg)
  local asked = loop.now_ms()
  local res, err = connect_call(client, cfg, id)
  if not res then client:close() return nil, err end
  local h, herr = handle(cfg, client, res.data, asked)
  if not h then client:close() return nil, herr end
  local refusal = envd_refusal(h.envdVersion)
  if refusal then h:close() return nil, refusal end
  return h
end

--- true when killed now, false when E2B no longer knew it.
function Handle:kill()
  local res, err = self._api:call("kill", "DELETE", "/sandboxes/" .. path_id(self.id))
  if not res then return nil, err end
  if res.status == 404 then return false end
  if res.status ~= 204 then return nil, api.error("kill", res, { status = res.status }) end
  return true
end

--- true when paused now, false when it already was.
function Handle:pause()
  for n = 1, api.RETRY.attempts do
    local res, err = self._api:call("pause", "POST", "/sandboxes/" .. path_id(self.id) .. "/pause", {})
    if not res then return nil, err end
    if res.status == 204 then return true end
    if res.status == 404 then return nil, errors.new("not_found", "sandbox " .. self.id .. " not found") end
    if res.status ~= 409 then return nil, api.error("pause", res, { status = res.status }) end
    -- 409: already paused, or changing state (pausing, resuming): the record says which
    local info = self:info()
    if info and info.state == "paused" then return false end
    if n == api.RETRY.attempts then return nil, api.error("pause", res, { status = 409 }) end
    async.sleep(api.backoff_ms(n))
  end
end

--- POST /sandboxes/{id}/timeout: the sandbox ends timeout_ms from now.
-- true, or nil, err (not_found: it is not running, paused or gone).
function Handle:set_timeout(timeout_ms)
  local res, err = self._api:call("setTimeout", "POST", "/sandboxes/" .. path_id(self.id) .. "/timeout",
    { timeout = api.seconds(timeout_ms) })
  if not res then return nil, err end
  if res.status == 204 then return true end
  if res.status == 404 then
    return nil, errors.new("not_found", "sandbox " .. self.id .. " is not running (paused or gone): its "
      .. "timeout was not moved (E2B API setTimeout: " .. api.message_of(res) .. ")")
  end
  return nil, api.error("setTimeout", res, { status = res.status })
end

-- Activity ----------------------------------------------------------------------

--- A call through the context: extends the timeout when half of it has
-- passed since the last extension (in the background; at most one at a time).
function Handle:touch()
  local now = loop.now_ms()
  self._before, self._active_at = self._active_at, now
  if self._extending or self._closed or now - self._extended_at < self._cfg.timeoutMs / 2 then return end
  local previous = self._extended_at
  self._extended_at = now
  self._extending = async.run(function()
    local ok, err = self:set_timeout(self._cfg.timeoutMs)
    if ok then
      self._deadline_from = now
      self.timeout_error = nil
    else
      -- not extended: the next call asks again
      self._extended_at = previous
      self.timeout_error = err
    end
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
  local now = loop.now_ms()
  local quiet = now - (self._before or self._active_at)
  local why = "it was killed, or its timeout ended it"
  -- the deadline set last (by the call sent at _deadline_from) had passed:
  -- how long the calls since took does not change that
  if self._cfg.onTimeout == "kill" and now - self._deadline_from >= self._cfg.timeoutMs then
    why = string.format("its timeout (%d ms, then kill) had passed since this context last set it",
      self._cfg.timeoutMs)
  end
  return errors.new("SANDBOX_GONE", string.format("sandbox %s is gone: E2B no longer knows it (%s; last call at %s,"
    .. " noticed at %s)", self.id, why, iso(quiet), iso(0)))
end

--- After a call failed as unavailable: connect (which resumes a paused
-- sandbox): "resumed" (envd is a new client), "running", or nil, err
-- (SANDBOX_GONE, or the API's failure).
function Handle:recover()
  local asked = loop.now_ms()
  local res, err = connect_call(self._api, self._cfg, self.id)
  if not res then
    if err.code == "not_found" then return nil, self:_gone() end
    return nil, err
  end
  self._extended_at, self._deadline_from = loop.now_ms(), asked
  if res.status ~= 201 then return "running" end
  local c, cerr = envd_client(self._cfg, res.data)
  if not c then return nil, cerr end
  self.envd:close()
  self.envd = c
  self.paused = { reason = "had paused (its timeout, or a pause from elsewhere)", resumed_at = iso(0) }
  return "resumed"
end

-- What E2B says of sandboxes ---------------------------------------------------------

local function info_of(d)
  local info = {
    sandboxId = d.sandboxID, state = d.state, templateId = d.templateID, name = d.alias,
    metadata = type(d.metadata) == "table" and d.metadata or {}, startedAt = d.startedAt, endAt = d.endAt,
    envdVersion = d.envdVersion, cpuCount = d.cpuCount, memoryMB = d.memoryMB, diskSizeMB = d.diskSizeMB,
    backend = "cloud",
  }
  -- false is an answer too: only what is not a boolean is left out
  if type(d.allowInternetAccess) == "boolean" then info.network = d.allowInternetAccess end
  if type(d.lifecycle) == "table" then
    info.onTimeout = d.lifecycle.onTimeout
    if type(d.lifecycle.autoResume) == "boolean" then info.autoResume = d.lifecycle.autoResume end
  end
  return info
end

local function info_call(client, id)
  local res, err = client:call("getInfo", "GET", "/sandboxes/" .. path_id(id))
  if not res then return nil, err end
  if res.status == 404 then return nil, errors.new("not_found", "sandbox " .. id .. " not found") end
  if res.status ~= 200 or type(res.data) ~= "table" then return nil, api.error("getInfo", res) end
  local info = info_of(res.data)
  local _, optional = M.envd_missing(info.envdVersion)
  info.envdMissing = {}
  for _, f in ipairs(optional) do info.envdMissing[#info.envdMissing + 1] = f.feature end
  return info
end

local function enc(s)
  return (tostring(s):gsub("[^%w%-_.~]", function(c) return string.format("%%%02X", c:byte()) end))
end

local function metrics_call(client, id, opts)
  opts = opts or {}
  local q = {}
  if opts.start then q[#q + 1] = "start=" .. math.floor(opts.start) end
  if opts["end"] then q[#q + 1] = "end=" .. math.floor(opts["end"]) end
  local res, err = client:call("getMetrics", "GET", "/sandboxes/" .. path_id(id) .. "/metrics",
    nil, { query = table.concat(q, "&") })
  if not res then return nil, err end
  if res.status == 404 then return nil, errors.new("not_found", "sandbox " .. id .. " not found") end
  if res.status ~= 200 or type(res.data) ~= "table" then return nil, api.error("getMetrics", res) end
  local out = {}
  for _, m in ipairs(res.data) do
    if type(m) == "table" then
      out[#out + 1] = { timestamp = m.timestamp, timestampUnix = m.timestampUnix, cpuCount = m.cpuCount,
        cpuUsedPct = m.cpuUsedPct, memUsed = m.memUsed, memTotal = m.memTotal, memCache = m.memCache,
        diskUsed = m.diskUsed, diskTotal = m.diskTotal }
    end
  end
  return out
end

local function list_call(client, query)
  query = query or {}
  local q = { "limit=100" }
  if query.state then q[#q + 1] = "state=" .. table.concat(query.state, ",") end
  if query.metadata and next(query.metadata) then
    local pairs_ = {}
    for k, v in pairs(query.metadata) do pairs_[#pairs_ + 1] = enc(k) .. "=" .. enc(v) end
    table.sort(pairs_)
    q[#q + 1] = "metadata=" .. enc(table.concat(pairs_, "&"))
  end
  local out, token = {}, nil
  for _ = 1, M.MAX_LIST_PAGES do
    local qs = table.concat(q, "&") .. (token and ("&nextToken=" .. enc(token)) or "")
    local res, err = client:call("list", "GET", "/v2/sandboxes", nil, { query = qs })
    if not res then return nil, err end
    if res.status ~= 200 or type(res.data) ~= "table" then return nil, api.error("list", res) end
    for _, d in ipairs(res.data) do
      if type(d) == "table" then out[#out + 1] = info_of(d) end
    end
    token = res.headers and res.headers["x-next-token"]
    if not token or token == "" then return out end
  end
  return nil, errors.new("resource_exhausted", string.format("E2B API list: more than %d pages of sandboxes",
    M.MAX_LIST_PAGES))
end

function Handle:info() return info_call(self._api, self.id) end
function Handle:metrics(opts) return metrics_call(self._api, self.id, opts) end

-- Without a handle (the CLI, dsh.providers.e2b.list): cfg as for create.
local function with_client(cfg, fn, ...)
  local client = api.new(cfg)
  local a, b = fn(client, ...)
  client:close()
  return a, b
end

function M.list(cfg, query) return with_client(cfg, list_call, query) end
function M.info(cfg, id) return with_client(cfg, info_call, id) end
function M.metrics(cfg, id, opts) return with_client(cfg, metrics_call, id, opts) end

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
