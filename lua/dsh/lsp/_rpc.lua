--- dsh.lsp._rpc: JSON-RPC 2.0 over the LSP base protocol, on any byte
-- transport (a language server's stdin and stdout, wherever it runs).
--
-- Framing is the core's (dsh.core.lspframe: bounded header block, bounded body,
-- strict Content-Length). Above it this module keeps request ids and the
-- pending requests, delivers notifications, answers the server's own
-- requests through a handler, and cancels with `$/cancelRequest`.
--
-- A broken stream is fatal, never skipped: a framing error, a body over
-- maxMessageBytes, invalid UTF-8, invalid JSON, a message that is not a
-- JSON-RPC object, end of stream, or a failed write. The first such failure
-- fails every pending request with it, is kept in conn.failed, and is given
-- once to on_fail (whose job is to kill the server's process group). A
-- response for an id nobody waits for (a request that was cancelled) is
-- dropped. A response whose error member is malformed answers its request
-- with LSP_MALFORMED_RESPONSE; the connection stays up.
--
-- Transport contract: read() → the next chunk | nil (end) | nil, err, whose
-- message completes the sentence "<name> ..." (e.g. "exited with code 3");
-- write(s) → true | nil, err, whose message completes it too (a server that
-- stopped reading its input has usually ended: how it ended is the news,
-- whichever of the read and the write learns of it first). Both may wait,
-- inside a task.
local async = require "dsh.async"
local errors = require "dsh.errors"
local json = require "dsh.json"
local lspframe = require "dsh.core.lspframe"
local utf8 = require "dsh.core.utf8"

local M = {}

M.METHOD_NOT_FOUND = -32601
M.REQUEST_CANCELLED = -32800

local null = json.null

--- Mark t as a JSON array (so an empty one encodes as []): dsh.json's mark.
M.array = json.array

--- JSON text of a message (tables marked with M.array stay arrays).
M.encode = json.encode

---@class dsh.lsp.Conn
---@field name string          e.g. `language server "clangd"`, the subject of messages
---@field failed dsh.Error|nil the fatal failure, once there is one
local Conn = {}
Conn.__index = Conn
Conn.__tostring = function(c)
  local n = 0
  for _ in pairs(c._pending) do n = n + 1 end
  return string.format("dsh.lsp.conn(%s, %d pending%s)", c.name, n,
    c.failed and ", failed" or (c._closed and ", closed" or ""))
end

local function server_error(self, fmt, ...)
  return errors.new("LSP_SERVER_FAILED", self.name .. " " .. string.format(fmt, ...))
end

---@class dsh.lsp.ConnOpts
---@field name string
---@field read fun():string|nil, dsh.Error|nil
---@field write fun(s:string):boolean|nil, dsh.Error|nil
---@field maxMessageBytes integer
---@field on_request fun(method:string, params:any):any, table|nil  result (or a function that returns it,
---                                  run in a task of its own), or nil and {code=, message=}
---@field on_notification fun(method:string, params:any)|nil
---@field on_fail fun(err:dsh.Error)|nil
---@field cancelGraceMs integer|nil  after a cancel, how long the server may take to answer before
---                                  the connection counts as failed

--- Start a connection: a task reads and dispatches until the stream ends.
---@param o dsh.lsp.ConnOpts
---@return dsh.lsp.Conn
function M.new(o)
  local self = setmetatable({
    name = o.name, _o = o, _pending = {}, _next_id = 1,
    _decoder = lspframe.decoder(o.maxMessageBytes),
    _ctl = async.controller(), -- aborts the watchdogs on close
  }, Conn)
  self._reader = async.run(function()
    local ok, err = xpcall(Conn._read_loop, debug.traceback, self)
    if not ok then
      self:fail(errors.new("LSP_SERVER_FAILED", "dsh.lsp: internal error while reading from " .. self.name
        .. ": " .. tostring(err)))
    end
  end)
  return self
end

--- Fail the connection (first failure wins): every pending request gets err.
function Conn:fail(err, quiet)
  if self.failed then return end
  self.failed = err
  local pending = self._pending
  self._pending = {}
  for _, p in pairs(pending) do p.future:resolve(nil, err) end
  if self._decoder then
    self._decoder:close()
    self._decoder = nil
  end
  self._ctl:abort("connection failed")
  if self._o.on_fail and not quiet then self._o.on_fail(err) end
end

function Conn:_read_loop()
  while not self.failed do
    local chunk, rerr = self._o.read()
    if self.failed then return end
    if not chunk then
      if rerr then return self:fail(server_error(self, "%s", tostring(rerr.message or rerr))) end
      local ok, ferr = self._decoder:finish()
      if not ok then return self:fail(server_error(self, "sent a bad message: %s", ferr.message)) end
      return self:fail(server_error(self, "closed its output"))
    end
    local bodies, ferr, before = self._decoder:push(chunk)
    for _, body in ipairs(bodies or before) do
      self:_dispatch(body)
      if self.failed then return end
    end
    if not bodies then return self:fail(server_error(self, "sent a bad message: %s", ferr.message)) end
  end
end

local function is_id(v)
  return (type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge) or type(v) == "string"
end

function Conn:_dispatch(body)
  local ok, uerr = utf8.validate(body)
  if not ok then
    return self:fail(server_error(self, "sent a message that is not valid UTF-8 (byte %d)", uerr.position))
  end
  local msg, jerr = json.decode(body)
  if msg == nil then return self:fail(server_error(self, "sent invalid JSON: %s", jerr.message)) end
  if type(msg) ~= "table" or msg[1] ~= nil then
    return self:fail(server_error(self, "sent a message that is not a JSON-RPC object"))
  end
  local method, id = msg.method, msg.id
  if method ~= nil then
    if type(method) ~= "string" then
      return self:fail(server_error(self, "sent a message whose method is not a string"))
    end
    if id ~= nil and id ~= null then
      if not is_id(id) then return self:fail(server_error(self, "sent a request with an invalid id")) end
      return self:_answer(id, method, msg.params)
    end
    if self._o.on_notification then self._o.on_notification(method, msg.params) end
    return
  end
  if id == nil or (id ~= null and not is_id(id)) or (msg.result == nil and msg.error == nil) then
    return self:fail(server_error(self, "sent a message that is neither a request, a notification nor a response"))
  end
  local p = self._pending[id]
  if not p then return end -- a late answer to a cancelled request
  self._pending[id] = nil
  local e = msg.error
  if e ~= nil and e ~= null then
    if type(e) ~= "table" or type(e.code) ~= "number" or type(e.message) ~= "string" then
      return p.future:resolve(nil, errors.new("LSP_MALFORMED_RESPONSE",
        self.name .. " answered " .. p.method .. " with a malformed error"))
    end
    return p.future:resolve(nil, errors.new("LSP_REQUEST_FAILED",
      string.format("%s failed %s: %s (code %d)", self.name, p.method, e.message, e.code),
      { rpcCode = e.code, data = e.data }))
  end
  local result = msg.result
  if result == null then result = nil end
  p.future:resolve(true, result)
end

function Conn:_answer(id, method, params)
  local result, rpcerr = self._o.on_request(method, params)
  -- answered from a task of its own: the read loop never waits on a write,
  -- nor on a handler that returned a function (it runs there: its answer)
  async.run(function()
    if type(result) == "function" then
      local ok, r, e = pcall(result)
      if ok then result, rpcerr = r, e else result, rpcerr = nil, { code = -32603, message = tostring(r) } end
    end
    local msg = { jsonrpc = "2.0", id = id }
    if rpcerr then
      msg.error = { code = rpcerr.code, message = rpcerr.message }
    else
      msg.result = result == nil and null or result
    end
    self:_send(msg)
  end):on_settle(function() end)
end

function Conn:_send(msg)
  if self.failed then return nil, self.failed end
  local ok, werr = self._o.write(lspframe.encode(M.encode(msg)))
  if not ok then
    self:fail(server_error(self, "%s", tostring(werr and werr.message or werr)))
    return nil, self.failed
  end
  return true
end

--- Send a notification: true, or nil, err when the connection failed.
---@param method string
---@param params any
function Conn:notify(method, params)
  return self:_send { jsonrpc = "2.0", method = method, params = params }
end

--- Send a request and wait for its answer: result (nil for null), or nil,
--- err (LSP_REQUEST_FAILED with err.rpcCode, LSP_SERVER_FAILED, ABORTED).
--- On abort the request is cancelled with $/cancelRequest; when the server
--- does not answer it within cancelGraceMs, the connection fails.
---@param method string
---@param params any
---@param signal dsh.AbortSignal|nil
---@return any, dsh.Error|nil
function Conn:request(method, params, signal)
  if self.failed then return nil, self.failed end
  if signal and signal.aborted then return nil, async.abort_error(signal.reason) end
  local id = self._next_id
  self._next_id = id + 1
  local p = { future = async.future(), method = method }
  self._pending[id] = p
  local ok, err = self:_send { jsonrpc = "2.0", id = id, method = method, params = params }
  if not ok then return nil, err end
  if signal then
    local _, aerr = async.race_signal(p.future, signal)
    if not p.future:done() then
      self:_cancel(id, p)
      return nil, aerr
    end
  end
  local done, v = p.future:await()
  if not done then return nil, v end
  return v
end

function Conn:_cancel(id, p)
  if self.failed then return end
  self:notify("$/cancelRequest", { id = id })
  local grace = self._o.cancelGraceMs
  if not grace then return end
  local stop = self._ctl.signal
  async.run(function()
    async.sleep(grace, stop)
    if stop.aborted or p.future:done() then return end
    self:fail(server_error(self, "did not answer the cancelled %s within %d ms", p.method, grace))
  end):on_settle(function() end)
end

--- Number of requests waiting for an answer.
function Conn:pending_count()
  local n = 0
  for _ in pairs(self._pending) do n = n + 1 end
  return n
end

--- Stop reading and fail what is pending (the transport is the owner's to close).
function Conn:close()
  if self._closed then return end
  self._closed = true
  self:fail(errors.new("LSP_SERVER_FAILED", self.name .. " connection closed"), true)
end

return M
