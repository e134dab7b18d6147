--- dsh.lsp._provider: one configured language server as a ctx.lsp provider,
-- written once for every backend (reference §2.5 "query").
--
-- A backend gives a subprocess seam (where servers and the source reader
-- run), the resolved argv, and its message prefix; everything else is here:
--   1. disposed → LSP_DISPOSED "<prefix> provider is disposed"; aborted → ABORTED
--      carrying the exact reason; a server whose command did not resolve
--      answers every query with that (LSP_UNAVAILABLE, naming what to install);
--   2. the workspace root and the source resolve canonically (one reader
--      round trip): root must be a directory, the source inside it; with
--      root markers, the server's root is the nearest directory from the
--      source up to the workspace that holds one (a subproject), else the
--      workspace;
--   3. one queue per root (different roots in parallel);
--   4. the server sees the world as it is now: every document open in it is
--      read again with the queried one (one round trip; unchanged ones
--      answer "same" without their bytes), the changes the workspace watch
--      saw go out as didChangeWatchedFiles, then the changed documents as
--      didChange (a gone one is closed); a document the server last saw
--      before other files changed gets its text again so the server
--      analyses it anew; the queried source is checked (no final symlink
--      followed, regular file, size limit, "grew while reading", valid UTF-8);
--   5. one pooled instance per root; on that instance's own transport
--      failure it is disposed, evicted, and the query is retried once on a
--      fresh one; a dead instance is always evicted afterwards; a query
--      waits (at most readyTimeoutMs) while the server reports work in
--      progress (loading the project).
--
-- A warm query overlaps these steps instead of paying for them one after the
-- other: when the same (root, file) resolved before, its document is open in
-- a live instance and nothing is waiting to be told, the resolution, the
-- reads (answered "same" without the bytes) and the server's request are all
-- sent at once. The answer is used only when the resolution came out as
-- before, every document is still the one the server has and no change
-- arrived meanwhile; otherwise it is dropped and the query takes the steps
-- in order, so every answer and every error is what the ordered steps give.
local async = require "dsh.async"
local errors = require "dsh.errors"
local instance = require "dsh.lsp._instance"
local operations = require "dsh.lsp._operations"
local lexical = require "dsh.path"
local queue = require "dsh.lsp._queue"
local sync = require "dsh.lsp._sync"
local utf8 = require "dsh.core.utf8"

local M = {}

M.MAX_KNOWN = 4096 -- remembered resolutions (for warm queries)

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
sync.mixin(Provider)

---@class dsh.lsp.ProviderOpts
---@field prefix string      "lsp-e2b", "lsp-local"
---@field where string       "remote " or "": how messages name paths
---@field server table       validated server config with argv
---@field subprocess table   the subprocess seam servers run through
---@field reader dsh.lsp.Reader
---@field uri_of fun(path:string):string
---@field hub dsh.lsp.WatchHub|nil  the workspace watch (default: none)
---@field fs (fun():table|nil)|nil  ctx.fs, to apply edits
---@field unavailable dsh.Error|nil   why the server cannot run (its command did not resolve)
---@field before_read fun(path:string)|nil  called right before the reader opens a source (specs)

---@param o dsh.lsp.ProviderOpts
---@return dsh.lsp.Provider
function M.new(o)
  local lower = {}
  for ext, lang in pairs(o.server.extensionToLanguage) do
    if type(ext) == "string" then lower[ext:lower()] = lang end
  end
  if not o.hub then
    local copy = {}
    for k, v in pairs(o) do copy[k] = v end
    copy.hub = require("dsh.lsp._watch").new(nil)
    o = copy
  end
  return setmetatable({
    id = o.server.id, extensionToLanguage = o.server.extensionToLanguage, _language_of = lower,
    _o = o, _prefix = o.prefix, _s = o.server, _pool = {}, _queue = queue.new(), _known = {}, _nknown = 0,
    _stop = async.controller(), -- aborts running queries when disposal cannot wait any longer
    unavailable = o.unavailable,
  }, Provider)
end

local function E(code, fmt, ...)
  return errors.new(code, string.format(fmt, ...))
end

-- A reader failure, told about the source (the reference's wording).
local function about(file, err)
  if err and err.code == "LSP_READER_FAILED" then
    return errors.new(err.code, string.format('source "%s" %s', file, err.message))
  end
  return err
end

local function inside(root, path)
  if path == root then return true end
  local prefix = root == "/" and "/" or root .. "/"
  return path:sub(1, #prefix) == prefix
end

-- The file named against the root, for the reader to resolve canonically in its world.
local absolute = lexical.join

-- Step 2: canonical workspace, source and the server's root.
function Provider:_resolve(req, signal)
  local root, file = req.workspaceRoot, req.filePath
  local res, err = self._o.reader:resolve({ root, absolute(root, file) }, signal)
  if not res then return nil, about(file, err) end
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
  local server_root = ws.path
  local markers = self._s.rootMarkers
  if markers and #markers > 0 then
    local start = src.kind == "dir" and src.path or (src.path:match("^(.*)/[^/]*$") or "/")
    if start == "" then start = "/" end
    local found, ferr = self._o.reader:find(ws.path, start, markers, signal)
    if found == nil then return nil, about(file, ferr) end
    if found then server_root = found end
  end
  return ws.path, src.path, server_root
end

-- A read result checked as the queried source: {token, text?}, or nil, err.
function Provider:_source(file, r)
  local max = self._s.maxDocumentBytes
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

function Provider:_instance(root, signal)
  local inst = self._pool[root]
  if inst and not inst.dead then return inst end
  if inst then self:_evict(root, inst) end
  local hub = self._o.hub
  -- the root's watch is armed while the server starts (not before: a query pays for one, not both)
  local watching = hub:enabled() and async.run(hub.ensure, hub, root)
  local err
  inst, err = instance.start({
    server = self._s, workspace = root, subprocess = self._o.subprocess, uri_of = self._o.uri_of,
  }, signal)
  if watching then watching:await() end
  if not inst then return nil, err end
  inst.unsubscribe = hub:subscribe(root, function(path, change) inst:file_changed(path, change) end)
  self._pool[root] = inst
  return inst
end

function Provider:_evict(root, inst)
  if self._pool[root] == inst then self._pool[root] = nil end
  if inst.unsubscribe then inst.unsubscribe() end
  inst:dispose()
end

local function transport_failure(inst, err)
  return inst.dead ~= nil and err ~= nil and err.code == "LSP_SERVER_FAILED"
end

--- The language id of a file, by its extension.
function Provider:language(file)
  local ext = (file:match("(%.[^./]+)$") or ""):lower()
  return self._language_of[ext] or "plaintext"
end

-- Step 5 with the source read: attempt 1 may have run already (first =
-- {inst, res, err}, from a warm query); a transport failure of the
-- instance is retried once on a fresh one.
function Provider:_attempts(req, root, path, signal, first, ws)
  for attempt = 1, 2 do
    local inst, res, rerr
    if attempt == 1 and first then
      inst, res, rerr = first.inst, first.res, first.err
    else
      local ierr
      inst, ierr = self:_instance(root, signal)
      if not inst then return nil, ierr end
      local ok, cerr = operations.check(inst, req.operation)
      if not ok then
        if inst.dead then self:_evict(root, inst) end
        return nil, cerr
      end
      local list, paths = self:_reads(inst, path)
      local reads, rderr = self._o.reader:read_many(list, signal)
      if not reads then return nil, about(req.filePath, rderr) end
      local src, serr = self:_source(req.filePath, reads[1])
      if not src then return nil, serr end
      self:_remember(req, root, path, ws)
      local others = {}
      for i = 2, #reads do others[#others + 1] = reads[i] end
      local synced, yerr = self:_bring_up_to_date(inst, path, src, others, paths, signal)
      if synced then
        self:_wait_ready(inst, signal)
        res, rerr = self:_run(inst, req, path, signal, ws)
      else
        rerr = yerr or E("LSP_SERVER_FAILED", "%s lost the document %s", inst.name, path)
      end
    end
    if inst.dead then self:_evict(root, inst) end
    if res then return res end
    if attempt == 2 or not transport_failure(inst, rerr) or (signal and signal.aborted) then return nil, rerr end
  end
end

function Provider:_run(inst, req, path, signal, ws)
  local since = inst.state._seq
  local res, err = operations.run({
    inst = inst, req = req, path = path, uri_of = self._o.uri_of, signal = signal, provider = self,
    ws = ws or inst.workspace,
  })
  -- what the server said meanwhile that a caller should know (errors and warnings it showed)
  local said = inst.state:messages_after(since, { error = true, warning = true })
  if res and #said > 0 then
    res.serverMessages = {}
    for _, m in ipairs(said) do
      if m.kind == "show" then res.serverMessages[#res.serverMessages + 1] = { type = m.type, text = m.text } end
    end
    if #res.serverMessages == 0 then res.serverMessages = nil end
  end
  return res, err
end

-- Steps 2-5 in order.
function Provider:_ordered(req, signal)
  local ws, path, root = self:_resolve(req, signal)
  if not ws then return nil, path end
  local release, qerr = self._queue:acquire(root, signal)
  if not release then return nil, qerr end
  local ok, r, e = pcall(function()
    if self._disposed then return nil, E("LSP_DISPOSED", "%s provider is disposed", self._prefix) end
    if self._o.before_read then self._o.before_read(path) end
    return self:_attempts(req, root, path, signal, nil, ws)
  end)
  release()
  if not ok then error(r, 0) end
  return r, e
end

-- What (root, file) resolved to, for the next warm query (bounded: forgotten
-- all at once when full).
function Provider:_remember(req, root, path, ws)
  local key = req.workspaceRoot .. "\0" .. req.filePath
  if not self._known[key] then
    if self._nknown >= M.MAX_KNOWN then self._known, self._nknown = {}, 0 end
    self._nknown = self._nknown + 1
  end
  self._known[key] = { root = root, path = path, ws = ws }
end

-- The warm query (see the top): the answer, or nil when the ordered steps must run.
function Provider:_warm(req, signal)
  local known = self._known[req.workspaceRoot .. "\0" .. req.filePath]
  local inst = known and self._pool[known.root]
  if not inst or inst.dead or operations.CHANGES_FILES[req.operation] or not inst:token(known.path)
    or not operations.check(inst, req.operation)
    or inst:pending_changes() > 0 or inst:is_stale(known.path) or #inst.state:busy() > 0 then
    return nil
  end
  local release = self._queue:acquire(known.root, signal)
  if not release then return nil end
  local ok, done, v, verr = pcall(function()
    if self._disposed or self._pool[known.root] ~= inst or inst.dead or not inst:token(known.path) then return nil end
    local root, file = req.workspaceRoot, req.filePath
    local reader = self._o.reader
    if self._o.before_read then self._o.before_read(known.path) end
    local list = self:_reads(inst, known.path)
    local resolve = { root, absolute(root, file) }
    local checking = async.run(reader.check, reader, resolve, list, signal)
    local running = async.run(self._run, self, inst, req, known.path, signal, known.ws)
    running:on_settle(function() end) -- dropped when the checks fail
    local res, reads = checking:await()
    if not (res and res[1].kind == "dir" and res[1].path == known.ws and res[2].kind == "file"
      and res[2].path == known.path) then
      return nil
    end
    for i, rd in ipairs(reads or {}) do
      if rd.kind ~= "same" or rd.token ~= list[i][3] then return nil end
    end
    self._o.hub:settle(signal)
    if inst:pending_changes() > 0 then return nil end
    local res1, err1 = running:await()
    return true, self:_attempts(req, known.root, known.path, signal, { inst = inst, res = res1, err = err1 },
      known.ws)
  end)
  release()
  if not ok then error(done, 0) end
  if done then return true, v, verr end
  return nil
end

--- Answer a validated request (see dsh.lsp): a result, or nil, err.
---@param req table
---@param signal dsh.AbortSignal|nil
function Provider:query(req, signal)
  if self._disposed then return nil, E("LSP_DISPOSED", "%s provider is disposed", self._prefix) end
  if self.unavailable then return nil, self.unavailable end
  if signal and signal.aborted then return nil, async.abort_error(signal.reason) end
  -- the caller's signal, or disposal giving up on waiting
  local ctl = async.controller()
  local off1 = signal and signal:on_abort(function(r) ctl:abort(r) end)
  local off2 = self._stop.signal:on_abort(function(r) ctl:abort(r) end)
  local ok, res, err = pcall(function()
    local done, r, e = self:_warm(req, ctl.signal)
    if done then return r, e end
    if ctl.signal.aborted then return nil, async.abort_error(ctl.signal.reason) end
    return self:_ordered(req, ctl.signal)
  end)
  if off1 then off1() end
  off2()
  if not ok then error(res, 0) end
  return res, err
end

--- Close documents: those of filePath (resolved as a query's), or with
--- filePath nil every document open under workspaceRoot. true, or nil, err.
function Provider:close(workspaceRoot, filePath, signal)
  if self._disposed or self.unavailable then return true end
  local paths = {}
  if filePath then
    local _, path, root = self:_resolve({ workspaceRoot = workspaceRoot, filePath = filePath }, signal)
    if not path then return nil, root end
    paths[1] = { root = root, path = path }
  end
  for root, inst in pairs(self._pool) do
    if not inst.dead then
      for _, d in ipairs(inst:open_documents()) do
        local keep = true
        if filePath then
          keep = not (paths[1].root == root and paths[1].path == d.path)
        elseif type(workspaceRoot) == "string" then
          keep = not inside(workspaceRoot, d.path)
        end
        if not keep then
          local ok, err = inst:close_document(d.path)
          if not ok then return nil, err end
        end
      end
    end
  end
  return true
end

--- What this provider's servers are doing: one entry per running instance.
function Provider:status()
  local out = { id = self.id, extensions = {}, instances = {} }
  for ext in pairs(self._language_of) do out.extensions[#out.extensions + 1] = ext end
  table.sort(out.extensions)
  if self.unavailable then
    out.available, out.problem = false, self.unavailable.message
    return out
  end
  out.available = true
  for root, inst in pairs(self._pool) do
    local docs = {}
    for _, d in ipairs(inst:open_documents()) do docs[#docs + 1] = d.path end
    table.sort(docs)
    local msgs = {}
    for _, m in ipairs(inst.state.messages) do msgs[#msgs + 1] = { kind = m.kind, type = m.type, text = m.text } end
    out.instances[#out.instances + 1] = {
      root = root, alive = not inst.dead, problem = inst.dead and inst.dead.message or nil,
      busy = inst.state:busy(), documents = docs, messages = msgs, pendingChanges = inst:pending_changes(),
      changesSent = inst.changes_sent or 0, lostChanges = inst.lost_changes,
      watching = self._o.hub:enabled(), server = inst.server_info,
    }
  end
  table.sort(out.instances, function(a, b) return a.root < b.root end)
  return out
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
  for root, inst in pairs(self._pool) do list[#list + 1] = { root, inst } end
  for _, e in ipairs(list) do self:_evict(e[1], e[2]) end
  return true
end

return M
