--- dsh.lsp._sync: bringing a running server up to date before a query
-- (step 4 of dsh.lsp._provider), mixed into the provider class.
--
-- The queried document and every other open one are read again in one
-- reader round trip; the watch's changes are let in (the hub's barrier) and
-- told (didChangeWatchedFiles), files changed on disk are shown once to a
-- server that hears of no watched files (reopenChanged), the documents are
-- synced (a gone one closed), a document analysed before other files
-- changed is sent again; then the query waits while the server reports work
-- in progress or has not yet logged a ready or change message.
local loop = require "dsh.core.loop"
local utf8 = require "dsh.core.utf8"

local M = {}

local Sync = {}

-- The reads that bring inst up to date with path: path first, then every
-- other open document (each with the token the server has).
function Sync:_reads(inst, path)
  local max = self._s.maxDocumentBytes
  local list, paths = { { path, max, inst:token(path) } }, { path }
  for _, d in ipairs(inst:open_documents()) do
    if d.path ~= path then
      list[#list + 1] = { d.path, max, d.token }
      paths[#paths + 1] = d.path
    end
  end
  return list, paths
end

-- Step 4 once the reads came back: changes first, then the documents.
-- src is the queried source ({token, text?}); returns true, false (a fresh
-- instance needs the text: read again) or nil, err.
function Sync:_bring_up_to_date(inst, path, src, others, paths, signal)
  self._o.hub:settle(signal)
  if self._s.reopenChanged then
    local ok, err = self:_show_changed(inst, signal)
    if not ok then return nil, err end
  end
  local ok, err = inst:flush_changes()
  if not ok then return nil, err end
  -- a server that says when it took in new or removed files (pyright: "Found 3 source files")
  if inst.structural and self._s.changeMessages then inst.state:expect(self._s.changeMessages) end
  for i, rd in ipairs(others) do
    local p = paths[i + 1]
    if rd.kind == "ok" or rd.kind == "same" then
      if rd.kind ~= "ok" or utf8.validate(rd.text) then
        ok, err = inst:sync(p, self:language(p), rd)
        if ok == nil then return nil, err end
      end
    else
      ok, err = inst:close_document(p) -- gone, or no longer a file the server may have
      if not ok then return nil, err end
    end
  end
  local synced, serr = inst:sync(path, self:language(path), src)
  if not synced then return synced, serr end
  return inst:refresh_if_stale(path)
end

-- For a server that hears of no watched files (reopenChanged): the files of
-- its languages that changed on disk, shown to it once as they are now.
function Sync:_show_changed(inst, signal)
  local paths = {}
  for _, c in ipairs(inst:pending_paths()) do
    local ext = (c.path:match("(%.[^./]+)$") or ""):lower()
    if c.change ~= 3 and self._language_of[ext] and not inst:document(c.path) and #paths < 256 then
      paths[#paths + 1] = c.path
    end
  end
  return self:_each_text(paths, signal, function(path, rd)
    local ok, serr = inst:show_once(path, self:language(path), rd.text)
    if not ok then return nil, serr end
    return true
  end)
end

-- Read paths in the sandbox at once and call fn(path, read) for each that
-- is UTF-8 text, in order: true, or the first nil, err (fn's or the read's).
function Sync:_each_text(paths, signal, fn)
  if #paths == 0 then return true end
  local list = {}
  for i, p in ipairs(paths) do list[i] = { p, self._s.maxDocumentBytes } end
  local reads, err = self._o.reader:read_many(list, signal)
  if not reads then return nil, err end
  for i, rd in ipairs(reads) do
    if rd.kind == "ok" and utf8.validate(rd.text) then
      local ok, ferr = fn(paths[i], rd)
      if ok == nil then return nil, ferr end
    end
  end
  return true
end

--- Open the files at paths (not open yet) in inst, as they are now: true, or nil, err.
function Sync:open_files(inst, paths, signal)
  local which = {}
  for _, p in ipairs(paths) do
    if not inst:document(p) then which[#which + 1] = p end
  end
  return self:_each_text(which, signal, function(path, rd)
    local ok, serr = inst:sync(path, self:language(path), rd)
    if ok == nil then return nil, serr end
    return true
  end)
end


-- While the server reports work in progress (loading the project), wait
-- (at most readyTimeoutMs in all for this instance).
function Sync:_wait_ready(inst, signal)
  if #inst.state:busy() == 0 then return end
  if inst.structural and self._s.changeMessages then
    -- waiting for the server to take in files that came or went: at most readyTimeoutMs each time
    inst.structural = false
    inst.state:wait_idle(self._s.readyTimeoutMs, signal)
    return
  end
  local spent = inst.ready_waited or 0
  local left = self._s.readyTimeoutMs - spent
  if left <= 0 then return end
  local t0 = loop.now_ms()
  inst.state:wait_idle(left, signal)
  inst.ready_waited = spent + (loop.now_ms() - t0)
end


--- Mix the sync methods into the provider class.
function M.mixin(class)
  for k, v in pairs(Sync) do class[k] = v end
end

return M
