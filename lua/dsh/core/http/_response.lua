--- dsh.core.http._response: the response object of dsh.core.http (private).
--
-- A response is one request of a client: it waits for the head, lends or
-- copies body bytes as they arrive, feeds a streamed request body, and maps
-- the core's result to nil, err (HTTP_ERROR, HTTP_TIMEOUT, HTTP_STALLED,
-- ABORTED). Its per-request wait state is the loop handler of the request id.
-- Created by dsh.core.http's Client:request through M.open; see dsh.core.http for the
-- API.
local F = require "dsh.core._ffi"
local async = require "dsh.async"
local errors = require "dsh.errors"
local loop = require "dsh.core.loop"

local ffi, C = F.ffi, F.C
local MOD = "dsh.core.http"

local M = {}

local EAGAIN, ELIMIT, ESTATE = C.DSH_EAGAIN, C.DSH_ELIMIT, C.DSH_ESTATE
local ETIMEDOUT, ECANCELED, EEOF = C.DSH_ETIMEDOUT, C.DSH_ECANCELED, C.DSH_EEOF
local EV_HEAD, EV_DATA, EV_DONE, EV_SEND = C.DSH_EV_HTTP_HEAD, C.DSH_EV_HTTP_DATA, C.DSH_EV_HTTP_DONE,
  C.DSH_EV_HTTP_SEND

-- Scratch cdata, only used between two yields.
local p_data = ffi.new("const uint8_t *[1]")
local p_chars = ffi.new("const char *[1]")
local p_len = ffi.new("size_t[1]")
local info_buf = ffi.new("dsh_http_req_info_t")
local errbuf = F.errbuf()

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

---@class dsh.core.http.Response
---@field status integer|nil HTTP status (nil until the head arrived)
---@field headers table<string,string>|nil lower-case name -> value
---@field method string
---@field url string
---@field unix_socket string|nil
local Response = {}
Response.__index = Response
Response.__tostring = function(r)
  if not r._ptr then return string.format("dsh.core.http.response(%s %s, closed)", r.method, r.url) end
  local st = r._st
  local state = st.aborted ~= nil and "aborted"
    or (C.dsh_http_result(r._ptr, nil, 0) ~= EAGAIN and "done" or "running")
  return string.format("dsh.core.http.response(%s %s, %s, %s)", r.method, r.url, tostring(r.status or "no head"),
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
  if rc == ETIMEDOUT then
    C.dsh_http_info(self._ptr, info_buf)
    if info_buf.stalled ~= 0 then return errors.new("HTTP_STALLED", what, { stall_ms = self.stall_ms }) end
    return errors.new("HTTP_TIMEOUT", what)
  end
  if rc == ECANCELED then return errors.new("ABORTED", what) end
  local name = F.status(rc)
  return errors.new("HTTP_ERROR", what, { status = name, limit = rc == ELIMIT or nil })
end

local function check_open(self, what)
  if getmetatable(self) ~= Response then misuse("%s: expected a response", what) end
  if not self._ptr then misuse("%s: response is closed", what) end
end

--- Wait for the response head; fills res.status and res.headers.
---@return dsh.core.http.Response|nil, dsh.Error?
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

-- Wait for the head, then for body bytes: the buffer's pointer and length
-- (valid until consumed); nil at the end of the body; nil, err on failure.
local function buffered(self)
  if not self.status then
    local ok, err = self:head()
    if not ok then return nil, err end
  end
  local st = self._st
  while true do
    if st.aborted ~= nil or not self._ptr then return nil, self:_error() end
    local rc = C.dsh_http_peek(self._ptr, p_data, p_len)
    if rc == 0 then return p_data[0], p_len[0] end
    if rc == EEOF then return nil, self:_error() end
    wait(st, "w_data")
  end
end

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
  local ptr, n = buffered(self)
  if not ptr then return nil, n end
  n = tonumber(n)
  if n > max_bytes then n = max_bytes end
  local s = ffi.string(ptr, n)
  C.dsh_http_consume(self._ptr, n)
  return s
end

--- Like read, but lends everything buffered to sink(ptr, n) (ptr a
-- `const uint8_t *` valid only during the call) instead of copying it into a
-- Lua string; the bytes count as consumed. Returns true, nil at the end of the
-- body, or nil, err. For decoders in C that take the bytes straight from here.
---@param sink fun(ptr:ffi.cdata*, n:integer)
---@return boolean|nil, dsh.Error?
function Response:read_with(sink)
  check_open(self, "read_with")
  local ptr, n = buffered(self)
  if not ptr then return nil, n end
  sink(ptr, n)
  C.dsh_http_consume(self._ptr, n)
  return true
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

--- The wait state of a new request: register it as the loop handler of the
-- request's id before starting the request.
function M.new_state()
  return setmetatable({}, Waits)
end

--- Wrap a started request (ptr, not yet under ffi.gc) of client as a
-- response; with opts.signal, aborting the signal cancels the transfer.
---@return dsh.core.http.Response
function M.open(client, ptr, id, st, method, opts)
  local res = setmetatable({
    id = id, method = method, url = opts.url, unix_socket = opts.unix_socket, stall_ms = opts.stall_timeout_ms,
    _ptr = ffi.gc(ptr, gc_request), _st = st, _client = client, _stream = opts.body_stream and true or false,
  }, Response)
  loop.track(res, "http.response")
  client._open[res] = true
  local signal = opts.signal
  if signal then
    res._off_abort = signal:on_abort(function(reason)
      if st.aborted ~= nil or not res._ptr then return end
      st.aborted = reason
      C.dsh_http_cancel(res._ptr)
      wake_all(st)
    end)
  end
  return res
end

M.Response = Response
return M
