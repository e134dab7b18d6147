--- dsh.lsp._instance: one running language server for one root.
--
-- Started through a subprocess seam (ctx.subprocess: in the sandbox or on
-- the host, the same code) as a managed process group whose stdin and stdout
-- carry the protocol and whose stderr keeps a bounded tail. Then
-- `initialize` (processId null: the server lives in another PID namespace;
-- utf-16 positions required; the client capabilities of an editor: work
-- done progress, watched files, configuration, workspace edits),
-- `initialized`, the settings once by workspace/didChangeConfiguration (some
-- servers take them only that way), and queries. What the server asks and
-- tells is dsh.lsp._state's (configuration by section, messages, progress,
-- registrations); documents, watched-file changes and published diagnostics
-- are dsh.lsp._documents'. A server's workspace/applyEdit is answered by
-- o.apply_edit (dsh.lsp._edits through ctx.fs), or refused without one.
--
-- A transport failure (the process exits, its stream is malformed, a write
-- fails, a cancelled request stays unanswered) marks the instance dead
-- (inst.dead) and kills its group at once. dispose(): shutdown and exit
-- within shutdownTimeoutMs, then TERM, KILL after killGraceMs, and wait
-- until the whole group is gone.
local async = require "dsh.async"
local documents = require "dsh.lsp._documents"
local errors = require "dsh.errors"
local json = require "dsh.json"
local rpc = require "dsh.lsp._rpc"
local state = require "dsh.lsp._state"

local M = {}

M.MAX_OPEN = documents.MAX_OPEN
M.STDERR_IN_MESSAGES = 2000

local null = json.null

---@class dsh.lsp.Instance
---@field name string         `language server "<id>"`
---@field workspace string    canonical root the server was started for
---@field dead dsh.Error|nil  why the transport failed, once it did
---@field state dsh.lsp.State what the server told (messages, progress, registrations)
local Instance = {}
Instance.__index = Instance
Instance.__tostring = function(i)
  return string.format("dsh.lsp.instance(%s, %s%s)", i.name, i.workspace,
    i.dead and ", dead" or (i._disposed and ", disposed" or ""))
end
local init_documents = documents.mixin(Instance)

local CODE_ACTION_KINDS = { "", "quickfix", "refactor", "refactor.extract", "refactor.inline", "refactor.rewrite",
  "source", "source.organizeImports", "source.fixAll" }

local function client_capabilities()
  local links = { linkSupport = true }
  local docs = { "markdown", "plaintext" }
  return {
    general = { positionEncodings = { "utf-16" } },
    window = { workDoneProgress = true, showMessage = {} },
    workspace = {
      workspaceFolders = true, configuration = true, applyEdit = true,
      symbol = { dynamicRegistration = false },
      didChangeConfiguration = { dynamicRegistration = false },
      didChangeWatchedFiles = { dynamicRegistration = true, relativePatternSupport = true },
      workspaceEdit = { documentChanges = true, failureHandling = "transactional",
        resourceOperations = json.array {} },
      executeCommand = { dynamicRegistration = false },
      diagnostics = { refreshSupport = true },
    },
    textDocument = {
      synchronization = { dynamicRegistration = false, didSave = false },
      hover = { contentFormat = docs },
      definition = links, declaration = links, typeDefinition = links, implementation = links,
      references = {},
      documentSymbol = { hierarchicalDocumentSymbolSupport = true },
      callHierarchy = {}, typeHierarchy = {},
      publishDiagnostics = { versionSupport = true },
      diagnostic = { dynamicRegistration = true, relatedDocumentSupport = false },
      completion = { contextSupport = true, completionItem = { snippetSupport = false, documentationFormat = docs,
        labelDetailsSupport = true, deprecatedSupport = true } },
      signatureHelp = { contextSupport = true, signatureInformation = { documentationFormat = docs,
        activeParameterSupport = true, parameterInformation = { labelOffsetSupport = true } } },
      rename = { prepareSupport = false },
      codeAction = { isPreferredSupport = true, dataSupport = true, resolveSupport = { properties = { "edit" } },
        codeActionLiteralSupport = { codeActionKind = { valueSet = CODE_ACTION_KINDS } } },
      formatting = {}, rangeFormatting = {},
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

--- The patterns a server that registers no file watchers is told changes
--- of: server.watchPatterns, else every file with one of its extensions and
--- its root markers.
function M.watch_patterns(s)
  if s.watchPatterns then return s.watchPatterns end
  local out = {}
  for ext in pairs(s.extensionToLanguage) do
    if type(ext) == "string" then out[#out + 1] = "**/*" .. ext:lower() end
  end
  for _, m in ipairs(s.rootMarkers or {}) do out[#out + 1] = "**/" .. m end
  table.sort(out)
  return out
end

---@class dsh.lsp.InstanceOpts
---@field server table        a validated server config with argv (resolved command + args)
---@field workspace string    canonical root the server is started for
---@field subprocess table    the subprocess seam to start it with
---@field uri_of fun(path:string):string
---@field apply_edit (fun(edit:table, signal:dsh.AbortSignal|nil):table|nil, dsh.Error|nil)|nil

--- Spawn and initialize a server: the instance, or nil, err.
---@param o dsh.lsp.InstanceOpts
---@param signal dsh.AbortSignal|nil
---@return dsh.lsp.Instance|nil, dsh.Error|nil
function M.start(o, signal)
  local s = o.server
  local ws_uri = o.uri_of(o.workspace)
  local folders = { { uri = ws_uri, name = o.workspace:match("([^/]+)$") or "/" } }
  local self = setmetatable({
    name = 'language server "' .. s.id .. '"', workspace = o.workspace, _s = s, _uri = o.uri_of,
    _apply_edit = o.apply_edit, state = state.new(s.settings, folders, json.array, M.watch_patterns(s),
      s.readyMessages),
  }, Instance)
  init_documents(self)
  local h, err = o.subprocess:spawn {
    argv = s.argv, cwd = o.workspace, env = s.env, graceMs = s.killGraceMs,
    stdio = { stdin = "pipe", stdout = "pipe", stderr = { maxBytes = s.maxStderrBytes } },
  }
  if not h then return nil, err end
  self._h = h
  local input_failed -- the write that failed, if one did
  local function ended()
    local res, oerr = outcome(h)
    local why = outcome_text(res, oerr)
    if input_failed and res and res.signal then
      why = "stopped reading its input (" .. tostring(input_failed.message or input_failed) .. ") and " .. why
    end
    return errors.new("LSP_SERVER_FAILED", why .. stderr_tail(h))
  end
  self._conn = rpc.new {
    name = self.name, maxMessageBytes = s.maxMessageBytes, cancelGraceMs = s.killGraceMs,
    write = function(b)
      local ok, werr = h.stdin:write(b)
      if ok then return true end
      -- it stopped reading its input: ended now if it lives on, so that how
      -- it ended can be told (in the read side's words, whichever side
      -- learns of it first)
      input_failed = input_failed or werr
      h:terminate()
      return nil, ended()
    end,
    read = function()
      local chunk, rerr = h.stdout:read()
      if chunk then return chunk end
      if rerr then
        return nil, errors.new("LSP_SERVER_FAILED", "failed: " .. tostring(rerr.message or rerr) .. stderr_tail(h))
      end
      -- end of output: say how the process ended
      return nil, ended()
    end,
    on_request = function(method, params) return self:_on_request(method, params) end,
    on_notification = function(method, params) self:_on_notification(method, params) end,
    on_fail = function(ferr) self:_die(ferr) end,
  }
  local res, ierr = self._conn:request("initialize", {
    processId = null, clientInfo = { name = "dsh" }, rootUri = ws_uri, rootPath = o.workspace,
    workspaceFolders = folders,
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
  self.server_info = type(res.serverInfo) == "table" and res.serverInfo or nil
  -- A server that fails from here on has said what it can do: the instance
  -- is returned dead (self.dead says why), so that an operation it lacks is
  -- refused as such, whether or not its end was seen yet.
  local ok = self._conn:notify("initialized", {})
  if ok and s.settings ~= nil then
    self._conn:notify("workspace/didChangeConfiguration", { settings = s.settings })
  end
  return self
end

-- Server requests: dsh.lsp._state's, and workspace/applyEdit (answered once
-- the edit is applied or refused; the read loop goes on meanwhile).
function Instance:_on_request(method, params)
  if method == "workspace/applyEdit" then
    return function()
      local apply = self._apply_edit
      if not apply then return { applied = false, failureReason = "this client applies no edits now" } end
      local r, err = apply(type(params) == "table" and params.edit or nil)
      if not r then return { applied = false, failureReason = tostring(err and err.message or err) } end
      return { applied = true }
    end
  end
  return self.state:on_request(method, params)
end

function Instance:_on_notification(method, params)
  if self.state:on_notification(method, params) then return end
  if method == "textDocument/publishDiagnostics" and type(params) == "table" then self:_published(params) end
end

--- Set (or clear) what answers the server's workspace/applyEdit.
function Instance:on_apply_edit(fn)
  self._apply_edit = fn
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
  self:_wake_all()
  self.state:close()
end

--- Send a request on this instance's connection.
function Instance:request(method, params, signal)
  return self._conn:request(method, params, signal)
end

--- Send a notification on this instance's connection.
function Instance:notify(method, params)
  return self._conn:notify(method, params)
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
  self:_wake_all()
  self.state:close()
  self._disposed:resolve(true)
  return true
end

return M
