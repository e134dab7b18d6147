--- dsh.envd: the host's client of the envd wire protocol (dshd or E2B's envd).
--
-- Connect over HTTP/1.1 with JSON: unary calls, server streams of envelopes,
-- plus GET/POST /files and GET /health. Every call returns its result or
-- `nil, err` where err.code is the envd (Connect) code ("not_found",
-- "invalid_argument", ...) and err.message its text; transport failures are
-- "unavailable", client-side deadlines "deadline_exceeded", aborts "canceled".
-- A path that stalls (no byte either way, the connection still open) ends a
-- server stream or a /files transfer as "unavailable" ("connection stalled:
-- nothing received or sent for N ms"): streams allow STALL_KEEPALIVES
-- keepalive intervals (the daemon pings idle streams at the interval the
-- client asks for), /files transfers files_stall_timeout_ms. Unary calls have
-- their deadline instead.
-- The host keeps its own deadlines whatever the daemon does (dsh.envd._watch):
-- a call that should answer promptly and has not gets the daemon probed, and
-- a daemon that does not answer the probe in time (stopped, frozen, a byte a
-- second) ends every call waiting on it, and for a while every later one at
-- once, with SANDBOX_UNRESPONSIVE naming the sandbox (the client's label); a
-- stream with a deadline (timeout_ms) ends with it at most DEADLINE_GRACE_MS
-- after the deadline, whether or not the daemon ends it.
-- Bytes are bytes on the wire: UTF-8 is handled by callers, on the host.
--
-- The process, filesystem and files calls live in dsh.envd.process,
-- dsh.envd.filesystem and dsh.envd.files and are mixed into the client; a
-- server stream is a dsh.envd._stream, its decoding the core's
-- (dsh.core.envd_events).
local errors = require "dsh.errors"
local http = require "dsh.core.http"
local base64 = require "dsh.core.base64"
local envelope = require "dsh.core.envelope"
local json = require "dsh.json"
local envd_events = require "dsh.core.envd_events"
local loop = require "dsh.core.loop"
local stream = require "dsh.envd._stream"
local watch = require "dsh.envd._watch"
local wire = require "dsh.envd._errors"

local M = {}

---@class dsh.EnvdClient
---@field url string
---@field user string|nil
local Client = {}
Client.__index = Client
Client.__tostring = function(c)
  return "dsh.envd.client(" .. (c.unix_socket or c.url) .. (c._closed and ", closed" or "") .. ")"
end

M.DEFAULT_TIMEOUT_MS = 60000
M.MAX_MESSAGE_BYTES = 64 * 1024 * 1024
M.KEEPALIVE_S = 50 -- Keepalive-Ping-Interval asked for on streams (E2B's SDKs ask the same)
M.STALL_KEEPALIVES = 3 -- a stream that got no byte for this many intervals has stalled
M.FILES_STALL_TIMEOUT_MS = 30000
M.HEALTH_TIMEOUT_MS = 5000
M.SLOW_MS = watch.SLOW_MS -- a prompt call this slow gets the daemon probed
M.PROBE_TIMEOUT_MS = watch.PROBE_TIMEOUT_MS -- a probe unanswered this long: the daemon is unresponsive
M.RETRY_MS = watch.RETRY_MS -- then calls fail at once; one each RETRY_MS probes again
M.DEADLINE_GRACE_MS = watch.DEADLINE_GRACE_MS -- a stream's deadline, then this, and the host ends it

M.transport_error = wire.transport_error
M.answer_error = wire.answer_error
local transport_error, answer_error = wire.transport_error, wire.answer_error

---@class dsh.EnvdOpts
---@field url string|nil            base URL, e.g. "http://127.0.0.1:49983" (default when no unix_socket)
---@field unix_socket string|nil    talk HTTP over this unix socket instead
---@field access_token string|nil   sent as X-Access-Token
---@field user string|nil           default user for every call (Authorization: Basic / ?username=)
---@field request_timeout_ms number|nil  unary deadline (default 60000; 0 = none)
---@field keepalive_s number|nil    keepalive interval asked for on streams (default 50); a stream
---                                 with no byte for 3 intervals fails as stalled
---@field files_stall_timeout_ms number|nil  /files transfers fail after this long without a byte
---                                 (default 30000; 0 = never)
---@field http table|nil            a dsh.core.http client to share (default: one of its own)
---@field headers table|nil         extra headers on every request (e.g. E2B's routing headers)
---@field label string|nil          what errors call the daemon (e.g. "sandbox <id>"; default its address)
---@field slow_ms number|nil       a call that should answer at once and has not after this long
---                                 gets the daemon probed (default 100)
---@field probe_timeout_ms number|nil  a health probe unanswered this long finds the daemon
---                                 unresponsive (default 1500; 0: no probes, deadlines only)
---@field activity (fun():{cpu:number, stopped:boolean}|nil)|nil  the daemon's process as this
---                                 host sees it (CPU time used so far; stopped or frozen), where it
---                                 can: a probe unanswered while the daemon worked is not held
---                                 against it (dsh.sandbox gives its local sandboxes' dshd)
---@field stream_hooks {hold:fun(), release:fun()}|nil  hold() when a server stream
---                                 opens, release() once it ended or was closed (a session in front
---                                 of the client counts open streams as the sandbox's activity)

--- A client for one sandbox daemon.
---@param opts dsh.EnvdOpts
---@return dsh.EnvdClient
function M.client(opts)
  errors.check("dsh.envd", "client", opts, "table")
  errors.check("dsh.envd", "client: url", opts.url, "string", true)
  errors.check("dsh.envd", "client: unix_socket", opts.unix_socket, "string", true)
  errors.check("dsh.envd", "client: access_token", opts.access_token, "string", true)
  errors.check("dsh.envd", "client: user", opts.user, "string", true)
  errors.check("dsh.envd", "client: headers", opts.headers, "table", true)
  errors.check("dsh.envd", "client: keepalive_s", opts.keepalive_s, "number", true)
  errors.check("dsh.envd", "client: files_stall_timeout_ms", opts.files_stall_timeout_ms, "number", true)
  errors.check("dsh.envd", "client: label", opts.label, "string", true)
  errors.check("dsh.envd", "client: activity", opts.activity, "function", true)
  errors.check("dsh.envd", "client: stream_hooks", opts.stream_hooks, "table", true)
  for _, k in ipairs { "slow_ms", "probe_timeout_ms" } do
    local v = opts[k]
    errors.check("dsh.envd", "client: " .. k, v, "number", true)
    if v and (v < 0 or v ~= math.floor(v)) then
      errors.misuse("dsh.envd", "client: %s must be a whole number of milliseconds >= 0, got %s", k, tostring(v))
    end
  end
  if opts.keepalive_s and (opts.keepalive_s < 1 or opts.keepalive_s ~= math.floor(opts.keepalive_s)) then
    errors.misuse("dsh.envd", "client: keepalive_s must be a whole number of seconds >= 1, got %s",
      tostring(opts.keepalive_s))
  end
  local url = opts.url or (opts.unix_socket and "http://localhost" or "http://127.0.0.1:49983")
  local c = setmetatable({
    url = url:gsub("/+$", ""),
    unix_socket = opts.unix_socket,
    user = opts.user,
    label = opts.label,
    activity = opts.activity,
    stream_hooks = opts.stream_hooks,
    slow_ms = opts.slow_ms or M.SLOW_MS,
    probe_timeout_ms = opts.probe_timeout_ms or M.PROBE_TIMEOUT_MS,
    request_timeout_ms = opts.request_timeout_ms or M.DEFAULT_TIMEOUT_MS,
    keepalive_s = opts.keepalive_s or M.KEEPALIVE_S,
    files_stall_timeout_ms = opts.files_stall_timeout_ms or M.FILES_STALL_TIMEOUT_MS,
    _token = opts.access_token,
    _extra = opts.headers,
    _http = opts.http or http.client(),
    _own_http = opts.http == nil,
  }, Client)
  c._watch = watch.new(c)
  return c
end

function Client:close()
  if self._closed then return end
  self._closed = true
  self._watch:stop()
  if self._own_http then self._http:close() end
end

--- What errors call the daemon: the label, else its address.
function Client:_label()
  if self.label then return self.label end
  return "envd at " .. (self.unix_socket and ("unix socket " .. self.unix_socket) or self.url)
end

--- End every call in flight with err now, and every later call at once (for
-- a sandbox that is being ended from outside; the client stays open).
---@param err dsh.Error
function Client:abandon(err)
  errors.check("dsh.envd", "abandon: err", err, "table")
  self._watch:abandon(err)
end

--- nil while the daemon answers; {why=, at=} once it was found
-- unresponsive (at: dsh.core.loop ms), until a probe or health check is answered.
function Client:unresponsive()
  return self._watch:unresponsive()
end

-- Misuse (a call after sb:kill() or close()), reported at the caller's line.
function Client:_check_open(what)
  if self._closed then errors.misuse("dsh.envd", "%s: client is closed", what) end
end

--- Request headers for a call: content type, token, user, timeout.
function Client:_headers(content_type, opts)
  local h = { ["Connect-Protocol-Version"] = "1" }
  if self._extra then
    for k, v in pairs(self._extra) do h[k] = v end
  end
  if content_type then h["Content-Type"] = content_type end
  if self._token then h["X-Access-Token"] = self._token end
  local user = opts and opts.user or self.user
  if user and content_type then
    h["Authorization"] = "Basic " .. base64.encode(user .. ":")
  end
  return h
end

function Client:_request_opts(method, path, content_type, body, opts)
  return {
    method = method,
    url = self.url .. path,
    unix_socket = self.unix_socket,
    headers = self:_headers(content_type, opts),
    body = body,
    timeout_ms = opts and opts.timeout_ms or self.request_timeout_ms,
    signal = opts and opts.signal,
  }
end

--- One unary Connect call: path "/process.Process/List", msg a Lua table.
-- Returns the decoded response object or nil, err.
function Client:call(path, msg, opts)
  self:_check_open("call")
  local what = "POST " .. path
  local w = self._watch
  local ok, aerr = w:admit(what)
  if not ok then return nil, aerr end
  local ro = self:_request_opts("POST", path, "application/json", json.encode(msg or {}), opts)
  local c = w:open(ro, "prompt", what)
  local pok, res, err = pcall(self._http.fetch, self._http, ro)
  w:close(c)
  if not pok then error(res, 0) end
  if not res then return nil, transport_error(err) end
  w.moved = w.moved + #res.body
  if res.status ~= 200 then return nil, answer_error(res.status, res.body, true) end
  local decoded = json.decode(res.body)
  if type(decoded) ~= "table" then
    return nil, errors.new("internal", "envd answered " .. path .. " with a non-object body")
  end
  return decoded
end

-- Server streams --------------------------------------------------------------

--- Open a server stream: one request envelope, then envelopes back. Returns
-- once the response head arrived: a stream whose :next() yields messages.
-- opts.timeout_ms becomes Connect-Timeout-Ms (0/nil = none), opts.keepalive_s
-- Keepalive-Ping-Interval (the client's by default); the stream fails as
-- stalled after STALL_KEEPALIVES intervals without a byte (opts.stall_timeout_ms
-- overrides, 0 = never).
function Client:stream(path, msg, opts)
  self:_check_open("stream")
  opts = opts or {}
  local what = "POST " .. path
  local w = self._watch
  local ok, aerr = w:admit(what)
  if not ok then return nil, aerr end
  local reader = envd_events.reader(opts.max_message_bytes or M.MAX_MESSAGE_BYTES)
  local ro = self:_request_opts("POST", path, "application/connect+json",
    envelope.encode(0, json.encode(msg or {})), opts)
  ro.timeout_ms = 0 -- streams live as long as the server keeps them; Connect-Timeout-Ms bounds them
  if opts.timeout_ms and opts.timeout_ms > 0 then
    ro.headers["Connect-Timeout-Ms"] = tostring(math.floor(opts.timeout_ms))
  end
  local keepalive_s = opts.keepalive_s or self.keepalive_s
  ro.headers["Keepalive-Ping-Interval"] = tostring(keepalive_s)
  ro.stall_timeout_ms = opts.stall_timeout_ms or M.STALL_KEEPALIVES * keepalive_s * 1000
  ro.max_buffer_bytes = opts.max_buffer_bytes
  local c = w:open(ro, "prompt", what, opts.timeout_ms)
  local pok, res, err = pcall(self._http.request, self._http, ro)
  if not pok or not res then
    w:close(c)
    reader:close()
    if not pok then error(res, 0) end
    return nil, transport_error(err)
  end
  if res.status ~= 200 then
    reader:close()
    local body, berr = res:body()
    res:close()
    w:close(c)
    if not body then return nil, transport_error(berr) end
    return nil, answer_error(res.status, body, true)
  end
  local ctype = (res.headers["content-type"] or ""):lower()
  if not ctype:find("application/connect+json", 1, true) then
    reader:close()
    res:close()
    w:close(c)
    return nil, errors.new("internal", "envd answered a stream with content type " .. ctype)
  end
  return stream.open(path, res, reader, w, c, self.stream_hooks)
end

-- /health ---------------------------------------------------------------------

-- GET /health within timeout_ms, on no call's behalf: the answer, or
-- nil and dsh.core.http's error (the watch reads HTTP_TIMEOUT as "no answer").
function Client:_probe(timeout_ms, signal)
  local ro = self:_request_opts("GET", "/health", nil, nil, { signal = signal })
  ro.timeout_ms = timeout_ms
  return self._http:fetch(ro)
end

--- GET /health: {ok=true, version=<dshd version or nil>, extensions={name=true}}.
-- A stock envd answers without extensions. opts.timeout_ms: 5000 by
-- default. Asked even while the daemon is found unresponsive: an answer
-- ends that state, no answer in time begins it.
function Client:health(opts)
  self:_check_open("health")
  local timeout = opts and opts.timeout_ms or M.HEALTH_TIMEOUT_MS
  local w = self._watch
  local started, moved0, act0 = loop.now_ms(), w.moved, w:activity()
  local res, err = self:_probe(timeout, opts and opts.signal)
  w:result(started, moved0, res ~= nil, err, timeout, act0)
  if not res then return nil, transport_error(err) end
  if res.status < 200 or res.status > 299 then return nil, answer_error(res.status, res.body) end
  local ext = {}
  for name in (res.headers["dshd-extensions"] or ""):gmatch("[^,%s]+") do ext[name] = true end
  local info = { ok = true, version = res.headers["dshd-version"], extensions = ext }
  self._health = info
  return info
end

--- The extensions of the daemon (asks /health once). Empty for stock envd.
-- Asked on a call's behalf: it fails at once while the daemon is found
-- unresponsive, and waits for an answer no longer than a probe does.
function Client:extensions()
  if not self._health then
    local w = self._watch
    local ok, aerr = w:admit("GET /health")
    if not ok then return nil, aerr end
    local timeout = self.probe_timeout_ms > 0 and self.probe_timeout_ms or M.HEALTH_TIMEOUT_MS
    local info, err = self:health { timeout_ms = timeout }
    if not info then
      if w:unresponsive() then return nil, w:unanswered("GET /health") end
      return nil, err
    end
  end
  return self._health.extensions
end

--- True when the daemon advertises extension name (e.g. "group-signals").
function Client:has(name)
  local ext = self:extensions()
  return ext ~= nil and ext[name] == true
end

--- POST /init (envd's orchestrator call): envVars for every later process,
-- defaultUser, defaultWorkdir. dshd requires the access token for it.
function Client:init(body, opts)
  self:_check_open("init")
  local w = self._watch
  local ok, aerr = w:admit("POST /init")
  if not ok then return nil, aerr end
  local ro = self:_request_opts("POST", "/init", "application/json", json.encode(body or {}), opts)
  ro.headers["Authorization"] = nil
  local c = w:open(ro, "prompt", "POST /init")
  local pok, res, err = pcall(self._http.fetch, self._http, ro)
  w:close(c)
  if not pok then error(res, 0) end
  if not res then return nil, transport_error(err) end
  if res.status < 200 or res.status > 299 then return nil, answer_error(res.status, res.body) end
  return true
end

M.Client = Client
M.Stream = stream.Stream

require("dsh.envd.process").mixin(Client)
require("dsh.envd.filesystem").mixin(Client)
require("dsh.envd.files").mixin(Client)

--- The client's public entry points (its methods not starting with `_`),
-- sorted: what a session in front of a client stands for, one by one
-- (ctx.e2b's, dsh.providers.e2b.session).
M.ENTRY_POINTS = {}
for name, v in pairs(Client) do
  if type(v) == "function" and name:sub(1, 1) ~= "_" then M.ENTRY_POINTS[#M.ENTRY_POINTS + 1] = name end
end
table.sort(M.ENTRY_POINTS)

return M
