--- dsh.core.http: an HTTP/1.1 client on the one loop (libcurl multi in the C core).
--
--   local client = http.client()
--   local res, err = client:request { method = "POST", url = "http://127.0.0.1:8080/x", body = "..." }
--   print(res.status, res.headers["content-type"])
--   local chunk = res:read()   -- next body chunk (<= 64 KiB); nil at the end; nil, err on failure
--   local rest = res:body()    -- or everything left as one string
--   res:close()
--   local r = client:fetch { url = ... }  -- {status=, headers=, body=} or nil, err
--   client:close()
--
-- Each client owns a connection cache: sequential requests to the same host
-- (or unix socket) reuse one connection. Waiting calls suspend the calling
-- task, or run the loop when called outside a task (REPL use).
--
-- request() returns once the response head has arrived, except with
-- `body_stream = true`: then it returns at once (res.status is nil), the
-- caller feeds the body with res:write() and ends it with res:finish(), and
-- res:head() / res:read() / res:body() wait for the head. The server may only
-- answer once the body is complete, so waiting for the head first could
-- deadlock; writing and reading may also happen in two tasks.
--
-- Memory stays bounded: at most max_buffer_bytes of the response are
-- buffered (the transfer pauses until the reader catches up) and res:write()
-- waits while as many request bytes are queued.
--
-- Failures: misuse raises ("dsh.core.http: ..."); transport errors return
-- nil, err with err.code HTTP_ERROR (libcurl's message, e.g. "Failed to
-- connect ..."), timeouts HTTP_TIMEOUT, stalls HTTP_STALLED (no byte moved
-- for stall_timeout_ms; err.stall_ms), aborts (the request's signal, or the
-- response closed while a task waited) ABORTED, carrying the signal's reason.
--
-- stall_timeout_ms bounds silence, not length: a transfer fails once no byte
-- was received or sent for that long, while it waits for the head too. Time
-- the transfer is paused by its reader (nothing read, the buffer full) or its
-- writer (a streamed body not fed yet) does not count.
-- A 404 or 500 is a response, not an error.
--
-- This module is the client (options, requests, the connection cache); the
-- response object is dsh.core.http._response.
local F = require "dsh.core._ffi"
local async = require "dsh.async"
local errors = require "dsh.errors"
local loop = require "dsh.core.loop"
local response = require "dsh.core.http._response"

local ffi, C = F.ffi, F.C
local MOD = "dsh.core.http"

local M = {}

-- Scratch cdata, only used until dsh_http_start() copied what it needs.
local copts = ffi.new("dsh_http_req_opts_t")
local out_req = ffi.new("dsh_http_req_t *[1]")
local out_client = ffi.new("dsh_http_t *[1]")
local stats_buf = ffi.new("dsh_http_stats_t")
local errbuf = F.errbuf()
local header_lines, header_cap = nil, 0
local header_keep = {} -- the Lua strings header_lines points into, until start copied them

local function misuse(fmt, ...)
  error(MOD .. ": " .. string.format(fmt, ...), 3)
end

---@class dsh.core.http.Client
local Client = {}
Client.__index = Client
Client.__tostring = function(c)
  if not c._ptr then return "dsh.core.http.client (closed)" end
  local n = 0
  for _ in pairs(c._open) do n = n + 1 end
  return string.format("dsh.core.http.client (%d open)", n)
end

--- A client: its own multi handle and connection cache. Close it when done.
---@return dsh.core.http.Client
function M.client()
  local rc = C.dsh_http_new(loop.ptr, out_client)
  if rc ~= 0 then error(MOD .. ": client: " .. select(2, F.status(rc)), 2) end
  local self = setmetatable({
    _ptr = ffi.gc(out_client[0], C.dsh_http_free),
    _open = setmetatable({}, { __mode = "k" }), -- responses not yet closed
  }, Client)
  loop.track(self, "http.client")
  return self
end

local function check_client(self, what)
  if getmetatable(self) ~= Client then misuse("%s: expected a client", what) end
  if not self._ptr then misuse("%s: client is closed", what) end
end

local function opt_number(opts, key, max)
  local v = opts[key]
  if v == nil then return 0 end
  if type(v) ~= "number" or v < 0 or v ~= math.floor(v) or v > max then
    misuse("request: %s: expected an integer from 0 to %d, got %s", key, max, tostring(v))
  end
  return v
end

local TOKEN = "^[%w!#$%%&'*+.^_`|~-]+$" -- RFC 9110 token: methods and header names
local common_methods = { GET = true, POST = true, PUT = true, PATCH = true, DELETE = true, HEAD = true,
  OPTIONS = true }

-- Fill copts from opts (which keeps url, unix_socket and body referenced;
-- header_keep keeps the header lines) until dsh_http_start() copies them.
-- Returns the method.
local function fill_opts(opts)
  errors.check(MOD, "request: url", opts.url, "string")
  local method = opts.method or "GET"
  errors.check(MOD, "request: method", method, "string")
  if not common_methods[method] and not method:match(TOKEN) then misuse("request: bad method %q", method) end
  errors.check(MOD, "request: unix_socket", opts.unix_socket, "string", true)
  errors.check(MOD, "request: headers", opts.headers, "table", true)
  errors.check(MOD, "request: body", opts.body, "string", true)
  if opts.body and opts.body_stream then misuse("request: body and body_stream are exclusive") end
  if opts.signal ~= nil and not async.is_signal(opts.signal) then
    misuse("request: signal: expected a dsh signal")
  end
  local n = 0
  if opts.headers then
    for name, value in pairs(opts.headers) do
      if type(name) ~= "string" or not name:match(TOKEN) then
        misuse("request: bad header name %s", tostring(name))
      end
      if type(value) == "number" then value = tostring(value) end
      if type(value) ~= "string" or value:find("[\r\n]") then
        misuse("request: header %s: expected a string without CR or LF", name)
      end
      n = n + 1
      header_keep[n] = name .. ": " .. value
    end
    if n > header_cap then
      header_cap = math.max(n, 2 * header_cap, 16)
      header_lines = ffi.new("const char *[?]", header_cap)
    end
    for i = 1, n do header_lines[i - 1] = header_keep[i] end
  end
  copts.method = method
  copts.url = opts.url
  copts.unix_socket = opts.unix_socket
  copts.headers = n > 0 and header_lines or nil
  copts.nheaders = n
  copts.body = opts.body
  copts.body_len = opts.body and #opts.body or 0
  copts.stream_body = opts.body_stream and 1 or 0
  copts.timeout_ms = opt_number(opts, "timeout_ms", 2 ^ 40)
  copts.connect_timeout_ms = opt_number(opts, "connect_timeout_ms", 2 ^ 40)
  copts.stall_timeout_ms = opt_number(opts, "stall_timeout_ms", 2 ^ 40)
  copts.max_buffer_bytes = opt_number(opts, "max_buffer_bytes", 2 ^ 30)
  copts.max_header_bytes = opt_number(opts, "max_header_bytes", 2 ^ 30)
  return method
end

local function clear_opts()
  copts.method, copts.url, copts.unix_socket, copts.headers, copts.body = nil, nil, nil, nil, nil
  for i = #header_keep, 1, -1 do header_keep[i] = nil end
end

---@class dsh.core.http.RequestOpts
---@field url string
---@field method string|nil "GET" by default
---@field unix_socket string|nil connect to this unix socket instead of the URL's host
---@field headers table<string,string|number>|nil
---@field body string|nil whole request body
---@field body_stream boolean|nil feed the body with res:write(), end it with res:finish()
---@field timeout_ms integer|nil whole transfer (0: none)
---@field connect_timeout_ms integer|nil
---@field stall_timeout_ms integer|nil fail once no byte moved for this long, pauses by the owner aside (0: none)
---@field max_buffer_bytes integer|nil response (and send) buffer bound, 1 MiB by default
---@field max_header_bytes integer|nil response head bound, 64 KiB by default
---@field signal dsh.AbortSignal|nil aborting it cancels the transfer

--- Start a request. Returns once the head arrived (at once with body_stream).
---@param opts dsh.core.http.RequestOpts
---@return dsh.core.http.Response|nil, dsh.Error?
function Client:request(opts)
  check_client(self, "request")
  errors.check(MOD, "request", opts, "table")
  local method = fill_opts(opts)
  local signal = opts.signal
  if signal and signal.aborted then
    clear_opts()
    return nil, async.abort_error(signal.reason)
  end

  local id = loop.new_id()
  local st = response.new_state()
  loop.on(id, st)
  local rc = C.dsh_http_start(self._ptr, copts, id, out_req, errbuf, F.ERRLEN)
  clear_opts()
  if rc ~= 0 then
    loop.off(id)
    misuse("request: %s", ffi.string(errbuf))
  end
  local res = response.open(self, out_req[0], id, st, method, opts)
  if res._stream then return res end
  local ok, err = res:head()
  if not ok then
    res:close()
    return nil, err
  end
  return res
end

--- A whole request: {status=, headers=, body=} or nil, err. Frees the request.
---@param opts dsh.core.http.RequestOpts
---@return table|nil, dsh.Error?
function Client:fetch(opts)
  check_client(self, "fetch")
  errors.check(MOD, "fetch", opts, "table")
  if opts.body_stream then misuse("fetch: body_stream needs request()") end
  local res, err = self:request(opts)
  if not res then return nil, err end
  local body
  body, err = res:body()
  res:close()
  if not body then return nil, err end
  return { status = res.status, headers = res.headers, body = body }
end

--- requests started, new connections made, requests live (not yet closed).
---@return {requests: integer, connections: integer, live: integer}
function Client:stats()
  check_client(self, "stats")
  C.dsh_http_stats(self._ptr, stats_buf)
  return {
    requests = tonumber(stats_buf.requests),
    connections = tonumber(stats_buf.connections),
    live = tonumber(stats_buf.live),
  }
end

--- Close every open response of this client, then the client. Idempotent.
function Client:close()
  if not self._ptr then return end
  local open = {}
  for r in pairs(self._open) do open[#open + 1] = r end
  for _, r in ipairs(open) do r:close() end
  local ptr = self._ptr
  self._ptr = nil
  C.dsh_http_free(ffi.gc(ptr, nil))
  loop.untrack(self)
end

M.Client, M.Response = Client, response.Response
return M
