--- dsh.lsp._instance: one running language server for one workspace.
--
-- Started through a subprocess seam (ctx.subprocess: in the sandbox or on
-- the host, the same code) as a managed process group whose stdin and stdout
-- carry the protocol and whose stderr keeps a bounded tail. Then
-- `initialize` (processId null: the server lives in another PID namespace;
-- utf-16 positions required), `initialized`, and queries. Documents stay
-- open while their content is unchanged (the source reader's token says so);
-- a changed one gets didChange with the full text, or is closed and opened
-- again when the server takes no changes; at most MAX_OPEN stay open.
-- Published diagnostics are kept per path with the version they describe.
--
-- A transport failure (the process exits, its stream is malformed, a write
-- fails, a cancelled request stays unanswered) marks the instance dead
-- (inst.dead) and kills its group at once. dispose(): shutdown and exit
-- within shutdownTimeoutMs, then TERM, KILL after killGraceMs, and wait
-- until the whole group is gone.
local async = require "dsh.async"
local errors = require "dsh.errors"
local json = require "dsh.json"
local loop = require "dsh.loop"
local normalize = require "dsh.lsp._normalize"
local rpc = require "dsh.lsp._rpc"
local uri = require "dsh.lsp.uri"

local M = {}

M.MAX_OPEN = 64
M.STDERR_IN_MESSAGES = 2000

local null = json.null

---@class dsh.lsp.Instance
---@field name string         `language server "<id>"`
---@field workspace string    canonical workspace root
---@field dead dsh.Error|nil  why the transport failed, once it did
local Instance = {}
Instance.__index = Instance
Instance.__tostring = function(i)
  return string.format("dsh.lsp.instance(%s, %s%s)", i.name, i.workspace,
    i.dead and ", dead" or (i._disposed and ", disposed" or ""))
end

local function client_capabilities()
  return {
    general = { positionEncodings = { "utf-16" } },
    workspace = { workspaceFolders = true, configuration = true, symbol = { dynamicRegistration = false } },
    textDocument = {
      synchronization = { dynamicRegistration = false, didSave = false },
      hover = { contentFormat = { "markdown", "plaintext" } },
      definition = { linkSupport = true },
      implementation = { linkSupport = true },
      references = {},
      documentSymbol = { hierarchicalDocumentSymbolSupport = true },
      callHierarchy = {},
      publishDiagnostics = { versionSupport = true },
      diagnostic = {},
    },
  }
end

local function stderr_tail(h)
  local t = h.stderr and h.stderr:readFrom(0).text or ""
  t = t:gsub("%s+$", "")
  if t == "" then return "" end
  if #t > M.STDERR_IN_MESSAGES then t = "…" .. t:sub(-M.STDERR_IN_MESSAGES) end
  return "; stderr: " .. t
end

-- A process's outcome {exitCode=, signal=}, or nil, err (the start failed,
-- the process was lost, or signal aborted the wait).
local function outcome(h, signal)
  return async.await(h.done, signal)
end

local function outcome_text(o, err)
  if not o then
    local why = tostring(type(err) == "table" and err.message or err)
    return (err and err.code == "SUBPROCESS_START" and "could not start: " or "ended: ") .. why
  end
  if o.signal then return "was killed by " .. o.signal end
  return "exited with code " .. tostring(o.exitCode)
end

---@class dsh.lsp.InstanceOpts
---@field server table        a validated server config with argv (resolved command + args)
---@field workspace string    canonical workspace root
---@field subprocess table    the subprocess seam to start it with
---@field uri_of fun(path:string):string

--- Spawn and initialize a server: the instance, or nil, err.
---@param o dsh.lsp.InstanceOpts
---@param signal dsh.AbortSignal|nil
---@return dsh.lsp.Instance|nil, dsh.Error|nil
function M.start(o, signal)
  local s = o.server
  local self = setmetatable({
    name = 'language server "' .. s.id .. '"', workspace = o.workspace, _s = s, _uri = o.uri_of,
    _docs = {}, _order = 0, _diags = {}, _diag_waiters = {},
  }, Instance)
  local h, err = o.subprocess:spawn {
    argv = s.argv, cwd = o.workspace, env = s.env, graceMs = s.killGraceMs,
    stdio = { stdin = "pipe", stdout = "pipe", stderr = { maxBytes = s.maxStderrBytes } },
  }
  if not h then return nil, err end
  self._h = h
  self._conn = rpc.new {
    name = self.name, maxMessageBytes = s.maxMessageBytes, cancelGraceMs = s.killGraceMs,
    write = function(b) return h.stdin:write(b) end,
    read = function()
      local chunk, rerr = h.stdout:read()
      if chunk then return chunk end
      if rerr then
        return nil, errors.new("LSP_SERVER_FAILED", "failed: " .. tostring(rerr.message or rerr) .. stderr_tail(h))
      end
      -- end of output: say how the process ended
      local res, oerr = outcome(h)
      return nil, errors.new("LSP_SERVER_FAILED", outcome_text(res, oerr) .. stderr_tail(h))
    end,
    on_request = function(method, params) return self:_on_request(method, params) end,
    on_notification = function(method, params) self:_on_notification(method, params) end,
    on_fail = function(ferr) self:_die(ferr) end,
  }
  local ws_uri = o.uri_of(o.workspace)
  local res, ierr = self._conn:request("initialize", {
    processId = null, clientInfo = { name = "dsh" }, rootUri = ws_uri, rootPath = o.workspace,
    workspaceFolders = { { uri = ws_uri, name = "workspace" } },
    initializationOptions = s.initializationOptions == nil and null or s.initializationOptions,
    capabilities = client_capabilities(),
  }, signal)
  if not res then
    self:dispose()
    return nil, ierr
  end
  local caps = type(res) == "table" and res.capabilities
  if type(caps) ~= "table" then
    self:dispose()
    return nil, errors.new("LSP_MALFORMED_RESPONSE", self.name .. " returned a malformed initialize result")
  end
  local enc = caps.positionEncoding
  if enc ~= nil and enc ~= null and enc ~= "utf-16" then
    self:dispose()
    return nil, errors.new("LSP_SERVER_FAILED", string.format(
      '%s chose position encoding "%s"; dsh requires "utf-16"', self.name, tostring(enc)))
  end
  self.capabilities = caps
  local ok, nerr = self._conn:notify("initialized", {})
  if not ok then
    self:dispose()
    return nil, nerr
  end
  return self
end

-- Server requests (reference §2.5): configuration from config, null for the
-- registration and progress requests, "method not found" for the rest.
function Instance:_on_request(method, params)
  if method == "workspace/configuration" then
    local items = type(params) == "table" and type(params.items) == "table" and params.items or {}
    local out = rpc.array()
    local v = self._s.configuration
    for i = 1, #items do out[i] = v == nil and null or v end
    return out
  end
  if method == "window/workDoneProgress/create" or method == "client/registerCapability"
    or method == "client/unregisterCapability" then
    return null
  end
  return nil, { code = rpc.METHOD_NOT_FOUND, message = "method not found: " .. method }
end

function Instance:_on_notification(method, params)
  if method ~= "textDocument/publishDiagnostics" or type(params) ~= "table" then return end
  local path = uri.to_path(params.uri)
  if not path then return end
  local list = normalize.diagnostics(self.name, params.diagnostics)
  if not list then return end -- a malformed publication is ignored, as if never sent
  self._seq = (self._seq or 0) + 1
  local v = params.version
  self._diags[path] = { items = list, version = type(v) == "number" and v or nil, seq = self._seq }
  local w = self._diag_waiters[path]
  if w then
    self._diag_waiters[path] = nil
    w:resolve()
  end
end

-- The transport failed: remember why, kill the group now. Nobody reads its
-- output any more: closing the pipe keeps a producer blocked on a full pipe
-- (a huge message) from holding up the process's end.
function Instance:_die(err)
  if self.dead then return end
  self.dead = err
  if self._h then
    self._h:terminate()
    self._h.stdout:close()
  end
  for _, w in pairs(self._diag_waiters) do w:resolve() end
  self._diag_waiters = {}
end

-- Documents --------------------------------------------------------------------

function Instance:_sync_kinds()
  local sync = self.capabilities.textDocumentSync
  if type(sync) == "number" then return true, sync end
  if type(sync) == "table" then
    return sync.openClose == true, type(sync.change) == "number" and sync.change or 0
  end
  return false, 0
end

--- True when the server can open documents (textDocumentSync.openClose).
function Instance:can_open()
  return (self:_sync_kinds())
end

--- The reader token of the content open for path, if any.
function Instance:token(path)
  local d = self._docs[path]
  return d and d.token or nil
end

function Instance:_close_oldest()
  local n, oldest, op = 0, nil, nil
  for p, d in pairs(self._docs) do
    n = n + 1
    if not oldest or d.used < oldest then oldest, op = d.used, p end
  end
  if n < M.MAX_OPEN then return true end
  self._docs[op] = nil
  self._diags[op] = nil
  return self._conn:notify("textDocument/didClose", { textDocument = { uri = self._uri(op) } })
end

--- Make the server see content src ({token, text?}) for path: nothing when
--- it already has that token; didOpen, didChange or close and reopen.
--- Returns true, or false when the text is needed but src has none, or nil, err.
function Instance:sync(path, language, src)
  self._order = self._order + 1
  local d = self._docs[path]
  if d and d.token == src.token then
    d.used = self._order
    return true
  end
  if src.text == nil then return false end
  local u = self._uri(path)
  local _, change = self:_sync_kinds()
  local ok, err
  if d and change ~= 0 then
    d.version = d.version + 1
    d.token, d.used = src.token, self._order
    d.sent = (self._seq or 0)
    ok, err = self._conn:notify("textDocument/didChange", {
      textDocument = { uri = u, version = d.version }, contentChanges = { { text = src.text } },
    })
  else
    local version = 1
    if d then
      version = d.version + 1
      self._docs[path] = nil
      ok, err = self._conn:notify("textDocument/didClose", { textDocument = { uri = u } })
      if not ok then return nil, err end
    else
      ok, err = self:_close_oldest()
      if not ok then return nil, err end
    end
    self._diags[path] = nil
    self._docs[path] = { version = version, token = src.token, used = self._order, sent = (self._seq or 0) }
    ok, err = self._conn:notify("textDocument/didOpen", {
      textDocument = { uri = u, languageId = language, version = version, text = src.text },
    })
  end
  if not ok then return nil, err end
  return true
end

--- Send a request on this instance's connection.
function Instance:request(method, params, signal)
  return self._conn:request(method, params, signal)
end

--- The diagnostics published for path's open version: waits (at most
--- wait_ms) until the server published for it after the latest change.
--- Returns the list and whether it describes the current content.
function Instance:published(path, wait_ms, signal)
  local d = self._docs[path]
  local function current()
    local got = self._diags[path]
    if not got or not d then return nil end
    if got.version then return got.version == d.version and got end
    return got.seq > d.sent and got
  end
  local deadline = loop.now_ms() + wait_ms
  while not current() and not self.dead do
    local left = deadline - loop.now_ms()
    if left <= 0 then break end
    local w = self._diag_waiters[path] or async.future()
    self._diag_waiters[path] = w
    local ctl = async.controller()
    local off = signal and signal:on_abort(function(r) ctl:abort(r) end)
    async.run(function()
      async.sleep(left, ctl.signal)
      w:resolve()
    end)
    w:await()
    if self._diag_waiters[path] == w then self._diag_waiters[path] = nil end
    ctl:abort("done")
    if off then off() end
    if signal and signal.aborted then return nil, async.abort_error(signal.reason) end
  end
  if self.dead then return nil, self.dead end
  local got = current()
  if got then return got.items, true end
  local stale = self._diags[path]
  return stale and stale.items or {}, false
end

-- Teardown --------------------------------------------------------------------

--- Shut the server down and wait until its whole group is gone (idempotent).
function Instance:dispose()
  if self._disposed then return self._disposed:await() end
  self._disposed = async.future()
  local h, conn = self._h, self._conn
  if h and conn and not self.dead and self.capabilities then
    async.timeout(self._s.shutdownTimeoutMs, function(sig)
      conn:request("shutdown", nil, sig)
      if not conn.failed and not sig.aborted then conn:notify("exit", nil) end
      h.stdin:close()
      outcome(h, sig)
    end)
  end
  if conn then conn:close() end
  if h then
    h:terminate()
    h.stdout:close()
    outcome(h)
    h:waitForExit()
  end
  for _, w in pairs(self._diag_waiters) do w:resolve() end
  self._diag_waiters = {}
  self._disposed:resolve(true)
  return true
end

return M
