--- dsh.lsp: the language-server seam (ctx.lsp) — a registry of providers,
-- each owning some file extensions, and the one entry point queries go
-- through (reference §2.5 "Seam").
--
--   ctx:use(require("dsh.lsp").provider)                 -- publishes ctx.lsp
--   ctx:use(require "dsh.providers.lsp_e2b", { servers = { clangd = {
--     command = "clangd", extensionToLanguage = { [".c"] = "c", [".h"] = "c" } } } })
--   local r = ctx.lsp:query { operation = "hover", filePath = "main.c",
--     position = { line = 3, character = 9 }, workspaceRoot = "/home/user/workspace" }
--   --> { kind = "hover", hover = { contents = "...", range = {...} } }
--
-- Operations (each takes filePath; those marked * a position too):
--   locations  goToDefinition*, findReferences*, goToImplementation*,
--              goToTypeDefinition*, goToDeclaration*
--              → {kind="locations", locations={{uri, range}}, resolvedWorkspaceUri}
--   hover*     → {kind="hover", hover={contents, range?}|nil}
--   symbols    documentSymbol, workspaceSymbol (with `query`)
--              → {kind="symbols", symbols={{name, kind, namePath, uri, range, bodyRange}}}
--   symbol     (with `namePath`, "Parser/parse"; includeBody) → {kind="symbol",
--              matches={{name, namePath, kind, uri, range, bodyRange, body?}}}
--   calls      incomingCalls*, outgoingCalls* → {kind="calls", direction, item, calls}
--   types      supertypes*, subtypes* → {kind="types", direction, item, types}
--   diagnostics (waitMs bounds the wait for the server to settle after the
--              latest change) → {kind="diagnostics", diagnostics, settled, uri}
--   workspaceDiagnostics → {kind="workspaceDiagnostics", files={{uri, diagnostics}}, settled}
--   completion* → {kind="completion", items, isIncomplete, total}
--   signatureHelp* → {kind="signatures", signatures, activeSignature, activeParameter}
--   edits      rename* (newName), applyCodeAction* (title), organizeImports,
--              format → {kind="edit", applied, files={{path, edits, version}},
--              reason?}: applied through ctx.fs as one change unless
--              apply = false; codeActions* (endPosition, only) →
--              {kind="actions", actions={{title, kind, isPreferred, disabled}}}
-- Every result carries resolvedWorkspaceUri (the server's root) and, when
-- the server showed errors or warnings meanwhile, serverMessages.
-- Positions are 0-based lines and UTF-16 columns (dsh.lsp.position converts
-- from byte offsets of the caller's text). A request goes to the provider of
-- its file's lower-cased final extension; each extension has one owner.
--
-- Failures: misuse (a malformed request) raises; expected failures return
-- nil, err with a code from M.codes (aborts: code ABORTED, err.reason the
-- exact reason given to the signal).
local async = require "dsh.async"
local errors = require "dsh.errors"
local faults = require "dsh.faults"

local M = {}
local MOD = "dsh.lsp"

--- Every code this seam and its providers return, each named as itself:
--- the catalogue's lsp area (dsh.errors.CATALOGUE.lsp says what each means),
--- ABORTED (the caller's signal; err.reason) and TIMEOUT (opts.timeoutMs).
M.codes = { ABORTED = "ABORTED", TIMEOUT = "TIMEOUT" }
for code in pairs(errors.CATALOGUE.lsp) do M.codes[code] = code end

M.position = require "dsh.lsp.position"
M.uri = require "dsh.lsp.uri"
--- LSP SymbolKind names by number ("function" is 12).
M.SYMBOL_KINDS = require("dsh.lsp._normalize").SYMBOL_KINDS
--- LSP CompletionItemKind names by number ("function" is 3).
M.COMPLETION_KINDS = require("dsh.lsp._normalize").COMPLETION_KINDS

--- Operations and whether they take a position.
M.OPERATIONS = {
  goToDefinition = true, findReferences = true, goToImplementation = true, goToTypeDefinition = true,
  goToDeclaration = true, hover = true, documentSymbol = false, workspaceSymbol = false, symbol = false,
  incomingCalls = true, outgoingCalls = true, supertypes = true, subtypes = true, diagnostics = false,
  workspaceDiagnostics = false, completion = true, signatureHelp = true, rename = true, codeActions = true,
  applyCodeAction = true, organizeImports = false, format = false,
}
M.presets = require "dsh.lsp.presets"

M.DEFAULT_DIAGNOSTICS_WAIT_MS = 5000
M.MAX_WAIT_MS = 600000

local function E(code, fmt, ...)
  return errors.new(code, string.format(fmt, ...))
end

--- The lower-cased final extension of a path (".c"), or nil.
function M.extension(path)
  local base = path:match("([^/]*)$")
  local ext = base:match("^.+(%.[^.]+)$")
  return ext and ext:lower() or nil
end

---@class dsh.lsp.Registration
---@field id string
---@field extensionToLanguage table<string,string>  {[".c"] = "c"}
---@field query fun(self, req:table, signal:dsh.AbortSignal|nil):table|nil, dsh.Error|nil

---@class dsh.Lsp
local Lsp = {}
Lsp.__index = Lsp
Lsp.__tostring = function(l)
  local n = 0
  for _ in pairs(l._by_id) do n = n + 1 end
  return string.format("dsh.lsp(%d providers%s)", n, l._disposed and ", disposed" or "")
end

--- The registry's fault-injection points (dsh.faults): beforeRead, fn(path),
--- runs with a source's canonical path right before a provider's reader
--- opens it (a file swapped for a symlink then must still be refused).
M.FAULT_POINTS = { "beforeRead" }

--- An empty registry.
---@return dsh.Lsp
function M.new()
  return setmetatable({ _by_id = {}, _by_ext = {}, _faults = faults.points(MOD, M.FAULT_POINTS) }, Lsp)
end

--- Arm fn at a fault point (M.FAULT_POINTS) of every provider registered
--- here, or disarm it (fn nil): a seam for specs and `dsh poc`.
---@param point string
---@param fn function|nil
function Lsp:injectFault(point, fn)
  self._faults:inject(point, fn)
end

--- The backend contract: a registration (dsh.lsp.Registration) is a table
--- with id (a non-empty string), extensionToLanguage ({[".ext"] = language})
--- and these functions (query(req, opts) → result | nil, err with a code of
--- M.codes); register() says LSP_INVALID_PROVIDER when one is missing, an
--- expected failure here because registrations come from configuration
--- (every world's are dsh.lsp.backend's).
M.BACKEND = { "query" }

-- Everything about p that can be wrong without looking at the registry.
local function check_registration(p)
  if type(p) ~= "table" then return nil, E("LSP_INVALID_PROVIDER", "a provider must be a table") end
  local id = p.id
  if type(id) ~= "string" or not id:find("%S") then
    return nil, E("LSP_INVALID_PROVIDER", "provider id must be a non-empty string")
  end
  for _, fn in ipairs(M.BACKEND) do
    if type(p[fn]) ~= "function" then
      return nil, E("LSP_INVALID_PROVIDER", 'provider "%s" has no %s function', id, fn)
    end
  end
  local map = p.extensionToLanguage
  if type(map) ~= "table" or next(map) == nil then
    return nil, E("LSP_INVALID_PROVIDER", 'provider "%s" must handle at least one extension', id)
  end
  local exts = {}
  for ext, lang in pairs(map) do
    if type(ext) ~= "string" or not ext:match("^%.[^./\\]+$") then
      return nil, E("LSP_INVALID_PROVIDER", 'provider "%s": extension "%s" must look like ".ext"', id, tostring(ext))
    end
    if type(lang) ~= "string" or not lang:find("%S") then
      return nil, E("LSP_INVALID_PROVIDER", 'provider "%s": extension "%s" needs a non-empty language id', id, ext)
    end
    local low = ext:lower()
    if exts[low] then
      return nil, E("LSP_INVALID_PROVIDER", 'provider "%s" lists extension "%s" twice', id, low)
    end
    exts[low] = true
  end
  return exts
end

--- Register a provider: a function that unregisters it, or nil, err
--- (LSP_INVALID_PROVIDER, LSP_CONFLICT, LSP_DISPOSED). Nothing is
--- registered unless everything checks out.
---@param p dsh.lsp.Registration
---@return (fun())|nil, dsh.Error|nil
function Lsp:register(p)
  if self._disposed then return nil, E("LSP_DISPOSED", "ctx.lsp is disposed") end
  local exts, err = check_registration(p)
  if not exts then return nil, err end
  if self._by_id[p.id] then return nil, E("LSP_CONFLICT", 'a provider with id "%s" is already registered', p.id) end
  for ext in pairs(exts) do
    local owner = self._by_ext[ext]
    if owner then
      return nil, E("LSP_CONFLICT", 'extension "%s" is already handled by provider "%s"', ext, owner.id)
    end
  end
  self._by_id[p.id] = p
  for ext in pairs(exts) do self._by_ext[ext] = p end
  local done = false
  return function()
    if done then return end
    done = true
    if self._by_id[p.id] == p then self._by_id[p.id] = nil end
    for ext in pairs(exts) do
      if self._by_ext[ext] == p then self._by_ext[ext] = nil end
    end
  end
end

--- The provider that owns path's extension, or nil.
function Lsp:route(path)
  local ext = M.extension(path)
  return ext and self._by_ext[ext] or nil
end

--- Registered provider ids, sorted.
function Lsp:providers()
  local out = {}
  for id in pairs(self._by_id) do out[#out + 1] = id end
  table.sort(out)
  return out
end

local function check_position(p)
  if type(p) ~= "table" then errors.misuse(MOD, "query: position must be a table {line=, character=}") end
  for _, k in ipairs { "line", "character" } do
    local v = p[k]
    if type(v) ~= "number" or v < 0 or v % 1 ~= 0 or v >= 2 ^ 31 then
      errors.misuse(MOD, "query: position.%s must be a non-negative integer (0-based)", k)
    end
  end
  return { line = p.line, character = p.character }
end

-- A checked copy of the request; raises on misuse.
local function check_request(req)
  if type(req) ~= "table" then errors.misuse(MOD, "query: expected a request table, got %s", type(req)) end
  local op = req.operation
  if type(op) ~= "string" or M.OPERATIONS[op] == nil then
    errors.misuse(MOD, "query: unknown operation %s", tostring(op))
  end
  if type(req.filePath) ~= "string" or not req.filePath:find("%S") or req.filePath:find("\0", 1, true) then
    errors.misuse(MOD, "query: filePath must be a non-empty string")
  end
  local out = { operation = op, filePath = req.filePath, workspaceRoot = req.workspaceRoot }
  if M.OPERATIONS[op] then out.position = check_position(req.position) end
  if op == "workspaceSymbol" then
    if type(req.query) ~= "string" then errors.misuse(MOD, "query: workspaceSymbol needs a query string") end
    out.query = req.query
  end
  if op == "symbol" then
    if type(req.namePath) ~= "string" or not req.namePath:find("[^/%s]") then
      errors.misuse(MOD, 'query: symbol needs namePath, a string such as "Parser/parse"')
    end
    out.namePath, out.includeBody = req.namePath, req.includeBody == true
  end
  if op == "rename" then
    if type(req.newName) ~= "string" or not req.newName:find("%S") then
      errors.misuse(MOD, "query: rename needs newName, a non-empty string")
    end
    out.newName = req.newName
  end
  if op == "applyCodeAction" then
    if type(req.title) ~= "string" then errors.misuse(MOD, "query: applyCodeAction needs title, a string") end
    out.title = req.title
  end
  if op == "codeActions" or op == "applyCodeAction" then
    if req.endPosition ~= nil then out.endPosition = check_position(req.endPosition) end
    if req.only ~= nil then
      if type(req.only) ~= "table" then errors.misuse(MOD, "query: only must be an array of code action kinds") end
      for _, k in ipairs(req.only) do
        if type(k) ~= "string" then errors.misuse(MOD, "query: only must be an array of code action kinds") end
      end
      out.only = req.only
    end
  end
  if req.apply ~= nil then
    if type(req.apply) ~= "boolean" then errors.misuse(MOD, "query: apply must be a boolean") end
    out.apply = req.apply
  end
  if op == "format" then
    if req.tabSize ~= nil and (type(req.tabSize) ~= "number" or req.tabSize < 1 or req.tabSize % 1 ~= 0) then
      errors.misuse(MOD, "query: tabSize must be a positive integer")
    end
    out.tabSize, out.insertSpaces = req.tabSize, req.insertSpaces
  end
  if op == "completion" and req.maxItems ~= nil then
    if type(req.maxItems) ~= "number" or req.maxItems < 1 or req.maxItems % 1 ~= 0 then
      errors.misuse(MOD, "query: maxItems must be a positive integer")
    end
    out.maxItems = req.maxItems
  end
  if op == "diagnostics" or op == "workspaceDiagnostics" then
    local w = req.waitMs
    if w == nil then w = M.DEFAULT_DIAGNOSTICS_WAIT_MS end
    if type(w) ~= "number" or w < 0 or w % 1 ~= 0 or w > M.MAX_WAIT_MS then
      errors.misuse(MOD, "query: waitMs must be an integer in [0, %d]", M.MAX_WAIT_MS)
    end
    out.waitMs = w
  end
  return out
end

---@class dsh.lsp.Request
---@field operation string
---@field filePath string          absolute, or relative to workspaceRoot
---@field position dsh.lsp.Position|nil
---@field workspaceRoot string
---@field query string|nil         workspaceSymbol
---@field waitMs integer|nil       diagnostics, workspaceDiagnostics (default 5000)
---@field namePath string|nil      symbol ("Parser/parse"); includeBody adds its text
---@field newName string|nil       rename
---@field title string|nil         applyCodeAction
---@field endPosition dsh.lsp.Position|nil  codeActions, applyCodeAction (the range's end)
---@field only string[]|nil        codeActions: kinds wanted ("quickfix", "source.organizeImports")
---@field apply boolean|nil        edits: false returns the edit without applying it

--- Route and run a request: a result, or nil, err. opts.timeoutMs bounds
--- the whole query (then TIMEOUT; the server's request is cancelled).
---@param req dsh.lsp.Request
---@param opts {signal: dsh.AbortSignal|nil, timeoutMs: integer|nil}|nil
---@return table|nil, dsh.Error|nil
function Lsp:query(req, opts)
  local r = check_request(req)
  errors.check(MOD, "query: opts", opts, "table", true)
  local signal = opts and opts.signal
  if signal ~= nil and not async.is_signal(signal) then errors.misuse(MOD, "query: opts.signal must be a signal") end
  local timeout = opts and opts.timeoutMs
  if timeout ~= nil and (type(timeout) ~= "number" or timeout < 1 or timeout % 1 ~= 0 or timeout > 2147483647) then
    errors.misuse(MOD, "query: opts.timeoutMs must be a positive integer")
  end
  if self._disposed then return nil, E("LSP_DISPOSED", "ctx.lsp is disposed") end
  if type(r.workspaceRoot) ~= "string" or not r.workspaceRoot:find("%S") then
    return nil, E("LSP_WORKSPACE_REQUIRED", "a workspaceRoot is required for language server queries")
  end
  local p = self:route(r.filePath)
  if not p then
    return nil, E("LSP_UNAVAILABLE", 'no language server handles "%s" files (%s)',
      M.extension(r.filePath) or "extensionless", r.filePath)
  end
  if signal and signal.aborted then return nil, async.abort_error(signal.reason) end
  if not timeout then return p:query(r, signal) end
  return async.timeout(timeout, function(sig) return p:query(r, sig) end, signal)
end

--- The errors and warnings of a file as it is now, once the server settled
--- after its latest change (at most opts.waitMs, default 5000).
---@param filePath string
---@param opts {workspaceRoot: string, waitMs: integer|nil, signal: dsh.AbortSignal|nil}
function Lsp:diagnostics(filePath, opts)
  if type(opts) ~= "table" then errors.misuse(MOD, "diagnostics: opts must be a table with workspaceRoot") end
  return self:query({ operation = "diagnostics", filePath = filePath, workspaceRoot = opts.workspaceRoot,
    waitMs = opts.waitMs }, { signal = opts.signal })
end

--- The extensions that have a server, as {[".py"] = "pyright"}, and which
--- of those servers cannot run (their commands are missing): {[".rs"] = "rust-analyzer"}.
function Lsp:extensions()
  local out, missing = {}, {}
  for ext, p in pairs(self._by_ext) do
    out[ext] = p.id
    if p.unavailable then missing[ext] = p.id end
  end
  return out, missing
end

--- What every provider is doing: {id = {id, extensions, available, problem?,
--- instances = {{root, alive, busy, documents, messages, pendingChanges, ...}}}}
--- (providers without a status function report only their extensions).
function Lsp:status()
  local out = {}
  for id, p in pairs(self._by_id) do
    if type(p.status) == "function" then
      out[id] = p:status()
    else
      local exts = {}
      for ext in pairs(p.extensionToLanguage) do exts[#exts + 1] = ext:lower() end
      table.sort(exts)
      out[id] = { id = id, extensions = exts, available = true, instances = {} }
    end
  end
  return out
end

--- Close documents the servers keep open: those of opts.filePath, or every
--- one under opts.workspaceRoot (the agent is done with them). true, or nil, err.
---@param opts {workspaceRoot: string, filePath: string|nil, signal: dsh.AbortSignal|nil}
function Lsp:closeDocuments(opts)
  if type(opts) ~= "table" or type(opts.workspaceRoot) ~= "string" then
    errors.misuse(MOD, "closeDocuments: opts must be a table with workspaceRoot")
  end
  if opts.filePath ~= nil and type(opts.filePath) ~= "string" then
    errors.misuse(MOD, "closeDocuments: filePath must be a string")
  end
  local list = {}
  if opts.filePath then
    list[1] = self:route(opts.filePath)
  else
    for _, p in pairs(self._by_id) do list[#list + 1] = p end
  end
  for _, p in ipairs(list) do
    if type(p.close) == "function" then
      local ok, err = p:close(opts.workspaceRoot, opts.filePath, opts.signal)
      if not ok then return nil, err end
    end
  end
  return true
end

--- Refuse further queries and registrations (providers dispose themselves).
function Lsp:dispose()
  self._disposed = true
  return true
end

--- The context provider that publishes an empty registry as ctx.lsp.
M.provider = {
  name = "lsp",
  provides = "lsp",
  inject = {},
  setup = function(scope)
    local reg = M.new()
    scope:on_dispose(function() reg:dispose() end)
    return reg
  end,
}

M.Lsp = Lsp
return M
