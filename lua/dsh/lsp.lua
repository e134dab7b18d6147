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
-- Operations: goToDefinition, findReferences, goToImplementation (→
-- {kind="locations", locations={{uri, range}}, resolvedWorkspaceUri}), hover
-- (→ {kind="hover", hover={contents, range?}|nil}); beyond the reference
-- documentSymbol, workspaceSymbol (with `query`) (→ {kind="symbols",
-- symbols}), incomingCalls, outgoingCalls (→ {kind="calls", direction, item,
-- calls}) and diagnostics (→ {kind="diagnostics", diagnostics, settled, uri,
-- resolvedWorkspaceUri};
-- `waitMs` bounds the wait for the server to settle after the latest change).
-- Positions are 0-based lines and UTF-16 columns (dsh.lsp.position converts
-- from byte offsets of the caller's text). A request goes to the provider of
-- its file's lower-cased final extension; each extension has one owner.
--
-- Failures: misuse (a malformed request) raises; expected failures return
-- nil, err with a code from M.codes (aborts: code ABORTED, err.reason the
-- exact reason given to the signal).
local async = require "dsh.async"
local errors = require "dsh.errors"

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

--- Operations and whether they take a position.
M.OPERATIONS = {
  goToDefinition = true, findReferences = true, goToImplementation = true, hover = true,
  documentSymbol = false, workspaceSymbol = false, incomingCalls = true, outgoingCalls = true,
  diagnostics = false,
}

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

--- An empty registry.
---@return dsh.Lsp
function M.new()
  return setmetatable({ _by_id = {}, _by_ext = {} }, Lsp)
end

-- Everything about p that can be wrong without looking at the registry.
local function check_registration(p)
  if type(p) ~= "table" then return nil, E("LSP_INVALID_PROVIDER", "a provider must be a table") end
  local id = p.id
  if type(id) ~= "string" or not id:find("%S") then
    return nil, E("LSP_INVALID_PROVIDER", "provider id must be a non-empty string")
  end
  if type(p.query) ~= "function" then
    return nil, E("LSP_INVALID_PROVIDER", 'provider "%s" has no query function', id)
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
  if op == "diagnostics" then
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
---@field waitMs integer|nil       diagnostics (default 5000)

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
