--- dsh.envd: the host's client of the envd wire protocol (dshd or E2B's envd).
--
-- Connect over HTTP/1.1 with JSON: unary calls, server streams of envelopes,
-- plus GET/POST /files and GET /health. Every call returns its result or
-- `nil, err` where err.code is the envd (Connect) code ("not_found",
-- "invalid_argument", ...) and err.message its text; transport failures are
-- "unavailable", client-side deadlines "deadline_exceeded", aborts "canceled".
-- Bytes are bytes on the wire: UTF-8 is handled by callers, on the host.
--
-- The process, filesystem and files calls live in dsh.envd.process,
-- dsh.envd.filesystem and dsh.envd.files and are mixed into the client.
local errors = require "dsh.errors"
local http = require "dsh.http"
local base64 = require "dsh.base64"
local envelope = require "dsh.envelope"
local json = require "dsh.json"
local F = require "dsh._ffi"
local ffi, C = F.ffi, F.C

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

-- Connect codes by HTTP status, for answers that carry no Connect error body.
local status_codes = {
  [400] = "invalid_argument", [401] = "unauthenticated", [403] = "permission_denied",
  [404] = "not_found", [409] = "already_exists", [429] = "resource_exhausted",
  [499] = "canceled", [501] = "unimplemented", [502] = "unavailable", [503] = "unavailable",
  [504] = "deadline_exceeded", [507] = "resource_exhausted",
}

local function transport_error(err)
  if err.code == "HTTP_TIMEOUT" then
    return errors.new("deadline_exceeded", err.message)
  elseif err.code == "ABORTED" then
    return errors.new("canceled", err.message, { reason = err.reason })
  end
  return errors.new("unavailable", "envd unreachable: " .. tostring(err.message))
end
M.transport_error = transport_error

--- The error an HTTP answer stands for. rpc: a Connect path (a plain 404 there
-- means the method does not exist: "unimplemented").
local function answer_error(status, body, rpc)
  local decoded = json.decode(body or "")
  if type(decoded) == "table" then
    local code, message = decoded.code, decoded.message
    if type(code) == "string" and code ~= "" then
      return errors.new(code, type(message) == "string" and message or code, { http_status = status })
    end
    if type(message) == "string" then
      return errors.new(status_codes[status] or "unknown", message, { http_status = status })
    end
  end
  local code = status_codes[status] or "unknown"
  if rpc and status == 404 then code = "unimplemented" end
  local text = (body and #body > 0 and #body < 512) and body:gsub("%s+$", "") or ("HTTP " .. status)
  return errors.new(code, text, { http_status = status })
end
M.answer_error = answer_error

---@class dsh.EnvdOpts
---@field url string|nil            base URL, e.g. "http://127.0.0.1:49983" (default when no unix_socket)
---@field unix_socket string|nil    talk HTTP over this unix socket instead
---@field access_token string|nil   sent as X-Access-Token
---@field user string|nil           default user for every call (Authorization: Basic / ?username=)
---@field request_timeout_ms number|nil  unary deadline (default 60000; 0 = none)
---@field http table|nil            a dsh.http client to share (default: one of its own)
---@field headers table|nil         extra headers on every request (e.g. E2B's routing headers)

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
  local url = opts.url or (opts.unix_socket and "http://localhost" or "http://127.0.0.1:49983")
  local c = setmetatable({
    url = url:gsub("/+$", ""),
    unix_socket = opts.unix_socket,
    user = opts.user,
    request_timeout_ms = opts.request_timeout_ms or M.DEFAULT_TIMEOUT_MS,
    _token = opts.access_token,
    _extra = opts.headers,
    _http = opts.http or http.client(),
    _own_http = opts.http == nil,
  }, Client)
  return c
end

function Client:close()
  if self._closed then return end
  self._closed = true
  if self._own_http then self._http:close() end
end

function Client:_check_open(what)
  if self._closed then error("dsh.envd: " .. what .. ": client is closed", 3) end
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
  local res, err = self._http:fetch(self:_request_opts("POST", path, "application/json",
    json.encode(msg or {}), opts))
  if not res then return nil, transport_error(err) end
  if res.status ~= 200 then return nil, answer_error(res.status, res.body, true) end
  local decoded = json.decode(res.body)
  if type(decoded) ~= "table" then
    return nil, errors.new("internal", "envd answered " .. path .. " with a non-object body")
  end
  return decoded
end

-- Server streams --------------------------------------------------------------

---@class dsh.EnvdStream
local Stream = {}
Stream.__index = Stream
Stream.__tostring = function(s)
  return "dsh.envd.stream(" .. s.path .. (s._closed and ", closed" or "") .. ")"
end

--- Open a server stream: one request envelope, then envelopes back. Returns
-- once the response head arrived: a stream whose :next() yields messages.
-- opts.timeout_ms becomes Connect-Timeout-Ms (0/nil = none), opts.keepalive_s
-- Keepalive-Ping-Interval.
function Client:stream(path, msg, opts)
  self:_check_open("stream")
  opts = opts or {}
  local ro = self:_request_opts("POST", path, "application/connect+json",
    envelope.encode(0, json.encode(msg or {})), opts)
  ro.timeout_ms = 0 -- streams live as long as the server keeps them; Connect-Timeout-Ms bounds them
  if opts.timeout_ms and opts.timeout_ms > 0 then
    ro.headers["Connect-Timeout-Ms"] = tostring(math.floor(opts.timeout_ms))
  end
  ro.headers["Keepalive-Ping-Interval"] = tostring(opts.keepalive_s or 50)
  ro.max_buffer_bytes = opts.max_buffer_bytes
  local res, err = self._http:request(ro)
  if not res then return nil, transport_error(err) end
  if res.status ~= 200 then
    local body = res:body()
    res:close()
    return nil, answer_error(res.status, body, true)
  end
  local ctype = (res.headers["content-type"] or ""):lower()
  if not ctype:find("application/connect+json", 1, true) then
    res:close()
    return nil, errors.new("internal", "envd answered a stream with content type " .. ctype)
  end
  local out = ffi.new("dsh_envd_events_t *[1]")
  if C.dsh_envd_events_new(opts.max_message_bytes or M.MAX_MESSAGE_BYTES, out) ~= 0 then
    res:close()
    error("dsh.envd: out of memory", 2)
  end
  local dec = ffi.gc(out[0], C.dsh_envd_events_free)
  return setmetatable({
    path = path,
    _res = res,
    _dec = dec,
    _ev = ffi.new("dsh_envd_event_t"),
    -- bytes go from the HTTP buffer into the C decoder without a Lua string
    _sink = function(ptr, n) C.dsh_envd_events_push(dec, ptr, n) end,
  }, Stream)
end

local STREAM_NAMES = { "stdout", "stderr", "pty" }

-- Data events are handed out in pieces of at most this many bytes. LuaJIT's
-- allocator maps every string of 128 KiB or more with mmap of its own and
-- unmaps it when collected, so a 256 KiB event (dshd's largest) would cost
-- 64 fresh page faults and a munmap; measured, ffi.string of 256 KiB runs at
-- 1.6 GB/s and of 64 KiB at over 20 GB/s. Pieces keep the bytes exactly and
-- carry their own offsets.
M.DATA_PIECE_BYTES = 65536

-- The next piece of the data event being handed out (ev still lends its
-- bytes: nothing is pushed into the decoder until the event is used up).
function Stream:_piece()
  local ev, at = self._ev, self._piece_at
  local len = tonumber(ev.len)
  local n = len - at
  if n > M.DATA_PIECE_BYTES then n = M.DATA_PIECE_BYTES end
  self._piece_at = at + n < len and at + n or nil
  return { __data = true, stream = STREAM_NAMES[ev.stream], data = ffi.string(ev.data + at, n),
    offset = ev.offset >= 0 and tonumber(ev.offset) + at or nil }
end

--- The next message: a decoded JSON table, or for a data event (decoded in C,
-- see core/include/dsh/envd_events.h) a table {__data=true, stream=, data=,
-- offset=} (a large event comes in several pieces). nil when the stream ended
-- cleanly, or nil, err (the stream's own error from its end message, or a
-- transport or protocol failure).
function Stream:next()
  local ev = self._ev
  if self._piece_at then return self:_piece() end
  while true do
    if self._failed then return nil, self._failed end
    if self._done then return nil end
    local rc = C.dsh_envd_events_next(self._dec, ev)
    if rc == 1 then
      local kind = ev.kind
      if kind == C.DSH_ENVD_DATA then
        self._piece_at = 0
        return self:_piece()
      elseif kind == C.DSH_ENVD_MESSAGE then
        local msg = json.decode(ffi.string(ev.data, ev.len))
        if type(msg) ~= "table" then
          self._failed = errors.new("internal", "envd stream message is not a JSON object")
        else
          return msg
        end
      else
        self:_finish_with(ffi.string(ev.data, ev.len))
        self:_read_to_eof()
      end
    elseif rc == 0 then
      local got, err = self._res:read_with(self._sink)
      if not got then
        if err then
          self._failed = transport_error(err)
        elseif C.dsh_envd_events_finish(self._dec) ~= 0 then
          self._failed = errors.new("invalid_argument", "protocol error: incomplete envelope")
        else
          self._failed = errors.new("unknown", "missing EndStreamResponse")
        end
      end
    else
      self._failed = errors.new("internal", "envd stream protocol error: "
        .. ffi.string(C.dsh_envd_events_error(self._dec)))
    end
  end
end

local function discard() end

-- The end message is the last one: the server ends the body right after it.
-- Read to that end so the transfer completes and its connection goes back to
-- the client's cache (closing a response mid-body makes libcurl drop the
-- connection, and every later stream would pay for a new one). Bytes after
-- the end message are ignored.
function Stream:_read_to_eof()
  local res = self._res
  while res:read_with(discard) do end
end

function Stream:_finish_with(payload)
  local endmsg = json.decode(payload)
  if type(endmsg) ~= "table" then
    self._failed = errors.new("internal", "envd stream ended with a malformed end message")
  elseif type(endmsg.error) == "table" then
    local e = endmsg.error
    self._failed = errors.new(type(e.code) == "string" and e.code or "unknown",
      type(e.message) == "string" and e.message or "stream failed")
  elseif endmsg.error ~= nil and endmsg.error ~= json.null then
    self._failed = errors.new("internal", "envd stream ended with a malformed error")
  else
    self._done = true
  end
end

--- Stop reading and drop the connection (the server sees the client go away).
function Stream:close()
  if self._closed then return end
  self._closed = true
  self._res:close()
end

-- /health ---------------------------------------------------------------------

--- GET /health: {ok=true, version=<dshd version or nil>, extensions={name=true}}.
-- A stock envd answers without extensions.
function Client:health(opts)
  self:_check_open("health")
  local ro = self:_request_opts("GET", "/health", nil, nil, opts)
  ro.timeout_ms = opts and opts.timeout_ms or 5000
  local res, err = self._http:fetch(ro)
  if not res then return nil, transport_error(err) end
  if res.status < 200 or res.status > 299 then return nil, answer_error(res.status, res.body) end
  local ext = {}
  for name in (res.headers["dshd-extensions"] or ""):gmatch("[^,%s]+") do ext[name] = true end
  local info = { ok = true, version = res.headers["dshd-version"], extensions = ext }
  self._health = info
  return info
end

--- The extensions of the daemon (asks /health once). Empty for stock envd.
function Client:extensions()
  if not self._health then
    local info, err = self:health()
    if not info then return nil, err end
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
  local ro = self:_request_opts("POST", "/init", "application/json", json.encode(body or {}), opts)
  ro.headers["Authorization"] = nil
  local res, err = self._http:fetch(ro)
  if not res then return nil, transport_error(err) end
  if res.status < 200 or res.status > 299 then return nil, answer_error(res.status, res.body) end
  return true
end

M.Client = Client
M.Stream = Stream

require("dsh.envd.process").mixin(Client)
require("dsh.envd.filesystem").mixin(Client)
require("dsh.envd.files").mixin(Client)

return M
