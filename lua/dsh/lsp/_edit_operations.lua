--- dsh.lsp._edit_operations: the operations that change files — rename,
-- code actions (listed, or one applied by title), organize imports and
-- formatting. The server's edits are applied through ctx.fs as one change
-- (dsh.lsp._edits), checked against the text the server has open; an edit
-- the server makes itself while running an action's command
-- (workspace/applyEdit) is applied the same way. With req.apply == false
-- the edit is returned, not applied.
--
-- Result: {kind = "edit", applied = boolean, files = {{path, edits,
-- version?}}, reason = string|nil (why nothing was applied)} or, for
-- codeActions, {kind = "actions", actions = {{title, kind, isPreferred,
-- disabled}}}.
local async = require "dsh.async"
local edits = require "dsh.lsp._edits"
local errors = require "dsh.errors"
local json = require "dsh.json"
local normalize = require "dsh.lsp._normalize"

local M = {}

M.OPERATIONS = { rename = true, codeActions = true, applyCodeAction = true, organizeImports = true, format = true }

local null = json.null

local function E(code, fmt, ...)
  return errors.new(code, string.format(fmt, ...))
end

local function inside(root, path)
  local prefix = root == "/" and "/" or root .. "/"
  return path == root or path:sub(1, #prefix) == prefix
end

-- Apply normalized files (or just describe them with apply == false).
local function apply(q, files, ws_uri)
  local out = { kind = "edit", applied = false, files = {}, resolvedWorkspaceUri = ws_uri }
  if #files == 0 then
    out.reason = "the server proposed no change"
    return out
  end
  for _, f in ipairs(files) do
    if not inside(q.ws, f.path) then
      return nil, E("LSP_EDIT_FAILED", "%s proposed an edit of %s, outside the workspace %s; nothing was changed",
        q.inst.name, f.path, q.ws)
    end
  end
  if q.req.apply == false then
    for _, f in ipairs(files) do
      out.files[#out.files + 1] = { path = f.path, edits = #f.edits, textEdits = f.edits }
    end
    out.reason = "not applied (apply = false)"
    return out
  end
  local inst = q.inst
  local r, err = edits.apply(q.provider._o.fs and q.provider._o.fs(), files, {
    signal = q.signal,
    seen = function(path)
      local d = inst:document(path)
      if d then return d.text, d.version end
      return nil
    end,
  })
  if not r then return nil, err end
  out.applied, out.files = true, r.files
  return out
end

local function workspace_edit(q, edit, ws_uri)
  local n, err = edits.normalize(q.inst.name, edit)
  if not n then return nil, err end
  return apply(q, n.files, ws_uri)
end

local function whole_document(q)
  local d = q.inst:document(q.path)
  local lines = 0
  if d then
    for _ in d.text:gmatch("\n") do lines = lines + 1 end
  end
  return { start = { line = 0, character = 0 }, ["end"] = { line = lines + 1, character = 0 } }
end

local function overlaps(a, b)
  local function le(x, y) return x.line < y.line or (x.line == y.line and x.character <= y.character) end
  return le(a.start, b["end"]) and le(b.start, a["end"])
end

-- The code actions at q's range: raw diagnostics of the file that touch it
-- go in the context (quick fixes need them).
local function actions(q, doc, range, only)
  local inst = q.inst
  local diags = json.array {}
  for _, d in ipairs(inst:raw_diagnostics(q.path)) do
    if type(d) == "table" and type(d.range) == "table" and normalize.range(d.range)
      and overlaps(normalize.range(d.range), range) then
      diags[#diags + 1] = d
    end
  end
  local ctx = { diagnostics = diags, triggerKind = 1 }
  if only then ctx.only = only end
  local res, err = inst:request("textDocument/codeAction", { textDocument = doc, range = range, context = ctx },
    q.signal)
  if err then return nil, err end
  return normalize.code_actions(inst.name, res)
end

-- Apply one action: its edit (resolved first when the server leaves it
-- out), then its command, whose own edits come back as workspace/applyEdit.
local function apply_action(q, action, ws_uri)
  local inst = q.inst
  local raw = action.raw
  if type(raw.command) == "string" and raw.edit == nil then -- a bare Command
    raw = { title = raw.title, command = raw }
  end
  local cap = inst.capabilities.codeActionProvider
  if raw.edit == nil and type(raw.command) ~= "table" and type(cap) == "table" and cap.resolveProvider then
    local res, err = inst:request("codeAction/resolve", raw, q.signal)
    if err then return nil, err end
    if type(res) == "table" then raw = res end
  end
  local out
  if raw.edit ~= nil and raw.edit ~= null then
    local r, err = workspace_edit(q, raw.edit, ws_uri)
    if not r then return nil, err end
    out = r
  end
  local cmd = raw.command
  if type(cmd) == "table" and type(cmd.command) == "string" then
    if q.req.apply == false then
      out = out or { kind = "edit", applied = false, files = {}, resolvedWorkspaceUri = ws_uri }
      out.reason = "not applied (apply = false); the action also runs the command " .. cmd.command
      return out
    end
    local applied, asked, running = {}, 0, {}
    local failed
    -- edits the server sends while the command runs, applied one after the other
    inst:on_apply_edit(function(edit)
      asked = asked + 1
      local mine = async.future()
      local before = running[#running]
      running[#running + 1] = mine
      if before then before:await() end
      local r, err = workspace_edit(q, edit, ws_uri)
      if not r then
        failed = err
      else
        for _, f in ipairs(r.files) do applied[#applied + 1] = f end
      end
      mine:resolve()
      return r, err
    end)
    local res, err = inst:request("workspace/executeCommand", { command = cmd.command,
      arguments = type(cmd.arguments) == "table" and cmd.arguments or nil }, q.signal)
    inst:on_apply_edit(nil)
    if running[#running] then running[#running]:await() end
    if err then return nil, err end
    if failed then return nil, failed end
    -- a server may answer the command with the edit itself (pyright's organize imports) instead
    if asked == 0 and type(res) == "table" and (res.changes ~= nil or res.documentChanges ~= nil) then
      local r, rerr = workspace_edit(q, res, ws_uri)
      if not r then return nil, rerr end
      for _, f in ipairs(r.files) do applied[#applied + 1] = f end
    end
    out = out or { kind = "edit", applied = false, files = {}, resolvedWorkspaceUri = ws_uri }
    for _, f in ipairs(applied) do out.files[#out.files + 1] = f end
    out.applied = out.applied or #applied > 0
    if #out.files > 0 then out.reason = nil end
    if not out.applied then out.reason = "the action's command " .. cmd.command .. " changed no file" end
  end
  return out or { kind = "edit", applied = false, files = {}, reason = "the action has neither an edit nor a command",
    resolvedWorkspaceUri = ws_uri }
end

--- Run an edit operation (q as dsh.lsp._operations gives it).
function M.run(q, doc, ws_uri)
  local inst, req = q.inst, q.req
  local op = req.operation
  if op == "rename" then
    -- the declaration's file open too: some servers rename only in the files they have open
    local defs = inst.capabilities.definitionProvider and inst:request("textDocument/definition",
      { textDocument = doc, position = req.position }, q.signal)
    local paths, locs = {}, {}
    for _, l in ipairs(normalize.locations(inst.name, defs) or {}) do
      local p = require("dsh.lsp.uri").to_path(l.uri)
      if p and inside(q.ws, p) then
        paths[#paths + 1] = p
        locs[#locs + 1] = l
      end
    end
    local ok, oerr = q.provider:open_files(inst, paths, q.signal)
    if not ok then return nil, oerr end
    -- and looked at (pyright resolves a declaration's file for rename only once it evaluated it)
    for _, l in ipairs(locs) do
      if inst.capabilities.hoverProvider then
        inst:request("textDocument/hover", { textDocument = { uri = l.uri }, position = l.range.start }, q.signal)
      end
    end
    local res, err = inst:request("textDocument/rename", { textDocument = doc, position = req.position,
      newName = req.newName }, q.signal)
    if err then return nil, err end
    return workspace_edit(q, res, ws_uri)
  end
  if op == "format" then
    local opts = { tabSize = req.tabSize or 4, insertSpaces = req.insertSpaces ~= false,
      trimTrailingWhitespace = true, insertFinalNewline = true }
    local res, err = inst:request("textDocument/formatting", { textDocument = doc, options = opts }, q.signal)
    if err then return nil, err end
    if res ~= nil and type(res) ~= "table" then
      return nil, E("LSP_MALFORMED_RESPONSE", "%s returned a malformed formatting result", inst.name)
    end
    return workspace_edit(q, { changes = { [doc.uri] = res or {} } }, ws_uri)
  end
  local range
  if op == "organizeImports" then
    range = whole_document(q)
  else
    range = { start = req.position, ["end"] = req.endPosition or req.position }
  end
  local only = op == "organizeImports" and { "source.organizeImports" } or req.only
  local list, err = actions(q, doc, range, only)
  if not list then return nil, err end
  if op == "codeActions" then
    local out = {}
    for _, a in ipairs(list) do
      out[#out + 1] = { title = a.title, kind = a.kind, isPreferred = a.isPreferred, disabled = a.disabled }
    end
    return { kind = "actions", actions = out, resolvedWorkspaceUri = ws_uri }
  end
  local chosen
  for _, a in ipairs(list) do
    if op == "organizeImports" then
      if a.kind and (a.kind == "source.organizeImports" or a.kind:sub(1, 23) == "source.organizeImports.")
        and not a.disabled then
        chosen = a
        break
      end
    elseif a.title == req.title then
      chosen = a
      break
    end
  end
  if not chosen and op == "organizeImports" and q.provider._s.organizeImportsCommand then
    -- a server that organizes imports only as a command of its own (pyright.organizeimports)
    chosen = { title = "organize imports", raw = { title = "organize imports", command = {
      command = q.provider._s.organizeImportsCommand, arguments = { doc.uri } } } }
  end
  if not chosen then
    if op == "organizeImports" then
      return { kind = "edit", applied = false, files = {}, resolvedWorkspaceUri = ws_uri,
        reason = inst.name .. " offers no organize-imports action for this file" }
    end
    local titles = {}
    for _, a in ipairs(list) do titles[#titles + 1] = '"' .. a.title .. '"' end
    return nil, E("LSP_EDIT_FAILED", 'no code action titled "%s" here (there are: %s)', tostring(req.title),
      #titles > 0 and table.concat(titles, ", ") or "none")
  end
  if chosen.disabled then
    return nil, E("LSP_EDIT_FAILED", 'the code action "%s" is disabled: %s', chosen.title, chosen.disabled)
  end
  return apply_action(q, chosen, ws_uri)
end

return M
