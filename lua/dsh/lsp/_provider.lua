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
--
-- A warm query overlaps these steps instead of paying for them one after the
-- other: when the same (root, file) resolved before and its document is open
-- unchanged in a live instance, the resolution, the read (answered "same"
-- without the bytes) and the server's request are all sent at once. The
-- answer is used only when the resolution came out as before and the content
-- is still the one the server has; otherwise it is dropped and the query
-- takes the steps in order, so every answer and every error is what the
-- ordered steps give. Nothing new reaches the server before the checks pass.
local async = require "dsh.async"
local errors = require "dsh.errors"
local instance = require "dsh.lsp._instance"
local operations = require "dsh.lsp._operations"
local queue = require "dsh.lsp._queue"
local utf8 = require "dsh.utf8"

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
    id = o.server.id, extensionToLanguage = o.server.extensionToLanguage, _language_of = lower,
    _o = o, _prefix = o.prefix, _s = o.server, _pool = {}, _queue = queue.new(), _known = {}, _nknown = 0,
    _stop = async.controller(), -- aborts running queries when disposal cannot wait any longer
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

-- Steps 2: canonical workspace and source.
function Provider:_resolve(req, signal)
  local root, file = req.workspaceRoot, req.filePath
  local abs = file:sub(1, 1) == "/" and file or (root:gsub("/+$", "") .. "/" .. file)
  local res, err = self._o.reader:resolve({ root, abs }, signal)
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
  return ws.path, src.path
end

-- Step 4: the source's content as {token, text?}, or nil, err.
function Provider:_read(file, path, have, signal)
  if self._o.before_read then self._o.before_read(path) end
  local max = self._s.maxDocumentBytes
  local r, err = self._o.reader:read(path, max, have, signal)
  if not r then return nil, about(file, err) end
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

function Provider:_run(inst, req, path, signal)
  return operations.run(inst, req, path, self._o.uri_of, signal)
end

local function transport_failure(inst, err)
  return inst.dead ~= nil and err ~= nil and err.code == "LSP_SERVER_FAILED"
end

function Provider:_language(file)
  local ext = (file:match("(%.[^./]+)$") or ""):lower()
  return self._language_of[ext] or "plaintext"
end

-- Step 5 with the source read: attempt 1 may have run already (first =
-- {inst, res, err}, from a warm query); a transport failure of the
-- instance is retried once on a fresh one.
function Provider:_attempts(req, ws, path, src, signal, first)
  local language = self:_language(req.filePath)
  for attempt = 1, 2 do
    local inst, res, rerr
    if attempt == 1 and first then
      inst, res, rerr = first.inst, first.res, first.err
    else
      local ierr
      inst, ierr = self:_instance(ws, signal)
      if not inst then return nil, ierr end
      local ok, cerr = operations.check(inst, req.operation)
      if not ok then return nil, cerr end
      local synced, serr = inst:sync(path, language, src)
      if synced == false then -- a fresh instance needs the text
        local err
        src, err = self:_read(req.filePath, path, nil, signal)
        if not src then return nil, err end
        synced, serr = inst:sync(path, language, src)
      end
      if synced then res, rerr = self:_run(inst, req, path, signal) else rerr = serr end
    end
    if inst.dead then self:_evict(ws, inst) end
    if res then return res end
    if attempt == 2 or not transport_failure(inst, rerr) or (signal and signal.aborted) then return nil, rerr end
  end
end

-- Steps 2-5 in order.
function Provider:_ordered(req, signal)
  local ws, path = self:_resolve(req, signal)
  if not ws then return nil, path end
  local release, qerr = self._queue:acquire(ws, signal)
  if not release then return nil, qerr end
  local ok, r, e = pcall(function()
    if self._disposed then return nil, E("LSP_DISPOSED", "%s provider is disposed", self._prefix) end
    local pooled = self._pool[ws]
    local have = pooled and not pooled.dead and pooled:token(path) or nil
    local src, err = self:_read(req.filePath, path, have, signal)
    if not src then return nil, err end
    self:_remember(req, ws, path)
    return self:_attempts(req, ws, path, src, signal)
  end)
  release()
  if not ok then error(r, 0) end
  return r, e
end

-- What (root, file) resolved to, for the next warm query (bounded: forgotten
-- all at once when full).
function Provider:_remember(req, ws, path)
  local key = req.workspaceRoot .. "\0" .. req.filePath
  if not self._known[key] then
    if self._nknown >= M.MAX_KNOWN then self._known, self._nknown = {}, 0 end
    self._nknown = self._nknown + 1
  end
  self._known[key] = { ws = ws, path = path }
end

-- The warm query (see the top): the answer, or nil when the ordered steps must run.
function Provider:_warm(req, signal)
  local known = self._known[req.workspaceRoot .. "\0" .. req.filePath]
  local inst = known and self._pool[known.ws]
  if not inst or inst.dead or not inst:token(known.path) or not operations.check(inst, req.operation) then
    return nil
  end
  local release = self._queue:acquire(known.ws, signal)
  if not release then return nil end
  local ok, done, v, verr = pcall(function()
    local token = inst:token(known.path)
    if self._disposed or self._pool[known.ws] ~= inst or inst.dead or not token then return nil end
    local root, file = req.workspaceRoot, req.filePath
    local abs = file:sub(1, 1) == "/" and file or (root:gsub("/+$", "") .. "/" .. file)
    local reader = self._o.reader
    if self._o.before_read then self._o.before_read(known.path) end
    local checking = async.run(reader.check, reader, { root, abs }, known.path, self._s.maxDocumentBytes, token,
      signal)
    local running = async.run(self._run, self, inst, req, known.path, signal)
    running:on_settle(function() end) -- dropped when the checks fail
    local res, rd = checking:await()
    if not (res and res[1].kind == "dir" and res[1].path == known.ws and res[2].kind == "file"
      and res[2].path == known.path and rd and rd.kind == "same" and rd.token == token) then
      return nil
    end
    local res1, err1 = running:await()
    return true, self:_attempts(req, known.ws, known.path, { token = token }, signal,
      { inst = inst, res = res1, err = err1 })
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
