--- dsh.tools._lsp_render: the text the `lsp` tool shows a model for each
-- ctx.lsp result kind, compact and bounded: locations as
-- `path:line:character: <that line>` (relative to the workspace when
-- inside it, grouped by file; at most maxLocations), hover as its text,
-- symbols, calls and types as lists, diagnostics sorted by position,
-- completion items and code actions numbered, an applied edit as the files
-- it changed; `No results.` and the like when empty; everything cut at
-- maxResultChars characters with a note. What the server showed as an error
-- or a warning meanwhile follows as a note.
local lsp = require "dsh.lsp"

local M = {
  maxLocations = 100,
  maxResultChars = 16000,
  maxContextChars = 200,
  maxItems = 50,      -- completion items, code actions
  maxBodyLines = 400, -- symbol bodies
}

local function cut_chars(s, max)
  local n, i = 0, 1
  while i <= #s do
    n = n + 1
    if n > max then return s:sub(1, i - 1), true end
    local b = s:byte(i)
    i = i + (b < 0x80 and 1 or b < 0xE0 and 2 or b < 0xF0 and 3 or 4)
  end
  return s, false
end

local function limit(text, label)
  local cut, truncated = cut_chars(text, M.maxResultChars)
  if not truncated then return text end
  return cut .. string.format("\n… %s truncated (limit %d characters).", label, M.maxResultChars)
end

-- How a URI is shown: relative to the workspace inside it, absolute outside,
-- verbatim when it is not a file URI.
local function shown(u, root)
  local p = lsp.uri.to_path(u)
  if not p then return u, nil end
  if root then
    local prefix = root == "/" and "/" or root .. "/"
    if p:sub(1, #prefix) == prefix then return p:sub(#prefix + 1), p end
  end
  return p, p
end

-- The text of line (0-based) of path through ctx.fs, cached per render.
local function context_lines(fs)
  local cache = {}
  return function(path, line)
    if not fs or not path then return nil end
    local text = cache[path]
    if text == nil then
      local r = fs:readText(path)
      text = r and r.text or false
      cache[path] = text
    end
    if not text then return nil end
    local s = lsp.position.line_text(text, line)
    if not s then return nil end
    s = s:gsub("^%s+", ""):gsub("%s+$", "")
    local c, cut = cut_chars(s, M.maxContextChars)
    return cut and (c .. "…") or c
  end
end

-- Lines "path:line:col: context", grouped by file in order of first appearance.
local function location_lines(items, root, line_of)
  local groups, order = {}, {}
  for _, it in ipairs(items) do
    local name, path = shown(it.uri, root)
    if not groups[name] then
      groups[name] = { path = path, items = {} }
      order[#order + 1] = name
    end
    table.insert(groups[name].items, it)
  end
  local out = {}
  for _, name in ipairs(order) do
    local g = groups[name]
    table.sort(g.items, function(a, b)
      local x, y = a.range.start, b.range.start
      return x.line < y.line or (x.line == y.line and x.character < y.character)
    end)
    for _, it in ipairs(g.items) do
      local s = it.range.start
      local head = string.format("%s:%d:%d", name, s.line + 1, s.character + 1)
      local ctx_line = line_of(g.path, s.line)
      local extra = it.label and (" " .. it.label) or ""
      out[#out + 1] = head .. extra .. ((ctx_line and ctx_line ~= "") and (": " .. ctx_line) or "")
    end
  end
  return out
end

local function capped(items)
  if #items <= M.maxLocations then return items, nil end
  local first = {}
  for i = 1, M.maxLocations do first[i] = items[i] end
  return first, string.format("… %d more location(s) omitted (limit %d).", #items - M.maxLocations,
    M.maxLocations)
end

local SEVERITY_ORDER = { error = 1, warning = 2, information = 3, hint = 4 }

local render_more

--- The text for a ctx.lsp result. opts: fs (ctx.fs, for lines of context),
--- waitMs (diagnostics' note).
---@param r table
---@param opts {fs: table|nil, waitMs: integer|nil}|nil
---@return string
function M.render(r, opts)
  local text = M.render_result(r, opts)
  if r.serverMessages then
    local notes = {}
    for _, m in ipairs(r.serverMessages) do
      notes[#notes + 1] = string.format("[language server %s: %s]", m.type, (cut_chars(m.text:gsub("%s+", " "), 300)))
    end
    text = text .. "\n" .. table.concat(notes, "\n")
  end
  return text
end

function M.render_result(r, opts)
  opts = opts or {}
  local root = r.resolvedWorkspaceUri and lsp.uri.to_path(r.resolvedWorkspaceUri)
  local line_of = context_lines(opts.fs)
  if r.kind == "hover" then
    if not r.hover then return "No hover information." end
    return limit(r.hover.contents, "hover")
  end
  if r.kind == "locations" then
    if #r.locations == 0 then return "No results." end
    local items, more = capped(r.locations)
    local lines = location_lines(items, root, line_of)
    if more then lines[#lines + 1] = more end
    return limit(table.concat(lines, "\n"), "result")
  end
  if r.kind == "symbols" then
    if #r.symbols == 0 then return "No results." end
    local items = {}
    for _, s in ipairs(r.symbols) do
      local kind = lsp.SYMBOL_KINDS[s.kind] or ("kind " .. s.kind)
      local label = kind .. " " .. (s.container and (s.container .. ".") or "") .. s.name
        .. (s.detail and s.detail ~= "" and (" — " .. s.detail) or "")
      items[#items + 1] = { uri = s.uri, label = label,
        range = s.range or { start = { line = 0, character = 0 } } }
    end
    local list, more = capped(items)
    local lines = location_lines(list, root, function() return nil end)
    if more then lines[#lines + 1] = more end
    return limit(table.concat(lines, "\n"), "result")
  end
  if r.kind == "calls" then
    if not r.item then return "No results." end
    local head = string.format("%s calls %s %s:", r.direction == "incoming" and "Incoming" or "Outgoing",
      r.direction == "incoming" and "to" or "from", r.item.name)
    if #r.calls == 0 then return head .. "\nNo results." end
    local items = {}
    for _, c in ipairs(r.calls) do
      local at = {}
      for _, fr in ipairs(c.fromRanges) do at[#at + 1] = (fr.start.line + 1) .. ":" .. (fr.start.character + 1) end
      items[#items + 1] = { uri = c.uri, range = c.range,
        label = c.name .. (#at > 0 and (" (calls at " .. table.concat(at, ", ") .. ")") or "") }
    end
    local list, more = capped(items)
    local lines = location_lines(list, root, function() return nil end)
    if more then lines[#lines + 1] = more end
    return limit(head .. "\n" .. table.concat(lines, "\n"), "result")
  end
  if r.kind == "diagnostics" then
    local note = r.settled and "" or string.format(
      "\n(The language server had not finished analysing the latest version within %d ms; this may be stale.)",
      opts.waitMs or lsp.DEFAULT_DIAGNOSTICS_WAIT_MS)
    if #r.diagnostics == 0 then return "No diagnostics." .. note end
    local list = {}
    for _, d in ipairs(r.diagnostics) do list[#list + 1] = d end
    table.sort(list, function(a, b)
      local x, y = a.range.start, b.range.start
      if x.line ~= y.line then return x.line < y.line end
      if x.character ~= y.character then return x.character < y.character end
      return (SEVERITY_ORDER[a.severity] or 5) < (SEVERITY_ORDER[b.severity] or 5)
    end)
    local name = shown(r.uri, root)
    local lines = {}
    for _, d in ipairs(list) do
      local s = d.range.start
      lines[#lines + 1] = string.format("%s:%d:%d: %s: %s%s%s", name, s.line + 1, s.character + 1,
        d.severity or "note", (d.message:gsub("%s*\n+%s*", "; ")), d.code and (" [" .. tostring(d.code) .. "]") or "",
        d.source and (" (" .. d.source .. ")") or "")
    end
    return limit(table.concat(lines, "\n"), "diagnostics") .. note
  end
  local more = render_more(r, root, line_of, opts)
  if more then return more end
  error("dsh.tools.lsp: render: unknown result kind " .. tostring(r.kind), 3)
end


local function diagnostic_line(name, d)
  local s = d.range.start
  return string.format("%s:%d:%d: %s: %s%s%s", name, s.line + 1, s.character + 1, d.severity or "note",
    (d.message:gsub("%s*\n+%s*", "; ")), d.code and (" [" .. tostring(d.code) .. "]") or "",
    d.source and (" (" .. d.source .. ")") or "")
end

local function numbered(list, label, fmt)
  local lines = {}
  for i = 1, math.min(#list, M.maxItems) do lines[#lines + 1] = fmt(i, list[i]) end
  if #list > M.maxItems then
    lines[#lines + 1] = string.format("… %d more %s omitted (limit %d).", #list - M.maxItems, label, M.maxItems)
  end
  return lines
end

local function numbered_lines(text, first)
  local out, n = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if n > M.maxBodyLines then
      out[#out + 1] = string.format("… body cut at %d lines.", M.maxBodyLines)
      break
    end
    out[#out + 1] = string.format("%6d\t%s", first + n - 1, line)
  end
  return out
end

render_more = function(r, root, _, opts)
  if r.kind == "types" then
    if not r.item then return "No results." end
    local head = string.format("%s of %s:", r.direction == "supertypes" and "Supertypes" or "Subtypes", r.item.name)
    if #r.types == 0 then return head .. "\nNo results." end
    local items = {}
    for _, t in ipairs(r.types) do items[#items + 1] = { uri = t.uri, range = t.range, label = t.name } end
    local list, more = capped(items)
    local lines = location_lines(list, root, function() return nil end)
    if more then lines[#lines + 1] = more end
    return limit(head .. "\n" .. table.concat(lines, "\n"), "result")
  end
  if r.kind == "symbol" then
    if #r.matches == 0 then return string.format('No symbol "%s" in this file.', r.namePath) end
    local parts = {}
    for _, m in ipairs(r.matches) do
      local name = shown(m.uri, root)
      local b = m.bodyRange
      local kind = lsp.SYMBOL_KINDS[m.kind] or ("kind " .. m.kind)
      parts[#parts + 1] = string.format("%s %s at %s:%d:%d-%d:%d", kind, m.namePath, name, b.start.line + 1,
        b.start.character + 1, b["end"].line + 1, b["end"].character + 1)
      if m.body then
        parts[#parts + 1] = table.concat(numbered_lines(m.body, b.start.line + 1), "\n")
      end
    end
    return limit(table.concat(parts, "\n"), "result")
  end
  if r.kind == "workspaceDiagnostics" then
    local note = r.settled and "" or "\n(The language server had not finished analysing; this may be stale.)"
    if #r.files == 0 then return "No diagnostics." .. note end
    local lines = {}
    for _, f in ipairs(r.files) do
      local name = shown(f.uri, root)
      for _, d in ipairs(f.diagnostics) do lines[#lines + 1] = diagnostic_line(name, d) end
    end
    return limit(table.concat(lines, "\n"), "diagnostics") .. note
  end
  if r.kind == "completion" then
    if #r.items == 0 then return "No completions." end
    local lines = numbered(r.items, "completion(s)", function(_, it)
      local kind = it.kind and lsp.COMPLETION_KINDS[it.kind]
      return it.label .. (kind and (" (" .. kind .. ")") or "") .. (it.detail and (" — " .. it.detail) or "")
        .. (it.insertText and (" inserts: " .. (cut_chars(it.insertText, 80))) or "")
    end)
    if r.isIncomplete then lines[#lines + 1] = "(more completions exist; type more of the name to narrow them)" end
    return limit(table.concat(lines, "\n"), "result")
  end
  if r.kind == "signatures" then
    if #r.signatures == 0 then return "No signature help." end
    local lines = {}
    for i, s in ipairs(r.signatures) do
      local mark = (i - 1 == (r.activeSignature or 0)) and "* " or "  "
      local active = s.activeParameter or r.activeParameter
      local p = active and s.parameters[active + 1]
      lines[#lines + 1] = mark .. s.label .. (p and (" [parameter: " .. p.label .. "]") or "")
      if s.documentation and s.documentation ~= "" and i - 1 == (r.activeSignature or 0) then
        lines[#lines + 1] = "  " .. (cut_chars(s.documentation, 500))
      end
    end
    return limit(table.concat(lines, "\n"), "result")
  end
  if r.kind == "actions" then
    if #r.actions == 0 then return "No code actions here." end
    local lines = numbered(r.actions, "action(s)", function(i, a)
      return string.format("%d. %s%s%s%s", i, a.title, a.kind and (" [" .. a.kind .. "]") or "",
        a.isPreferred and " (preferred)" or "", a.disabled and (" (disabled: " .. a.disabled .. ")") or "")
    end)
    lines[#lines + 1] = "(apply one with operation applyCodeAction and its title)"
    return limit(table.concat(lines, "\n"), "result")
  end
  if r.kind == "edit" then
    if not r.applied then
      local lines = { "No change made" .. (r.reason and (": " .. r.reason) or "") .. "." }
      for _, f in ipairs(r.files) do lines[#lines + 1] = string.format("  would edit %s (%d edit(s))",
        (shown(lsp.uri.from_path(f.path), root)), f.edits) end
      return limit(table.concat(lines, "\n"), "result")
    end
    local lines = { string.format("Applied %d edit(s) to %d file(s):", (function()
      local n = 0
      for _, f in ipairs(r.files) do n = n + f.edits end
      return n
    end)(), #r.files) }
    for _, f in ipairs(r.files) do
      lines[#lines + 1] = string.format("  %s (%d edit(s))", (shown(lsp.uri.from_path(f.path), root)), f.edits)
    end
    lines[#lines + 1] = "Read the files again before editing them further."
    return limit(table.concat(lines, "\n"), "result")
  end
  local _ = opts
  return nil
end

return M
