--- dsh.http: an HTTP/1.1 client on the one loop (libcurl multi in the C core).
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
-- Failures: misuse raises ("dsh.http: ..."); transport errors return
-- nil, err with err.code HTTP_ERROR (libcurl's message, e.g. "Failed to
-- connect ..."), timeouts HTTP_TIMEOUT, aborts (the request's signal, or the
-- response closed while a task waited) ABORTED, carrying the signal's reason.
-- A 404 or 500 is a response, not an error.
local F = require "dsh._ffi"
local async = require "dsh.async"
local errors = require "dsh.errors"
local loop = require "dsh.loop"

local ffi, C = F.ffi, F.C
local MOD = "dsh.http"

local M = {}

local EAGAIN, ELIMIT, ESTATE = C.DSH_EAGAIN, C.DSH_ELIMIT, C.DSH_ESTATE
local ETIMEDOUT, ECANCELED, EEOF = C.DSH_ETIMEDOUT, C.DSH_ECANCELED, C.DSH_EEOF
local EV_HEAD, EV_DATA, EV_DONE, EV_SEND = C.DSH_EV_HTTP_HEAD, C.DSH_EV_HTTP_DATA, C.DSH_EV_HTTP_DONE,
  C.DSH_EV_HTTP_SEND

-- Scratch cdata, only used between two yields.
local copts = ffi.new("dsh_http_req_opts_t")
local out_req = ffi.new("dsh_http_req_t *[1]")
local out_client = ffi.new("dsh_http_t *[1]")
local p_data = ffi.new("const uint8_t *[1]")
local p_chars = ffi.new("const char *[1]")
local p_len = ffi.new("size_t[1]")
local stats_buf = ffi.new("dsh_http_stats_t")
local info_buf = ffi.new("dsh_http_req_info_t")
local errbuf = F.errbuf()
local header_lines, header_cap = nil, 0
local header_keep = {} -- the Lua strings header_lines points into, until start copied them

local byte, find, lower, sub = string.byte, string.find, string.lower, string.sub

local function misuse(fmt, ...)
  error(MOD .. ": " .. string.format(fmt, ...), 3)
end

-- Response headers ("Name: value\r\n" lines): lower-case names, values
-- trimmed, repeated headers joined with ", ". Lines without a colon (obsolete
-- folding) are skipped.
local function parse_headers(raw)
  local h = {}
  local pos, len = 1, #raw
  while pos <= len do
    local eol = find(raw, "\n", pos, true) or len + 1
    local colon = find(raw, ":", pos, true)
    if colon and colon < eol then
      local vs, ve = colon + 1, eol - 1
      local b = byte(raw, vs)
      while b == 32 or b == 9 do
        vs = vs + 1
        b = byte(raw, vs)
      end
      b = byte(raw, ve)
      while ve >= vs and (b == 13 or b == 32 or b == 9) do
        ve = ve - 1
        b = byte(raw, ve)
      end
      local name, value = lower(sub(raw, pos, colon - 1)), sub(raw, vs, ve)
      local old = h[name]
      h[name] = old and (old .. ", " .. value) or value
    end
    pos = eol + 1
  end
  return h
end

---@class dsh.http.Response
---@field status integer|nil HTTP status (nil until the head arrived)
---@field headers table<string,string>|nil lower-case name -> value
---@field method string
---@field url string
---@field unix_socket string|nil
local Response = {}
Response.__index = Response
Response.__tostring = function(r)
  if not r._ptr then return string.format("dsh.http.response(%s %s, closed)", r.method, r.url) end
  local st = r._st
  local state = st.aborted ~= nil and "aborted"
    or (C.dsh_http_result(r._ptr, nil, 0) ~= EAGAIN and "done" or "running")
  return string.format("dsh.http.response(%s %s, %s, %s)", r.method, r.url, tostring(r.status or "no head"),
    state)
end

-- Per-request wait state, shared with the loop: it is the request's event
-- handler (a callable table, so no closure per request) and holds the future
-- of the task waiting for the head ("w_head"), body bytes ("w_data") or room
-- in the send buffer ("w_send"). It never references the response, so a
-- response nobody closed can still be collected.
local Waits = {}

local function wake(st, key)
  local f = st[key]
  if f then
    st[key] = nil
    f:resolve()
  end
end

local function wake_all(st)
  wake(st, "w_head")
  wake(st, "w_data")
  wake(st, "w_send")
end

Waits.__call = function(st, kind)
  if kind == EV_DATA then
    wake(st, "w_data")
  elseif kind == EV_HEAD then
    wake(st, "w_head")
  elseif kind == EV_SEND then
    wake(st, "w_send")
  elseif kind == EV_DONE then
    wake_all(st)
  end
end

-- Suspend until the handler wakes key. Tasks waiting for the same thing
-- share one future; each re-checks the request's state when woken.
local function wait(st, key)
  local f = st[key]
  if not f then
    f = async.future()
    st[key] = f
  end
  f:await()
end

-- Finalizer of a request nobody closed: free it and forget its handler.
local gc_info = ffi.new("dsh_http_req_info_t")
local function gc_request(p)
  C.dsh_http_info(p, gc_info)
  loop.off(tonumber(gc_info.id))
  C.dsh_http_req_free(p)
end

-- "GET http://host/path", with the unix socket when there is one.
function Response:_what()
  local s = self.method .. " " .. self.url
  if self.unix_socket then s = s .. " (unix socket " .. self.unix_socket .. ")" end
  return s
end

-- The error of a finished or stopped request, or nil when it succeeded.
function Response:_error()
  local st = self._st
  if st.aborted ~= nil then return async.abort_error(st.aborted) end
  if not self._ptr then return errors.new("ABORTED", MOD .. ": the response was closed") end
  local rc = C.dsh_http_result(self._ptr, errbuf, F.ERRLEN)
  if rc == 0 or rc == EAGAIN then return nil end
  local what = string.format("%s: %s", self:_what(), ffi.string(errbuf))
  if rc == ETIMEDOUT then return errors.new("HTTP_TIMEOUT", what) end
  if rc == ECANCELED then return errors.new("ABORTED", what) end
  local name = F.status(rc)
  return errors.new("HTTP_ERROR", what, { status = name, limit = rc == ELIMIT or nil })
end

local function check_open(self, what)
  if getmetatable(self) ~= Response then misuse("%s: expected a response", what) end
  if not self._ptr then misuse("%s: response is closed", what) end
end

--- Wait for the response head; fills res.status and res.headers.
---@return dsh.http.Response|nil, dsh.Error?
function Response:head()
  check_open(self, "head")
  local st = self._st
  while true do
    if self.status then return self end
    if st.aborted ~= nil or not self._ptr then return nil, self:_error() end
    local status = C.dsh_http_status(self._ptr)
    if status ~= 0 then
      C.dsh_http_headers(self._ptr, p_chars, p_len)
      self.headers = parse_headers(ffi.string(p_chars[0], p_len[0]))
      self.status = status
      return self
    end
    if C.dsh_http_result(self._ptr, nil, 0) ~= EAGAIN then
      return nil, self:_error() or errors.new("HTTP_ERROR", self:_what() .. ": no response")
    end
    wait(st, "w_head")
  end
end

local READ_BYTES = 65536

--- The next body chunk (at most max_bytes, 64 KiB by default); nil at the end
-- of the body; nil, err on failure.
---@param max_bytes integer|nil
---@return string|nil, dsh.Error?
function Response:read(max_bytes)
  check_open(self, "read")
  if max_bytes == nil then
    max_bytes = READ_BYTES
  elseif type(max_bytes) ~= "number" or max_bytes < 1 then
    misuse("read: max_bytes: expected a positive number, got %s", tostring(max_bytes))
  end
  if not self.status then
    local ok, err = self:head()
    if not ok then return nil, err end
  end
  local st = self._st
  while true do
    if st.aborted ~= nil or not self._ptr then return nil, self:_error() end
    local rc = C.dsh_http_peek(self._ptr, p_data, p_len)
    if rc == 0 then
      local n = tonumber(p_len[0])
      if n > max_bytes then n = max_bytes end
      local s = ffi.string(p_data[0], n)
      C.dsh_http_consume(self._ptr, n)
      return s
    elseif rc == EEOF then
      local err = self:_error()
      if err then return nil, err end
      return nil
    end
    wait(st, "w_data")
  end
end

--- Like read, but lends everything buffered to sink(ptr, n) (ptr a
-- `const uint8_t *` valid only during the call) instead of copying it into a
-- Lua string; the bytes count as consumed. Returns true, nil at the end of the
-- body, or nil, err. For decoders in C that take the bytes straight from here.
---@param sink fun(ptr:ffi.cdata*, n:integer)
---@return boolean|nil, dsh.Error?
function Response:read_with(sink)
  check_open(self, "read_with")
  if not self.status then
    local ok, err = self:head()
    if not ok then return nil, err end
  end
  local st = self._st
  while true do
    if st.aborted ~= nil or not self._ptr then return nil, self:_error() end
    local rc = C.dsh_http_peek(self._ptr, p_data, p_len)
    if rc == 0 then
      local n = p_len[0]
      sink(p_data[0], n)
      C.dsh_http_consume(self._ptr, n)
      return true
    elseif rc == EEOF then
      local err = self:_error()
      if err then return nil, err end
      return nil
    end
    wait(st, "w_data")
  end
end

--- The whole remaining body as one string (or nil, err).
---@return string|nil, dsh.Error?
function Response:body()
  check_open(self, "body")
  local first, err = self:read()
  if not first then
    if err then return nil, err end
    return ""
  end
  local chunk
  chunk, err = self:read()
  if not chunk then -- the usual case: the body arrived in one piece
    if err then return nil, err end
    return first
  end
  local parts, n = { first, chunk }, 2
  while true do
    chunk, err = self:read()
    if err then return nil, err end
    if not chunk then return table.concat(parts, "", 1, n) end
    n = n + 1
    parts[n] = chunk
  end
end

local function stream_done_error(self)
  return self:_error()
    or errors.new("HTTP_ERROR", self:_what() .. ": the response ended before the request body was sent")
end

--- Append to a streamed request body (body_stream = true). Waits while the
-- send buffer is full. Returns true, or nil, err when the request has failed.
---@param chunk string
---@return boolean|nil, dsh.Error?
function Response:write(chunk)
  check_open(self, "write")
  errors.check(MOD, "write", chunk, "string")
  if not self._stream then misuse("write: the request was not made with body_stream = true") end
  local st = self._st
  local p, off, n = ffi.cast("const uint8_t *", chunk), 0, #chunk
  local accepted = p_len
  while off < n do
    if st.aborted ~= nil or not self._ptr then return nil, self:_error() end
    local rc = C.dsh_http_send(self._ptr, p + off, n - off, accepted)
    if rc == 0 then
      off = off + tonumber(accepted[0])
    elseif rc == EAGAIN then
      wait(st, "w_send")
    elseif rc == EEOF then
      return nil, stream_done_error(self)
    elseif rc == ESTATE then
      misuse("write: the body was already finished")
    else
      return nil, errors.new("HTTP_ERROR", MOD .. ": write: " .. select(2, F.status(rc)))
    end
  end
  return true
end

--- End a streamed request body.
---@return boolean|nil, dsh.Error?
function Response:finish()
  check_open(self, "finish")
  if not self._stream then misuse("finish: the request was not made with body_stream = true") end
  if self._st.aborted ~= nil then return nil, self:_error() end
  C.dsh_http_send_end(self._ptr)
  return true
end

--- Counters of this request: status, done, body_bytes, buffered,
-- buffered_peak, sent_bytes, send_pending.
---@return table
function Response:info()
  check_open(self, "info")
  C.dsh_http_info(self._ptr, info_buf)
  local i = info_buf
  return {
    status = i.status,
    done = i.done ~= 0,
    body_bytes = tonumber(i.body_bytes),
    buffered = tonumber(i.buffered),
    buffered_peak = tonumber(i.buffered_peak),
    sent_bytes = tonumber(i.sent_bytes),
    send_pending = tonumber(i.send_pending),
  }
end

--- Cancel the transfer if it still runs and free it. Idempotent. Tasks
-- waiting on the response get nil, ABORTED.
function Response:close()
  local ptr = self._ptr
  if not ptr then return end
  self._ptr = nil
  C.dsh_http_req_free(ffi.gc(ptr, nil))
  loop.off(self.id)
  loop.untrack(self)
  if self._off_abort then self._off_abort() end
  self._client._open[self] = nil
  wake_all(self._st)
end

---@class dsh.http.Client
local Client = {}
Client.__index = Client
Client.__tostring = function(c)
  if not c._ptr then return "dsh.http.client (closed)" end
  local n = 0
  for _ in pairs(c._open) do n = n + 1 end
  return string.format("dsh.http.client (%d open)", n)
end

--- A client: its own multi handle and connection cache. Close it when done.
---@return dsh.http.Client
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
  copts.max_buffer_bytes = opt_number(opts, "max_buffer_bytes", 2 ^ 30)
  copts.max_header_bytes = opt_number(opts, "max_header_bytes", 2 ^ 30)
  return method
end

local function clear_opts()
  copts.method, copts.url, copts.unix_socket, copts.headers, copts.body = nil, nil, nil, nil, nil
  for i = #header_keep, 1, -1 do header_keep[i] = nil end
end

---@class dsh.http.RequestOpts
---@field url string
---@field method string|nil "GET" by default
---@field unix_socket string|nil connect to this unix socket instead of the URL's host
---@field headers table<string,string|number>|nil
---@field body string|nil whole request body
---@field body_stream boolean|nil feed the body with res:write(), end it with res:finish()
---@field timeout_ms integer|nil whole transfer (0: none)
---@field connect_timeout_ms integer|nil
---@field max_buffer_bytes integer|nil response (and send) buffer bound, 1 MiB by default
---@field max_header_bytes integer|nil response head bound, 64 KiB by default
---@field signal dsh.AbortSignal|nil aborting it cancels the transfer

--- Start a request. Returns once the head arrived (at once with body_stream).
---@param opts dsh.http.RequestOpts
---@return dsh.http.Response|nil, dsh.Error?
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
  local st = setmetatable({}, Waits)
  loop.on(id, st)
  local rc = C.dsh_http_start(self._ptr, copts, id, out_req, errbuf, F.ERRLEN)
  clear_opts()
  if rc ~= 0 then
    loop.off(id)
    misuse("request: %s", ffi.string(errbuf))
  end
  local ptr = ffi.gc(out_req[0], gc_request)
  local res = setmetatable({
    id = id, method = method, url = opts.url, unix_socket = opts.unix_socket,
    _ptr = ptr, _st = st, _client = self, _stream = opts.body_stream and true or false,
  }, Response)
  loop.track(res, "http.response")
  self._open[res] = true
  if signal then
    res._off_abort = signal:on_abort(function(reason)
      if st.aborted ~= nil or not res._ptr then return end
      st.aborted = reason
      C.dsh_http_cancel(res._ptr)
      wake_all(st)
    end)
  end
  if res._stream then return res end
  local ok, err = res:head()
  if not ok then
    res:close()
    return nil, err
  end
  return res
end

--- A whole request: {status=, headers=, body=} or nil, err. Frees the request.
---@param opts dsh.http.RequestOpts
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

M.Client, M.Response = Client, Response
return M
