--- dsh.lsp._operations: each ctx.lsp operation as the requests it sends to
-- a running, synced instance and the result it builds from the answers.
--
-- check(inst, op) says whether the server can do op at all (its capability,
-- and textDocumentSync.openClose); run(inst, req, path, uri_of) sends the
-- requests and normalises the answers. A server that advertises a capability
-- but answers "method not found" does not support the operation after all.
local errors = require "dsh.errors"
local json = require "dsh.json"
local normalize = require "dsh.lsp._normalize"
local rpc = require "dsh.lsp._rpc"

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

local function E(code, fmt, ...)
  return errors.new(code, string.format(fmt, ...))
end

--- true, or nil, LSP_UNSUPPORTED_OPERATION.
function M.check(inst, op)
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

local function locations(inst, method, req, doc, ws_uri, signal)
  local params = { textDocument = doc, position = req.position }
  if req.operation == "findReferences" then params.context = { includeDeclaration = true } end
  local res, err = inst:request(method, params, signal)
  if err then return nil, err end
  local locs, nerr = normalize.locations(inst.name, res)
  if not locs then return nil, nerr end
  return { kind = "locations", locations = locs, resolvedWorkspaceUri = ws_uri }
end

local function calls(inst, req, doc, ws_uri, signal)
  local op = req.operation
  local items, err = inst:request("textDocument/prepareCallHierarchy",
    { textDocument = doc, position = req.position }, signal)
  if err then return nil, err end
  local out = { kind = "calls", direction = op == "incomingCalls" and "incoming" or "outgoing", calls = {},
    resolvedWorkspaceUri = ws_uri }
  if items == nil then return out end
  local item = type(items) == "table" and items[1]
  if type(items) ~= "table" or (item ~= nil and not normalize.call_item(item)) then
    return nil, E("LSP_MALFORMED_RESPONSE", "%s returned a malformed call hierarchy item", inst.name)
  end
  if item == nil then return out end
  out.item = normalize.call_item(item)
  local res, cerr = inst:request("callHierarchy/" .. op, { item = item }, signal)
  if cerr then return nil, cerr end
  local list, nerr = normalize.calls(inst.name, res, op == "incomingCalls" and "from" or "to")
  if not list then return nil, nerr end
  out.calls = list
  return out
end

local function diagnostics(inst, req, path, doc, ws_uri, signal)
  local list, settled
  if inst.capabilities.diagnosticProvider then
    local res, err = inst:request("textDocument/diagnostic", { textDocument = doc }, signal)
    if err then return nil, err end
    local nerr
    list, nerr = normalize.diagnostics(inst.name, type(res) == "table" and res.items or nil)
    if not list then return nil, nerr end
    settled = true
  else
    list, settled = inst:published(path, req.waitMs, signal)
    if not list then return nil, settled end
  end
  return { kind = "diagnostics", diagnostics = list, settled = settled, uri = doc.uri, resolvedWorkspaceUri = ws_uri }
end

local function run(inst, req, path, uri_of, signal)
  local op = req.operation
  local doc = { uri = uri_of(path) }
  local ws_uri = uri_of(inst.workspace)
  local method = LOCATION_METHODS[op]
  if method then return locations(inst, method, req, doc, ws_uri, signal) end
  if op == "hover" then
    local res, err = inst:request("textDocument/hover", { textDocument = doc, position = req.position }, signal)
    if err then return nil, err end
    local h, nerr = normalize.hover(inst.name, res)
    if nerr then return nil, nerr end
    return { kind = "hover", hover = h }
  end
  if op == "documentSymbol" or op == "workspaceSymbol" then
    local res, err
    if op == "documentSymbol" then
      res, err = inst:request("textDocument/documentSymbol", { textDocument = doc }, signal)
    else
      res, err = inst:request("workspace/symbol", { query = req.query }, signal)
    end
    if err then return nil, err end
    local syms, nerr = normalize.symbols(inst.name, res, doc.uri)
    if not syms then return nil, nerr end
    return { kind = "symbols", symbols = syms, resolvedWorkspaceUri = ws_uri }
  end
  if op == "incomingCalls" or op == "outgoingCalls" then return calls(inst, req, doc, ws_uri, signal) end
  if op == "diagnostics" then return diagnostics(inst, req, path, doc, ws_uri, signal) end
  error("dsh.lsp: unknown operation " .. tostring(op)) -- the seam checked it
end

--- Run req on inst for the document at path: a result, or nil, err.
function M.run(inst, req, path, uri_of, signal)
  local res, err = run(inst, req, path, uri_of, signal)
  if not res and err and err.rpcCode == rpc.METHOD_NOT_FOUND then
    return nil, E("LSP_UNSUPPORTED_OPERATION", "%s does not support %s (%s)", inst.name, req.operation, err.message)
  end
  return res, err
end

return M
