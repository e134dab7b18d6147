--- dsh.lsp._provider: one configured language server as a ctx.lsp provider,
-- written once for every backend (reference §2.5 "query").
--
-- A backend gives a subprocess seam (where servers and the source reader
-- run), the resolved argv, and its message prefix; everything else is here:
--   1. disposed → LSP_DISPOSED "<prefix> provider is disposed"; aborted → ABORTED
--      carrying the exact reason;
--   2. the workspace root and the source resolve canonically (one reader
--      round trip): root must be a directory, the source inside it;
--   3. one queue per canonical workspace (different workspaces in parallel);
--   4. the source is read by the reader (no final symlink followed, regular
--      file, size limit, "grew while reading", valid UTF-8);
--   5. one pooled instance per canonical workspace; on that instance's own
--      transport failure it is disposed, evicted, and the query is retried
--      once on a fresh one; a dead instance is always evicted afterwards.
-- Operations beyond the reference (documentSymbol, workspaceSymbol, calls,
-- diagnostics) follow the same steps.
local async = require "dsh.async"
local errors = require "dsh.errors"
local instance = require "dsh.lsp._instance"
local json = require "dsh.json"
local normalize = require "dsh.lsp._normalize"
local queue = require "dsh.lsp._queue"
local utf8 = require "dsh.utf8"

local M = {}

-- The capability each operation needs.
M.CAPABILITY = {
  goToDefinition = "definitionProvider", findReferences = "referencesProvider",
  goToImplementation = "implementationProvider", hover = "hoverProvider",
  documentSymbol = "documentSymbolProvider", workspaceSymbol = "workspaceSymbolProvider",
  incomingCalls = "callHierarchyProvider", outgoingCalls = "callHierarchyProvider",
}

local LOCATION_METHODS = {
  goToDefinition = "textDocument/definition", findReferences = "textDocument/references",
  goToImplementation = "textDocument/implementation",
}

---@class dsh.lsp.Provider
---@field id string
---@field extensionToLanguage table<string,string>
local Provider = {}
Provider.__index = Provider
Provider.__tostring = function(p)
  local n = 0
  for _ in pairs(p._pool) do n = n + 1 end
  return string.format("%s provider %q (%d instances%s)", p._prefix, p.id, n, p._disposed and ", disposed" or "")
end

---@class dsh.lsp.ProviderOpts
---@field prefix string      "lsp-e2b", "lsp-local"
---@field where string       "remote " or "": how messages name paths
---@field server table       validated server config with argv
---@field subprocess table   the subprocess seam servers run through
---@field reader dsh.lsp.Reader
---@field uri_of fun(path:string):string
---@field before_read fun(path:string)|nil  called right before the reader opens a source (specs)

---@param o dsh.lsp.ProviderOpts
---@return dsh.lsp.Provider
function M.new(o)
  local lower = {}
  for ext, lang in pairs(o.server.extensionToLanguage) do
    if type(ext) == "string" then lower[ext:lower()] = lang end
  end
  return setmetatable({
    id = o.server.id, extensionToLanguage = o.server.extensionToLanguage, _language = lower,
    _o = o, _prefix = o.prefix, _s = o.server, _pool = {}, _queue = queue.new(),
    _stop = async.controller(), -- aborts running queries when disposal cannot wait any longer
  }, Provider)
end

local function E(code, fmt, ...)
  return errors.new(code, string.format(fmt, ...))
end

local function inside(root, path)
  if path == root then return true end
  local prefix = root == "/" and "/" or root .. "/"
  return path:sub(1, #prefix) == prefix
end

-- Steps 2: canonical workspace and source.
function Provider:_resolve(req, signal)
  local root, file = req.workspaceRoot, req.filePath
  local abs = file:sub(1, 1) == "/" and file or (root:gsub("/+$", "") .. "/" .. file)
  local res, err = self._o.reader:resolve({ root, abs }, signal)
  if not res then return nil, err end
  local ws, src = res[1], res[2]
  if ws.kind == "error" then
    return nil, E("LSP_INVALID_WORKSPACE", '%spath "%s" did not resolve canonically (%s)', self._o.where, root,
      ws.message)
  end
  if ws.kind ~= "dir" then return nil, E("LSP_INVALID_WORKSPACE", 'workspace root "%s" is not a directory', root) end
  if src.kind == "error" then
    return nil, E("LSP_INVALID_SOURCE", 'source "%s" did not resolve canonically (%s)', file, src.message)
  end
  if not inside(ws.path, src.path) then
    return nil, E("LSP_INVALID_SOURCE", 'source "%s" resolves outside the workspace', file)
  end
  return ws.path, src.path
end

-- Step 4: the source's content as {token, text?}, or nil, err.
function Provider:_read(file, path, have, signal)
  if self._o.before_read then self._o.before_read(path) end
  local max = self._s.maxDocumentBytes
  local r, err = self._o.reader:read(path, max, have, signal)
  if not r then return nil, err end
  local function bad(fmt, ...)
    return nil, E("LSP_INVALID_SOURCE", 'source "%s" ' .. fmt, file, ...)
  end
  if r.kind == "not-file" then return bad("is not a regular file") end
  if r.kind == "oversize" then return bad("is %d bytes, over the %d-byte limit", r.size, max) end
  if r.kind == "grew" then return bad("grew past the %d-byte limit while reading", max) end
  if r.kind == "open-error" then return bad("could not be opened safely: %s", r.message) end
  if r.kind == "ok" and not utf8.validate(r.text) then return bad("is not valid UTF-8 text") end
  return { token = r.token, text = r.text }
end

function Provider:_instance(ws, signal)
  local inst = self._pool[ws]
  if inst and not inst.dead then return inst end
  if inst then self:_evict(ws, inst) end
  local err
  inst, err = instance.start({
    server = self._s, workspace = ws, subprocess = self._o.subprocess, uri_of = self._o.uri_of,
  }, signal)
  if not inst then return nil, err end
  self._pool[ws] = inst
  return inst
end

function Provider:_evict(ws, inst)
  if self._pool[ws] == inst then self._pool[ws] = nil end
  inst:dispose()
end

-- One operation on a synced instance.
function Provider:_run_op(inst, req, path, signal)
  local op = req.operation
  local u = self._o.uri_of(path)
  local doc = { uri = u }
  local method = LOCATION_METHODS[op]
  if method then
    local params = { textDocument = doc, position = req.position }
    if op == "findReferences" then params.context = { includeDeclaration = true } end
    local res, err = inst:request(method, params, signal)
    if err then return nil, err end
    local locs, nerr = normalize.locations(inst.name, res)
    if not locs then return nil, nerr end
    return { kind = "locations", locations = locs, resolvedWorkspaceUri = self._o.uri_of(inst.workspace) }
  elseif op == "hover" then
    local res, err = inst:request("textDocument/hover", { textDocument = doc, position = req.position }, signal)
    if err then return nil, err end
    local h, nerr = normalize.hover(inst.name, res)
    if nerr then return nil, nerr end
    return { kind = "hover", hover = h }
  elseif op == "documentSymbol" or op == "workspaceSymbol" then
    local res, err
    if op == "documentSymbol" then
      res, err = inst:request("textDocument/documentSymbol", { textDocument = doc }, signal)
    else
      res, err = inst:request("workspace/symbol", { query = req.query }, signal)
    end
    if err then return nil, err end
    local syms, nerr = normalize.symbols(inst.name, res, u)
    if not syms then return nil, nerr end
    return { kind = "symbols", symbols = syms, resolvedWorkspaceUri = self._o.uri_of(inst.workspace) }
  elseif op == "incomingCalls" or op == "outgoingCalls" then
    local items, err = inst:request("textDocument/prepareCallHierarchy",
      { textDocument = doc, position = req.position }, signal)
    if err then return nil, err end
    local out = { kind = "calls", direction = op == "incomingCalls" and "incoming" or "outgoing", calls = {},
      resolvedWorkspaceUri = self._o.uri_of(inst.workspace) }
    if items == nil then return out end
    local item = type(items) == "table" and items[1]
    if type(items) ~= "table" or (item ~= nil and not normalize.call_item(item)) then
      return nil, errors.new("LSP_MALFORMED_RESPONSE", inst.name .. " returned a malformed call hierarchy item")
    end
    if item == nil then return out end
    out.item = normalize.call_item(item)
    local res, cerr = inst:request("callHierarchy/" .. op, { item = item }, signal)
    if cerr then return nil, cerr end
    local calls, nerr = normalize.calls(inst.name, res, op == "incomingCalls" and "from" or "to")
    if not calls then return nil, nerr end
    out.calls = calls
    return out
  elseif op == "diagnostics" then
    if inst.capabilities.diagnosticProvider then
      local res, err = inst:request("textDocument/diagnostic", { textDocument = doc }, signal)
      if err then return nil, err end
      local list, nerr = normalize.diagnostics(inst.name, type(res) == "table" and res.items or nil)
      if not list then return nil, nerr end
      return { kind = "diagnostics", diagnostics = list, settled = true, uri = u,
        resolvedWorkspaceUri = self._o.uri_of(inst.workspace) }
    end
    local list, settled = inst:published(path, req.waitMs, signal)
    if not list then return nil, settled end
    return { kind = "diagnostics", diagnostics = list, settled = settled, uri = u,
      resolvedWorkspaceUri = self._o.uri_of(inst.workspace) }
  end
  error("dsh.lsp: unknown operation " .. tostring(op)) -- the seam checked it
end

-- A server that advertises a capability but answers "method not found"
-- does not support the operation after all.
function Provider:_run(inst, req, path, signal)
  local res, err = self:_run_op(inst, req, path, signal)
  if not res and err and err.rpcCode == -32601 then
    return nil, E("LSP_UNSUPPORTED_OPERATION", "%s does not support %s (%s)", inst.name, req.operation, err.message)
  end
  return res, err
end

local function check(inst, op)
  local cap = M.CAPABILITY[op]
  local v = cap and inst.capabilities[cap]
  if cap and (v == nil or v == false or v == json.null) then
    return nil, E("LSP_UNSUPPORTED_OPERATION", "%s does not support %s", inst.name, op)
  end
  if not inst:can_open() then
    return nil, E("LSP_UNSUPPORTED_OPERATION", "%s does not support %s: it does not open documents "
      .. "(textDocumentSync.openClose)", inst.name, op)
  end
  return true
end

local function transport_failure(inst, err)
  return inst.dead ~= nil and err ~= nil and err.code == "LSP_SERVER_FAILED"
end

-- Steps 4 and 5 once the workspace's turn came.
function Provider:_query_locked(req, ws, path, signal)
  local pooled = self._pool[ws]
  local have = pooled and not pooled.dead and pooled:token(path) or nil
  local src, err = self:_read(req.filePath, path, have, signal)
  if not src then return nil, err end
  local ext = (req.filePath:match("(%.[^./]+)$") or ""):lower()
  local language = self._language[ext] or "plaintext"
  for attempt = 1, 2 do
    local inst, ierr = self:_instance(ws, signal)
    if not inst then return nil, ierr end
    local ok, cerr = check(inst, req.operation)
    if not ok then return nil, cerr end
    local synced, serr = inst:sync(path, language, src)
    if synced == false then
      src, err = self:_read(req.filePath, path, nil, signal) -- a fresh instance needs the text
      if not src then return nil, err end
      synced, serr = inst:sync(path, language, src)
    end
    local res, rerr
    if synced then res, rerr = self:_run(inst, req, path, signal) else rerr = serr end
    if inst.dead then self:_evict(ws, inst) end
    if res then return res end
    if attempt == 2 or not transport_failure(inst, rerr) or (signal and signal.aborted) then return nil, rerr end
  end
end

--- Answer a validated request (see dsh.lsp): a result, or nil, err.
---@param req table
---@param signal dsh.AbortSignal|nil
function Provider:query(req, signal)
  if self._disposed then return nil, E("LSP_DISPOSED", "%s provider is disposed", self._prefix) end
  if signal and signal.aborted then return nil, async.abort_error(signal.reason) end
  -- the caller's signal, or disposal giving up on waiting
  local ctl = async.controller()
  local off1 = signal and signal:on_abort(function(r) ctl:abort(r) end)
  local off2 = self._stop.signal:on_abort(function(r) ctl:abort(r) end)
  local ok, res, err = pcall(function()
    local ws, path = self:_resolve(req, ctl.signal)
    if not ws then return nil, path end
    local release, qerr = self._queue:acquire(ws, ctl.signal)
    if not release then return nil, qerr end
    if self._disposed then
      release()
      return nil, E("LSP_DISPOSED", "%s provider is disposed", self._prefix)
    end
    local okq, r, e = pcall(self._query_locked, self, req, ws, path, ctl.signal)
    release()
    if not okq then error(r, 0) end
    return r, e
  end)
  if off1 then off1() end
  off2()
  if not ok then error(res, 0) end
  return res, err
end

--- Refuse new queries, wait for the running ones (at most shutdownTimeoutMs,
--- then they are aborted), and dispose every instance, each to quiescence.
function Provider:disposeAll()
  if self._disposed then return true end
  self._disposed = true
  local idle = async.run(function() return self._queue:idle() end)
  local _, err = async.timeout(self._s.shutdownTimeoutMs, function(sig) return async.race_signal(idle, sig) end)
  if err then
    self._stop:abort(errors.new("LSP_DISPOSED", self._prefix .. " provider is disposed"))
    idle:await()
  end
  local list = {}
  for ws, inst in pairs(self._pool) do list[#list + 1] = { ws, inst } end
  for _, e in ipairs(list) do self:_evict(e[1], e[2]) end
  return true
end

return M
