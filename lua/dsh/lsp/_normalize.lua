--- dsh.lsp._normalize: turn what a language server answered into dsh's
-- result shapes, or say exactly what was malformed (LSP_MALFORMED_RESPONSE).
--
-- hover: a string, MarkupContent, MarkedString (fenced) or an array of them
-- (joined by a blank line); empty contents mean no hover. locations:
-- Location or LocationLink, one or an array; null means none. Symbols
-- (DocumentSymbol, flattened with their container, or SymbolInformation /
-- WorkspaceSymbol), call hierarchy calls and diagnostics are checked the same
-- way. JSON null (json.null) counts as absent everywhere.
local errors = require "dsh.errors"
local json = require "dsh.json"
local positions = require "dsh.lsp.position"

local M = {}
local null = json.null

local function absent(v)
  return v == nil or v == null
end

local function malformed(server, what)
  return errors.new("LSP_MALFORMED_RESPONSE", string.format("%s returned a malformed %s", server, what))
end

local function nonneg_int(v)
  return type(v) == "number" and v >= 0 and v % 1 == 0 and v < 2 ^ 31
end

local function position(p)
  if type(p) ~= "table" or not nonneg_int(p.line) or not nonneg_int(p.character) then return nil end
  return { line = p.line, character = p.character }
end

--- A checked copy of an LSP Range, or nil.
function M.range(r)
  if type(r) ~= "table" then return nil end
  local s, e = position(r.start), position(r["end"])
  if not s or not e then return nil end
  return { start = s, ["end"] = e }
end

local function is_array(v)
  return type(v) == "table" and (v[1] ~= nil or next(v) == nil)
end

local function marked(v)
  if type(v) == "string" then return v end
  if type(v) == "table" and type(v.value) == "string" then
    if type(v.language) == "string" then
      if v.value == "" then return "" end
      return "```" .. v.language .. "\n" .. v.value .. "\n```"
    end
    if v.kind == "markdown" or v.kind == "plaintext" then return v.value end
  end
  return nil
end

---@class dsh.lsp.Hover
---@field contents string
---@field range table|nil

--- Hover result → {contents, range?} | nil, or nil, err.
function M.hover(server, result)
  if absent(result) then return nil end
  if type(result) ~= "table" or absent(result.contents) then return nil, malformed(server, "hover") end
  local c = result.contents
  local text
  if is_array(c) and c.kind == nil and c.value == nil then
    local parts = {}
    for i = 1, #c do
      local s = marked(c[i])
      if not s then return nil, malformed(server, "hover") end
      if s:find("%S") then parts[#parts + 1] = s end
    end
    text = table.concat(parts, "\n\n")
  else
    text = marked(c)
    if not text then return nil, malformed(server, "hover") end
  end
  local range
  if not absent(result.range) then
    range = M.range(result.range)
    if not range then return nil, malformed(server, "hover range") end
  end
  if not text:find("%S") then return nil end
  return { contents = text, range = range }
end

---@class dsh.lsp.Location
---@field uri string
---@field range table

local function location(v)
  if type(v) ~= "table" then return nil end
  if type(v.uri) == "string" then
    local r = M.range(v.range)
    return r and { uri = v.uri, range = r }
  end
  if type(v.targetUri) == "string" then
    local r = M.range(absent(v.targetSelectionRange) and v.targetRange or v.targetSelectionRange)
    return r and { uri = v.targetUri, range = r }
  end
  return nil
end

--- Definition/references/implementation result → Location[], or nil, err.
function M.locations(server, result)
  if absent(result) then return {} end
  if type(result) ~= "table" then return nil, malformed(server, "location result") end
  local list = is_array(result) and result or { result }
  local out = {}
  for i = 1, #list do
    local l = location(list[i])
    if not l then return nil, malformed(server, "location result") end
    out[#out + 1] = l
  end
  return out
end

local function opt_string(v)
  if absent(v) then return nil, true end
  if type(v) == "string" then return v, true end
  return nil, false
end

---@class dsh.lsp.Symbol
---@field name string
---@field kind integer       LSP SymbolKind
---@field detail string|nil
---@field container string|nil
---@field uri string
---@field range table|nil

-- The parts of a symbol's name path: "Parser/parse" for method parse of
-- class Parser. Names are split where a language joins them ("A::b",
-- "(*T).M", "T.M") so that every server's way of naming a member gives the
-- same path.
function M.name_parts(name)
  local out = {}
  local n = name:gsub("^%(%*?([^)]*)%)%.", "%1.")
  if n:find("::", 1, true) then
    for part in (n .. "::"):gmatch("(.-)::") do
      if part ~= "" then out[#out + 1] = part end
    end
  elseif n:match("^[%w_$]+%.[%w_$]+$") then
    out[1], out[2] = n:match("^([%w_$]+)%.([%w_$]+)$")
  else
    out[1] = n
  end
  return out
end

local function flatten(server, list, uri, container, out, depth, path)
  if depth > 64 then return nil, malformed(server, "symbol result (nested too deeply)") end
  for i = 1, #list do
    local s = list[i]
    if type(s) ~= "table" or type(s.name) ~= "string" or not nonneg_int(s.kind) then
      return nil, malformed(server, "symbol result")
    end
    local detail, ok = opt_string(s.detail)
    if not ok then return nil, malformed(server, "symbol result") end
    local sym = { name = s.name, kind = s.kind, detail = detail, container = container }
    local parts = {}
    for _, p in ipairs(path or {}) do parts[#parts + 1] = p end
    if s.location ~= nil then -- SymbolInformation / WorkspaceSymbol
      if type(s.location) ~= "table" or type(s.location.uri) ~= "string" then
        return nil, malformed(server, "symbol result")
      end
      sym.uri = s.location.uri
      if not absent(s.location.range) then
        sym.range = M.range(s.location.range)
        if not sym.range then return nil, malformed(server, "symbol result") end
        sym.bodyRange = sym.range
      end
      local cn, cok = opt_string(s.containerName)
      if not cok then return nil, malformed(server, "symbol result") end
      sym.container = cn ~= "" and cn or nil
      if sym.container then
        for _, p in ipairs(M.name_parts(sym.container)) do parts[#parts + 1] = p end
      end
      for _, p in ipairs(M.name_parts(s.name)) do parts[#parts + 1] = p end
      sym.namePath = table.concat(parts, "/")
      out[#out + 1] = sym
    else -- DocumentSymbol
      sym.uri = uri
      sym.range = M.range(absent(s.selectionRange) and s.range or s.selectionRange)
      sym.bodyRange = M.range(s.range)
      if not sym.range or not sym.bodyRange or not uri then return nil, malformed(server, "symbol result") end
      for _, p in ipairs(M.name_parts(s.name)) do parts[#parts + 1] = p end
      sym.namePath = table.concat(parts, "/")
      out[#out + 1] = sym
      if not absent(s.children) then
        if not is_array(s.children) then return nil, malformed(server, "symbol result") end
        local ok2, err = flatten(server, s.children, uri,
          container and (container .. "." .. s.name) or s.name, out, depth + 1, parts)
        if not ok2 then return nil, err end
      end
    end
  end
  return out
end

--- documentSymbol / workspace/symbol result → Symbol[] (uri: the document's,
--- for hierarchical DocumentSymbols), or nil, err.
function M.symbols(server, result, uri)
  if absent(result) then return {} end
  if not is_array(result) then return nil, malformed(server, "symbol result") end
  return flatten(server, result, uri, nil, {}, 0)
end

--- A checked CallHierarchyItem → {name, kind, detail?, uri, range}, or nil.
function M.call_item(v)
  if type(v) ~= "table" or type(v.name) ~= "string" or not nonneg_int(v.kind) or type(v.uri) ~= "string" then
    return nil
  end
  local r = M.range(absent(v.selectionRange) and v.range or v.selectionRange)
  if not r then return nil end
  local detail, ok = opt_string(v.detail)
  if not ok then return nil end
  return { name = v.name, kind = v.kind, detail = detail, uri = v.uri, range = r }
end

---@class dsh.lsp.Call
---@field name string
---@field kind integer
---@field uri string
---@field range table
---@field fromRanges table[]

--- incomingCalls/outgoingCalls result → Call[] (the other end of each
--- call, with the ranges of the calls), or nil, err.
function M.calls(server, result, field)
  if absent(result) then return {} end
  if not is_array(result) then return nil, malformed(server, "call hierarchy result") end
  local out = {}
  for i = 1, #result do
    local c = result[i]
    local item = type(c) == "table" and M.call_item(c[field])
    if not item or not is_array(c.fromRanges) then return nil, malformed(server, "call hierarchy result") end
    item.fromRanges = {}
    for j = 1, #c.fromRanges do
      local r = M.range(c.fromRanges[j])
      if not r then return nil, malformed(server, "call hierarchy result") end
      item.fromRanges[j] = r
    end
    out[#out + 1] = item
  end
  return out
end

M.COMPLETION_KINDS = {
  "text", "method", "function", "constructor", "field", "variable", "class", "interface", "module", "property",
  "unit", "value", "enum", "keyword", "snippet", "color", "file", "reference", "folder", "enum member",
  "constant", "struct", "event", "operator", "type parameter",
}

local function doc_text(v)
  if absent(v) then return nil end
  if type(v) == "string" then return v end
  if type(v) == "table" and type(v.value) == "string" then return v.value end
  return nil
end

---@class dsh.lsp.CompletionItem
---@field label string
---@field kind integer|nil
---@field detail string|nil
---@field insertText string|nil   what choosing it inserts, when not the label
---@field documentation string|nil

--- A completion result (CompletionItem[] or CompletionList) → items (at
--- most max, in the server's sort order) and whether the list is incomplete.
function M.completion(server, result, max)
  if absent(result) then return {}, false end
  if type(result) ~= "table" then return nil, malformed(server, "completion result") end
  local list, incomplete = result, false
  if not is_array(result) then
    list, incomplete = result.items, result.isIncomplete == true
    if not is_array(list) then return nil, malformed(server, "completion result") end
  end
  local items = {}
  for i = 1, #list do
    local c = list[i]
    if type(c) ~= "table" or type(c.label) ~= "string" then return nil, malformed(server, "completion item") end
    local insert = nil
    if type(c.textEdit) == "table" and type(c.textEdit.newText) == "string" then
      insert = c.textEdit.newText
    elseif type(c.insertText) == "string" then
      insert = c.insertText
    end
    if insert == c.label then insert = nil end
    local detail = type(c.detail) == "string" and c.detail or nil
    if not detail and type(c.labelDetails) == "table" then
      detail = (type(c.labelDetails.detail) == "string" and c.labelDetails.detail or "")
        .. (type(c.labelDetails.description) == "string" and (" " .. c.labelDetails.description) or "")
      if detail == "" then detail = nil end
    end
    items[#items + 1] = { label = c.label, kind = nonneg_int(c.kind) and c.kind or nil, detail = detail,
      insertText = insert, documentation = doc_text(c.documentation),
      sortText = type(c.sortText) == "string" and c.sortText or c.label, n = i }
  end
  table.sort(items, function(a, b)
    if a.sortText ~= b.sortText then return a.sortText < b.sortText end
    return a.n < b.n
  end)
  local out = {}
  for i = 1, math.min(#items, max) do
    local it = items[i]
    it.sortText, it.n = nil, nil
    out[i] = it
  end
  return out, incomplete or #items > max, #items
end

---@class dsh.lsp.Signature
---@field label string
---@field documentation string|nil
---@field parameters {label:string, documentation:string|nil}[]
---@field activeParameter integer|nil

--- A SignatureHelp → {signatures, activeSignature, activeParameter} | nil, or nil, err.
function M.signature_help(server, result)
  if absent(result) then return nil end
  if type(result) ~= "table" or not is_array(result.signatures) then
    return nil, malformed(server, "signature help")
  end
  local sigs = {}
  for i = 1, #result.signatures do
    local sg = result.signatures[i]
    if type(sg) ~= "table" or type(sg.label) ~= "string" then return nil, malformed(server, "signature help") end
    local params = {}
    for j, p in ipairs(type(sg.parameters) == "table" and sg.parameters or {}) do
      local label = type(p) == "table" and p.label
      if type(label) == "table" and nonneg_int(label[1]) and nonneg_int(label[2]) then
        -- [start, end) in UTF-16 units of the signature's label
        local a = positions.utf16_to_index(sg.label, label[1])
        local b = positions.utf16_to_index(sg.label, label[2])
        label = sg.label:sub(a, b - 1)
      end
      if type(label) ~= "string" then return nil, malformed(server, "signature help") end
      params[j] = { label = label, documentation = doc_text(p.documentation) }
    end
    sigs[i] = { label = sg.label, documentation = doc_text(sg.documentation), parameters = params,
      activeParameter = nonneg_int(sg.activeParameter) and sg.activeParameter or nil }
  end
  if #sigs == 0 then return nil end
  return { signatures = sigs, activeSignature = nonneg_int(result.activeSignature) and result.activeSignature or 0,
    activeParameter = nonneg_int(result.activeParameter) and result.activeParameter or nil }
end

---@class dsh.lsp.CodeAction
---@field title string
---@field kind string|nil
---@field isPreferred boolean|nil
---@field disabled string|nil  why it cannot be applied
---@field raw table            what the server sent (to resolve and apply it)

--- A codeAction result → CodeAction[] (Commands become actions of no kind), or nil, err.
function M.code_actions(server, result)
  if absent(result) then return {} end
  if not is_array(result) then return nil, malformed(server, "code action result") end
  local out = {}
  for i = 1, #result do
    local a = result[i]
    if type(a) ~= "table" or type(a.title) ~= "string" then return nil, malformed(server, "code action") end
    local disabled = type(a.disabled) == "table" and type(a.disabled.reason) == "string" and a.disabled.reason or nil
    out[#out + 1] = { title = a.title, kind = type(a.kind) == "string" and a.kind or nil,
      isPreferred = a.isPreferred == true or nil, disabled = disabled, raw = a }
  end
  return out
end

M.SEVERITY = { "error", "warning", "information", "hint" }

---@class dsh.lsp.Diagnostic
---@field range table
---@field severity "error"|"warning"|"information"|"hint"|nil
---@field code string|integer|nil
---@field source string|nil
---@field message string

--- A Diagnostic[] → checked copies, or nil, err.
function M.diagnostics(server, list)
  if absent(list) then return {} end
  if not is_array(list) then return nil, malformed(server, "diagnostics") end
  local out = {}
  for i = 1, #list do
    local d = list[i]
    local r = type(d) == "table" and M.range(d.range)
    if not r or type(d.message) ~= "string" then return nil, malformed(server, "diagnostic") end
    local sev = d.severity
    if not absent(sev) and not M.SEVERITY[sev] then return nil, malformed(server, "diagnostic severity") end
    local code = d.code
    if absent(code) then code = nil elseif type(code) ~= "string" and type(code) ~= "number" then
      return nil, malformed(server, "diagnostic code")
    end
    local source, ok = opt_string(d.source)
    if not ok then return nil, malformed(server, "diagnostic source") end
    out[#out + 1] = { range = r, severity = not absent(sev) and M.SEVERITY[sev] or nil, code = code,
      source = source, message = d.message }
  end
  return out
end

M.SYMBOL_KINDS = {
  "file", "module", "namespace", "package", "class", "method", "property", "field", "constructor", "enum",
  "interface", "function", "variable", "constant", "string", "number", "boolean", "array", "object", "key",
  "null", "enum member", "struct", "event", "operator", "type parameter",
}

return M
