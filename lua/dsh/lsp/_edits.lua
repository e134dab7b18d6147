--- dsh.lsp._edits: a server's WorkspaceEdit, checked and applied through
-- ctx.fs as one change: every file or none.
--
-- normalize(server, edit) accepts `changes` ({uri: TextEdit[]}) and
-- `documentChanges` (TextDocumentEdit[], with the version the server saw;
-- file creations, renames and deletions are refused: dsh advertises no
-- resource operations) and gives {files = {{uri, path, version?, edits}}}.
-- apply(fs, files, opts) then, for every file:
--   1. reads it through ctx.fs (text and the fs seam's version);
--   2. checks it is what the server edited: the text of the open document
--      (opts.seen(path) → text, version) when the server has it open,
--      else the file as it is; a versioned edit must name that version;
--   3. applies the edits (UTF-16 ranges on that text, none overlapping);
-- and only when every file passed, writes each with replaceIfVersion (so a
-- write made meanwhile by anyone fails it), undoing the files already
-- written, in reverse, when a later one fails. Returns {files = {{path,
-- edits, version}}}, or nil, LSP_EDIT_FAILED (nothing changed; err.partial
-- lists files an undo could not restore, which never happens unless another
-- writer raced the undo).
local errors = require "dsh.errors"
local json = require "dsh.json"
local position = require "dsh.lsp.position"
local uri = require "dsh.lsp.uri"

local M = {}

M.MAX_FILES = 1000
M.MAX_EDITS = 100000

local null = json.null

local function E(fmt, ...)
  return errors.new("LSP_EDIT_FAILED", string.format(fmt, ...))
end

local function range(r)
  local function pos(p)
    return type(p) == "table" and type(p.line) == "number" and type(p.character) == "number" and p.line >= 0
      and p.character >= 0 and p.line % 1 == 0 and p.character % 1 == 0
  end
  return type(r) == "table" and pos(r.start) and pos(r["end"])
end

local function text_edits(server, list, out)
  if type(list) ~= "table" then return nil, errors.new("LSP_MALFORMED_RESPONSE", server .. " sent malformed edits") end
  for _, e in ipairs(list) do
    if type(e) ~= "table" or not range(e.range) or type(e.newText) ~= "string" then
      return nil, errors.new("LSP_MALFORMED_RESPONSE", server .. " sent a malformed text edit")
    end
    out[#out + 1] = { range = e.range, newText = e.newText }
    if #out > M.MAX_EDITS then return nil, E("%s sent more than %d edits", server, M.MAX_EDITS) end
  end
  return out
end

--- A WorkspaceEdit as {files = {{uri, path, version, edits}}} (files in
--- first-seen order, a file's edits merged), or nil, err.
function M.normalize(server, edit)
  if edit == nil or edit == null then return { files = {} } end
  if type(edit) ~= "table" then
    return nil, errors.new("LSP_MALFORMED_RESPONSE", server .. " sent a malformed workspace edit")
  end
  local files, by_uri = {}, {}
  local function file(u, version)
    local f = by_uri[u]
    if not f then
      local path = uri.to_path(u)
      if not path then return nil, E("%s edits %s, which is not a file dsh can write", server, tostring(u)) end
      f = { uri = u, path = path, edits = {} }
      by_uri[u] = f
      files[#files + 1] = f
      if #files > M.MAX_FILES then return nil, E("%s edits more than %d files", server, M.MAX_FILES) end
    end
    if version ~= nil and version ~= null then f.version = version end
    return f
  end
  if edit.documentChanges ~= nil and edit.documentChanges ~= null then
    if type(edit.documentChanges) ~= "table" then
      return nil, errors.new("LSP_MALFORMED_RESPONSE", server .. " sent malformed documentChanges")
    end
    for _, dc in ipairs(edit.documentChanges) do
      if type(dc) ~= "table" then
        return nil, errors.new("LSP_MALFORMED_RESPONSE", server .. " sent malformed documentChanges")
      end
      if type(dc.kind) == "string" then
        return nil, E("%s asked to %s a file, which dsh does not do in an edit", server, dc.kind)
      end
      local td = dc.textDocument
      if type(td) ~= "table" or type(td.uri) ~= "string" then
        return nil, errors.new("LSP_MALFORMED_RESPONSE", server .. " sent a malformed TextDocumentEdit")
      end
      local f, err = file(td.uri, td.version)
      if not f then return nil, err end
      local ok, terr = text_edits(server, dc.edits, f.edits)
      if not ok then return nil, terr end
    end
  elseif edit.changes ~= nil and edit.changes ~= null then
    if type(edit.changes) ~= "table" then
      return nil, errors.new("LSP_MALFORMED_RESPONSE", server .. " sent malformed changes")
    end
    local uris = {}
    for u in pairs(edit.changes) do
      if type(u) ~= "string" then
        return nil, errors.new("LSP_MALFORMED_RESPONSE", server .. " sent malformed changes")
      end
      uris[#uris + 1] = u
    end
    table.sort(uris)
    for _, u in ipairs(uris) do
      local f, err = file(u)
      if not f then return nil, err end
      local ok, terr = text_edits(server, edit.changes[u], f.edits)
      if not ok then return nil, terr end
    end
  end
  -- a file the server listed with no edits changes nothing
  local out = {}
  for _, f in ipairs(files) do
    if #f.edits > 0 then out[#out + 1] = f end
  end
  return { files = out }
end

local function before(a, b)
  return a.line < b.line or (a.line == b.line and a.character < b.character)
end

--- text with edits applied (ranges on text), or nil, err.
function M.apply_text(text, edits, name)
  local starts = position.line_starts(text)
  local spans = {}
  for i, e in ipairs(edits) do
    local s, t = e.range.start, e.range["end"]
    if before(t, s) then return nil, E("an edit of %s ends before it starts", name) end
    local a = position.to_index(text, s, starts)
    local b = position.to_index(text, t, starts)
    spans[i] = { a = a, b = b, text = e.newText, n = i }
  end
  -- stable: edits at one point apply in the order given
  table.sort(spans, function(x, y)
    if x.a ~= y.a then return x.a < y.a end
    return x.n < y.n
  end)
  local out, at = {}, 1
  for _, sp in ipairs(spans) do
    if sp.a < at then return nil, E("edits of %s overlap", name) end
    out[#out + 1] = text:sub(at, sp.a - 1)
    out[#out + 1] = sp.text
    at = sp.b
  end
  out[#out + 1] = text:sub(at)
  return table.concat(out)
end

---@class dsh.lsp.EditOpts
---@field seen fun(path:string):string|nil, integer|nil  the text (and version) the server has open for path
---@field signal dsh.AbortSignal|nil

--- Apply normalized files through fs as one change (see the top).
---@param fs table  ctx.fs
---@param files table[]
---@param o dsh.lsp.EditOpts
function M.apply(fs, files, o)
  if type(fs) ~= "table" or type(fs.writeText) ~= "function" then
    return nil, errors.new("LSP_UNAVAILABLE", "applying an edit needs ctx.fs in the same context")
  end
  local plan = {}
  for _, f in ipairs(files) do
    local cur, err = fs:readText(f.path, { signal = o.signal })
    if not cur then
      return nil, E("%s could not be read to edit it: %s", f.path, tostring(err and err.message or err))
    end
    local seen, version = nil, nil
    if o.seen then seen, version = o.seen(f.path) end
    if seen ~= nil and seen ~= cur.text then
      return nil, E("%s changed since the language server saw it; ask again", f.path)
    end
    if f.version ~= nil and version ~= nil and f.version ~= version then
      return nil, E("%s: the edit is for version %s of the document, the server has version %s; ask again",
        f.path, tostring(f.version), tostring(version))
    end
    local new, aerr = M.apply_text(cur.text, f.edits, f.path)
    if not new then return nil, aerr end
    plan[#plan + 1] = { path = f.path, old = cur.text, new = new, version = cur.version, edits = #f.edits }
  end
  local done = {}
  for _, p in ipairs(plan) do
    local r, err = fs:writeText(p.path, p.new, { replaceIfVersion = p.version })
    if not r then
      local partial = {}
      for i = #done, 1, -1 do
        local d = done[i]
        if not fs:writeText(d.path, d.old, { replaceIfVersion = d.written }) then partial[#partial + 1] = d.path end
      end
      local e = E("%s could not be written (%s); nothing was changed", p.path, tostring(err and err.message or err))
      if #partial > 0 then
        e = E("%s could not be written (%s), and %s could not be restored", p.path,
          tostring(err and err.message or err), table.concat(partial, ", "))
        e.partial = partial
      end
      return nil, e
    end
    p.written = r.version
    done[#done + 1] = p
  end
  local out = {}
  for _, p in ipairs(plan) do out[#out + 1] = { path = p.path, edits = p.edits, version = p.written } end
  return { files = out }
end

return M
