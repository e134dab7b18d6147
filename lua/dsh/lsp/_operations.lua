--- dsh.lsp._operations: each ctx.lsp operation as the requests it sends to
-- a running, synced instance and the result it builds from the answers.
--
-- check(inst, op) says whether the server can do op at all (its capability,
-- and textDocumentSync.openClose); run(q) sends the requests and
-- normalises the answers (q = {inst, req, path, uri_of, signal, provider}).
-- The operations that change files (rename, code actions, organize
-- imports, formatting) are dsh.lsp._edit_operations'. A server that
-- advertises a capability but answers "method not found" does not support
-- the operation after all.
local errors = require "dsh.errors"
local json = require "dsh.json"
local normalize = require "dsh.lsp._normalize"
local rpc = require "dsh.lsp._rpc"
local symbols = require "dsh.lsp._symbols"

local M = {}

M.MAX_COMPLETIONS = 200

--- The operations that may change files (never run ahead of the checks).
M.CHANGES_FILES = { rename = true, applyCodeAction = true, organizeImports = true, format = true,
  codeActions = true }

-- The capability each operation needs.
M.CAPABILITY = {
  goToDefinition = "definitionProvider", findReferences = "referencesProvider",
  goToImplementation = "implementationProvider", goToTypeDefinition = "typeDefinitionProvider",
  goToDeclaration = "declarationProvider", hover = "hoverProvider",
  documentSymbol = "documentSymbolProvider", workspaceSymbol = "workspaceSymbolProvider",
  symbol = "documentSymbolProvider",
  incomingCalls = "callHierarchyProvider", outgoingCalls = "callHierarchyProvider",
  supertypes = "typeHierarchyProvider", subtypes = "typeHierarchyProvider",
  completion = "completionProvider", signatureHelp = "signatureHelpProvider",
  rename = "renameProvider", codeActions = "codeActionProvider", applyCodeAction = "codeActionProvider",
  organizeImports = "codeActionProvider", format = "documentFormattingProvider",
}

local LOCATION_METHODS = {
  goToDefinition = "textDocument/definition", findReferences = "textDocument/references",
  goToImplementation = "textDocument/implementation", goToTypeDefinition = "textDocument/typeDefinition",
  goToDeclaration = "textDocument/declaration",
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

local function locations(q, method, doc, ws_uri)
  local req = q.req
  local params = { textDocument = doc, position = req.position }
  if req.operation == "findReferences" then params.context = { includeDeclaration = true } end
  local res, err = q.inst:request(method, params, q.signal)
  if err then return nil, err end
  local locs, nerr = normalize.locations(q.inst.name, res)
  if not locs then return nil, nerr end
  return { kind = "locations", locations = locs, resolvedWorkspaceUri = ws_uri }
end

-- Call and type hierarchies: prepare at the position, then ask for one direction.
local HIERARCHY = {
  incomingCalls = { "textDocument/prepareCallHierarchy", "callHierarchy/incomingCalls", "calls", "incoming" },
  outgoingCalls = { "textDocument/prepareCallHierarchy", "callHierarchy/outgoingCalls", "calls", "outgoing" },
  supertypes = { "textDocument/prepareTypeHierarchy", "typeHierarchy/supertypes", "types", "supertypes" },
  subtypes = { "textDocument/prepareTypeHierarchy", "typeHierarchy/subtypes", "types", "subtypes" },
}

-- clangd before 16 has only the type hierarchy that LSP 3.17 replaced:
-- textDocument/typeHierarchy, answering the item with its parents or children.
local function old_type_hierarchy(q, doc, ws_uri, h)
  local inst = q.inst
  local res, err = inst:request("textDocument/typeHierarchy", { textDocument = doc, position = q.req.position,
    resolve = 1, direction = h[4] == "supertypes" and 1 or 0 }, q.signal)
  if err then return nil, err end
  local out = { kind = "types", direction = h[4], types = {}, resolvedWorkspaceUri = ws_uri }
  if res == nil then return out end
  out.item = normalize.call_item(res)
  if not out.item then return nil, E("LSP_MALFORMED_RESPONSE", "%s returned a malformed type hierarchy", inst.name) end
  local list = res[h[4] == "supertypes" and "parents" or "children"]
  for _, t in ipairs(type(list) == "table" and list or {}) do
    local it = normalize.call_item(t)
    if not it then return nil, E("LSP_MALFORMED_RESPONSE", "%s returned a malformed type hierarchy", inst.name) end
    out.types[#out.types + 1] = it
  end
  return out
end

local function hierarchy(q, doc, ws_uri)
  local inst, op = q.inst, q.req.operation
  local h = HIERARCHY[op]
  local items, err = inst:request(h[1], { textDocument = doc, position = q.req.position }, q.signal)
  if err and err.rpcCode == rpc.METHOD_NOT_FOUND and h[3] == "types" then
    return old_type_hierarchy(q, doc, ws_uri, h)
  end
  if err then return nil, err end
  local out = { kind = h[3], direction = h[4], resolvedWorkspaceUri = ws_uri }
  out[h[3]] = {}
  if items == nil then return out end
  local item = type(items) == "table" and items[1]
  if type(items) ~= "table" or (item ~= nil and not normalize.call_item(item)) then
    return nil, E("LSP_MALFORMED_RESPONSE", "%s returned a malformed %s hierarchy item", inst.name,
      h[3] == "calls" and "call" or "type")
  end
  if item == nil then return out end
  out.item = normalize.call_item(item)
  local res, cerr = inst:request(h[2], { item = item }, q.signal)
  if cerr then return nil, cerr end
  if h[3] == "calls" then
    local list, nerr = normalize.calls(inst.name, res, op == "incomingCalls" and "from" or "to")
    if not list then return nil, nerr end
    out.calls = list
  else
    local list = {}
    if res ~= nil then
      if type(res) ~= "table" then return nil, E("LSP_MALFORMED_RESPONSE", "%s returned a malformed type hierarchy",
        inst.name) end
      for i = 1, #res do
        local t = normalize.call_item(res[i])
        if not t then return nil, E("LSP_MALFORMED_RESPONSE", "%s returned a malformed type hierarchy", inst.name) end
        list[#list + 1] = t
      end
    end
    out.types = list
  end
  return out
end

local function diagnostics(q, doc, ws_uri)
  local inst = q.inst
  local list, settled
  if inst.capabilities.diagnosticProvider or inst.state.pull then
    local res, err = inst:request("textDocument/diagnostic", { textDocument = doc }, q.signal)
    if err then return nil, err end
    local nerr
    list, nerr = normalize.diagnostics(inst.name, type(res) == "table" and res.items or nil)
    if not list then return nil, nerr end
    settled = true
  else
    list, settled = inst:published(q.path, q.req.waitMs, q.signal)
    if not list then return nil, settled end
  end
  return { kind = "diagnostics", diagnostics = list, settled = settled, uri = doc.uri, resolvedWorkspaceUri = ws_uri }
end

-- Every file's diagnostics: the server's workspace/diagnostic when it has
-- one (pull), else what it published (for the documents open, once they
-- settled; for the others, the last publication).
local function workspace_diagnostics(q, doc, ws_uri)
  local inst = q.inst
  local files = {}
  local dp = inst.capabilities.diagnosticProvider or inst.state.pull
  local settled = true
  if type(dp) == "table" and dp.workspaceDiagnostics then
    local res, err = inst:request("workspace/diagnostic", { previousResultIds = json.array {} }, q.signal)
    if err then return nil, err end
    for _, r in ipairs(type(res) == "table" and type(res.items) == "table" and res.items or {}) do
      if type(r) == "table" and type(r.uri) == "string" and r.kind ~= "unchanged" then
        local list = normalize.diagnostics(inst.name, r.items)
        if not list then return nil, E("LSP_MALFORMED_RESPONSE", "%s returned malformed workspace diagnostics",
          inst.name) end
        files[r.uri] = list
      end
    end
  else
    local one, ok = diagnostics(q, doc, ws_uri)
    if not one then return nil, ok end
    settled = one.settled
    for path, list in pairs(inst:all_published()) do files[q.uri_of(path)] = list end
    files[doc.uri] = one.diagnostics
  end
  local out = {}
  for u, list in pairs(files) do
    if #list > 0 then out[#out + 1] = { uri = u, diagnostics = list } end
  end
  table.sort(out, function(a, b) return a.uri < b.uri end)
  return { kind = "workspaceDiagnostics", files = out, settled = settled, resolvedWorkspaceUri = ws_uri }
end

local function completion(q, doc)
  local inst = q.inst
  local res, err = inst:request("textDocument/completion", { textDocument = doc, position = q.req.position,
    context = { triggerKind = 1 } }, q.signal)
  if err then return nil, err end
  local items, incomplete, total = normalize.completion(inst.name, res, q.req.maxItems or M.MAX_COMPLETIONS)
  if not items then return nil, incomplete end
  return { kind = "completion", items = items, isIncomplete = incomplete, total = total or #items }
end

local function signature_help(q, doc)
  local inst = q.inst
  local res, err = inst:request("textDocument/signatureHelp", { textDocument = doc, position = q.req.position,
    context = { triggerKind = 1, isRetrigger = false } }, q.signal)
  if err then return nil, err end
  local h, nerr = normalize.signature_help(inst.name, res)
  if nerr then return nil, nerr end
  return { kind = "signatures", signatures = h and h.signatures or {}, activeSignature = h and h.activeSignature,
    activeParameter = h and h.activeParameter }
end

local function document_symbols(q, doc)
  local res, err = q.inst:request("textDocument/documentSymbol", { textDocument = doc }, q.signal)
  if err then return nil, err end
  return normalize.symbols(q.inst.name, res, doc.uri)
end

local function run(q)
  local inst, req = q.inst, q.req
  local op = req.operation
  local doc = { uri = q.uri_of(q.path) }
  local ws_uri = q.uri_of(inst.workspace)
  local method = LOCATION_METHODS[op]
  if method then return locations(q, method, doc, ws_uri) end
  if op == "hover" then
    local res, err = inst:request("textDocument/hover", { textDocument = doc, position = req.position }, q.signal)
    if err then return nil, err end
    local h, nerr = normalize.hover(inst.name, res)
    if nerr then return nil, nerr end
    return { kind = "hover", hover = h, resolvedWorkspaceUri = ws_uri }
  end
  if op == "documentSymbol" or op == "workspaceSymbol" then
    local syms, err
    if op == "documentSymbol" then
      syms, err = document_symbols(q, doc)
    else
      local res
      res, err = inst:request("workspace/symbol", { query = req.query }, q.signal)
      if not err then syms, err = normalize.symbols(inst.name, res, doc.uri) end
    end
    if not syms then return nil, err end
    return { kind = "symbols", symbols = syms, resolvedWorkspaceUri = ws_uri }
  end
  if op == "symbol" then
    local syms, err = document_symbols(q, doc)
    if not syms then return nil, err end
    local d = inst:document(q.path)
    return { kind = "symbol", namePath = req.namePath, matches = symbols.find(syms, req.namePath, d and d.text,
      req.includeBody), resolvedWorkspaceUri = ws_uri }
  end
  if HIERARCHY[op] then return hierarchy(q, doc, ws_uri) end
  if op == "diagnostics" then return diagnostics(q, doc, ws_uri) end
  if op == "workspaceDiagnostics" then return workspace_diagnostics(q, doc, ws_uri) end
  if op == "completion" then return completion(q, doc) end
  if op == "signatureHelp" then return signature_help(q, doc) end
  local edits = require "dsh.lsp._edit_operations"
  if edits.OPERATIONS[op] then return edits.run(q, doc, ws_uri) end
  error("dsh.lsp: unknown operation " .. tostring(op)) -- the seam checked it
end

--- Run q.req on q.inst for the document at q.path: a result, or nil, err.
function M.run(q)
  local res, err = run(q)
  if res and res.resolvedWorkspaceUri == nil then res.resolvedWorkspaceUri = q.uri_of(q.inst.workspace) end
  if not res and err and err.rpcCode == rpc.METHOD_NOT_FOUND then
    return nil, E("LSP_UNSUPPORTED_OPERATION", "%s does not support %s (%s)", q.inst.name, q.req.operation,
      err.message)
  end
  return res, err
end

return M
