--- dsh.lsp._documents: the documents an instance keeps open, what the server
-- published about files, and the file changes it has not been told yet
-- (methods mixed into dsh.lsp._instance).
--
-- A document stays open while the agent uses it: its content is named by
-- the source reader's token (and its text kept, so edits can be checked
-- against what the server saw); before every query the provider re-reads
-- every open document and syncs the ones that changed (didChange with the
-- full text, or close and open again when the server takes no changes), and
-- closes the ones that are gone. At most MAX_OPEN stay open (the least
-- recently used is closed); close_document closes one the agent is done with.
--
-- Changes on disk (the workspace watch) queue up per path, coalesced as
-- editors do (created+deleted is nothing, deleted+created is changed), and
-- go out as one workspace/didChangeWatchedFiles before the next query,
-- filtered by the server's watcher registrations.
--
-- Published diagnostics are kept per path (at most MAX_PUBLISHED paths) with
-- the version they describe.
local async = require "dsh.async"
local loop = require "dsh.core.loop"
local normalize = require "dsh.lsp._normalize"
local uri = require "dsh.lsp.uri"

local M = {}

M.MAX_OPEN = 64
M.MAX_PUBLISHED = 4096
M.MAX_PENDING = 20000 -- changed paths waiting; more are counted as lost
M.BATCH = 2000        -- changes per didChangeWatchedFiles

M.CREATED, M.CHANGED, M.DELETED = 1, 2, 3

local function init(self)
  self._docs, self._order, self._diags, self._ndiags, self._diag_waiters = {}, 0, {}, 0, {}
  self._pending, self._npending, self.lost_changes, self._gen = {}, 0, 0, 0
end

local Docs = {}

function Docs:_sync_kinds()
  local sync = self.capabilities.textDocumentSync
  if type(sync) == "number" then return true, sync end
  if type(sync) == "table" then
    return sync.openClose == true, type(sync.change) == "number" and sync.change or 0
  end
  return false, 0
end

--- True when the server can open documents (textDocumentSync.openClose).
function Docs:can_open()
  return (self:_sync_kinds())
end

--- The reader token of the content open for path, if any.
function Docs:token(path)
  local d = self._docs[path]
  return d and d.token or nil
end

--- The open document at path: {version, token, text, used}, or nil.
function Docs:document(path)
  return self._docs[path]
end

--- Open documents as {path, token}, least recently used first.
function Docs:open_documents()
  local out = {}
  for p, d in pairs(self._docs) do out[#out + 1] = { path = p, token = d.token, used = d.used } end
  table.sort(out, function(a, b) return a.used < b.used end)
  return out
end

--- Close the document at path (nothing when it is not open): true, or nil, err.
function Docs:close_document(path)
  if not self._docs[path] then return true end
  self._docs[path] = nil
  if self.dead then return true end
  return self._conn:notify("textDocument/didClose", { textDocument = { uri = self._uri(path) } })
end

function Docs:_close_oldest()
  local list = self:open_documents()
  if #list < M.MAX_OPEN then return true end
  return self:close_document(list[1].path)
end

--- Make the server see content src ({token, text?}) for path: nothing when
--- it already has that token; didOpen, didChange or close and reopen.
--- Returns true, or false when the text is needed but src has none, or nil, err.
function Docs:sync(path, language, src)
  self._order = self._order + 1
  local d = self._docs[path]
  if d and d.token == src.token then
    d.used, d.at = self._order, loop.now_ms()
    return true
  end
  if src.text == nil then return false end
  local u = self._uri(path)
  local _, change = self:_sync_kinds()
  local ok, err
  if d and change ~= 0 then
    d.version = d.version + 1
    d.token, d.text, d.used, d.at, d.gen = src.token, src.text, self._order, loop.now_ms(), self._gen
    d.sent = self._seq or 0
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
    self._docs[path] = { version = version, token = src.token, text = src.text, used = self._order,
      at = loop.now_ms(), sent = self._seq or 0, language = language, gen = self._gen }
    ok, err = self._conn:notify("textDocument/didOpen", {
      textDocument = { uri = u, languageId = language, version = version, text = src.text },
    })
  end
  if not ok then return nil, err end
  return true
end

--- Whether the server last saw path's document before other files changed.
function Docs:is_stale(path)
  local d = self._docs[path]
  return d ~= nil and d.gen < self._gen
end

--- Give a stale document its (unchanged) text again, as a new version, so
--- the server analyses it against the files as they are now: true, or nil, err.
function Docs:refresh_if_stale(path)
  local d = self._docs[path]
  if not d or d.gen >= self._gen then return true end
  local _, change = self:_sync_kinds()
  d.gen, d.sent = self._gen, self._seq or 0
  d.version = d.version + 1
  local u = self._uri(path)
  if change ~= 0 then
    return self._conn:notify("textDocument/didChange", {
      textDocument = { uri = u, version = d.version }, contentChanges = { { text = d.text } },
    })
  end
  local ok, err = self._conn:notify("textDocument/didClose", { textDocument = { uri = u } })
  if not ok then return nil, err end
  return self._conn:notify("textDocument/didOpen", {
    textDocument = { uri = u, languageId = d.language, version = d.version, text = d.text },
  })
end

-- Watched files ------------------------------------------------------------------

-- How a new change combines with one already waiting (nil: they cancel out).
local function combine(old, new)
  if not old then return new end
  if old == M.CREATED then
    if new == M.DELETED then return nil end
    return M.CREATED
  end
  if old == M.DELETED then return new == M.DELETED and M.DELETED or M.CHANGED end
  return new == M.DELETED and M.DELETED or M.CHANGED
end

--- A file at path (absolute) was created, changed or deleted on disk.
function Docs:file_changed(path, change)
  local old = self._pending[path]
  if old == nil and self._npending >= M.MAX_PENDING then
    self.lost_changes = self.lost_changes + 1
    return
  end
  local v = combine(old and old.change, change)
  if v == nil then
    self._pending[path] = nil
    self._npending = self._npending - 1
    return
  end
  if not old then
    self._npending = self._npending + 1
    self._pending[path] = { change = v }
  else
    old.change = v
  end
end

--- Tell the server about the changes waiting (those its registrations ask
--- for): true, or nil, err.
function Docs:flush_changes()
  if self._npending == 0 then return true end
  local pending = self._pending
  self._pending, self._npending = {}, 0
  local root = self.workspace
  local root_uri = self._uri(root)
  local prefix = root == "/" and "/" or root .. "/"
  local list = {}
  self.structural = false -- a file of the server's languages came or went
  for path, p in pairs(pending) do
    local u = self._uri(path)
    local rel = path:sub(1, #prefix) == prefix and path:sub(#prefix + 1) or path
    if self.state:wants(rel, u, root_uri, p.change) then
      list[#list + 1] = { uri = u, type = p.change }
      local ext = (path:match("(%.[^./]+)$") or ""):lower()
      if p.change ~= M.CHANGED and self._s.extensionToLanguage[ext] then self.structural = true end
    end
  end
  table.sort(list, function(a, b) return a.uri < b.uri end)
  for i = 1, #list, M.BATCH do
    local batch = {}
    for j = i, math.min(#list, i + M.BATCH - 1) do batch[#batch + 1] = list[j] end
    local ok, err = self._conn:notify("workspace/didChangeWatchedFiles", { changes = batch })
    if not ok then return nil, err end
  end
  self.changes_sent = (self.changes_sent or 0) + #list
  if #list > 0 then self._gen = self._gen + 1 end
  return true
end

--- The paths waiting to be told with their change ({path, change}), sorted.
function Docs:pending_paths()
  local out = {}
  for p, c in pairs(self._pending) do out[#out + 1] = { path = p, change = c.change } end
  table.sort(out, function(a, b) return a.path < b.path end)
  return out
end

--- Show a file that is not open to the server once (didOpen, then
--- didClose): for servers that hear of no watched files but keep what they
--- saw of an opened file. true, or nil, err.
function Docs:show_once(path, language, text)
  if self._docs[path] then return true end
  local u = self._uri(path)
  local ok, err = self._conn:notify("textDocument/didOpen", {
    textDocument = { uri = u, languageId = language, version = 1, text = text } })
  if not ok then return nil, err end
  return self._conn:notify("textDocument/didClose", { textDocument = { uri = u } })
end

--- Changed paths waiting to be told.
function Docs:pending_changes()
  return self._npending
end

-- Diagnostics ---------------------------------------------------------------------

function Docs:_published(params)
  local path = uri.to_path(params.uri)
  if not path then return end
  local list = normalize.diagnostics(self.name, params.diagnostics)
  if not list then return end -- a malformed publication is ignored, as if never sent
  self._seq = (self._seq or 0) + 1
  local v = params.version
  if not self._diags[path] then
    if self._ndiags >= M.MAX_PUBLISHED then return end
    self._ndiags = self._ndiags + 1
  end
  self._diags[path] = { items = list, raw = params.diagnostics, version = type(v) == "number" and v or nil,
    seq = self._seq }
  local w = self._diag_waiters[path]
  if w then
    self._diag_waiters[path] = nil
    w:resolve()
  end
end

--- The diagnostics last published for path as the server sent them (for
--- code action contexts).
function Docs:raw_diagnostics(path)
  local d = self._diags[path]
  return d and type(d.raw) == "table" and d.raw or {}
end

--- Every path's last published diagnostics: {[path] = Diagnostic[]}.
function Docs:all_published()
  local out = {}
  for p, d in pairs(self._diags) do out[p] = d.items end
  return out
end

-- Wait until the server publishes diagnostics for path or ms pass: true,
-- or nil, err when signal aborted first.
local function wait_published(self, path, ms, signal)
  local w = self._diag_waiters[path] or async.future()
  self._diag_waiters[path] = w
  local ctl = async.controller()
  local off = signal and signal:on_abort(function(r) ctl:abort(r) end)
  async.run(function()
    async.sleep(ms, ctl.signal)
    w:resolve()
  end)
  w:await()
  if self._diag_waiters[path] == w then self._diag_waiters[path] = nil end
  ctl:abort("done")
  if off then off() end
  if signal and signal.aborted then return nil, async.abort_error(signal.reason) end
  return true
end

--- The diagnostics published for path's open version: waits (at most
--- wait_ms) until the server published for it after the latest change.
--- Returns the list and whether it describes the current content.
function Docs:published(path, wait_ms, signal)
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
    local ok, err = wait_published(self, path, left, signal)
    if not ok then return nil, err end
  end
  if self.dead then return nil, self.dead end
  local got = current()
  -- a server that publishes a file's diagnostics in parts (typescript-language-server: one
  -- kind after the other, without versions) has settled once it published nothing more for
  -- quiet_ms
  local quiet = self._s.diagnosticsQuietMs
  while got and quiet and quiet > 0 and not self.dead do
    local left = deadline - loop.now_ms()
    if left <= 0 then break end
    local seen = got.seq
    local ok, err = wait_published(self, path, math.min(quiet, left), signal)
    if not ok then return nil, err end
    got = current()
    if got and got.seq == seen then break end
  end
  if self.dead then return nil, self.dead end
  if got then return got.items, true end
  local stale = self._diags[path]
  return stale and stale.items or {}, false
end

function Docs:_wake_all()
  for _, w in pairs(self._diag_waiters) do w:resolve() end
  self._diag_waiters = {}
end

--- Mix the document methods into an instance class; init(self) sets one up.
function M.mixin(class)
  for k, v in pairs(Docs) do class[k] = v end
  return init
end

return M
