--- dsh.tools.lsp: the model-facing `lsp` tool over ctx.lsp (reference §5 "lsp").
--
-- One tool with an `operation` field. Input (M.parameters, valid for OpenAI
-- strict mode and Anthropic: every property required, the optional ones
-- nullable; null means absent): operation, file_path, line and character
-- (1-based; character counts UTF-16 code units, as editors and servers do),
-- query (workspaceSymbol). The workspace is the session's working directory
-- (opts.workspaceRoot); without one the tool fails with LSP_WORKSPACE_REQUIRED.
-- Output: locations as `path:line:character: <that line>` (relative to the
-- workspace when inside it, grouped by file; at most maxLocations), hover as
-- its text, diagnostics and symbols as lists; `No results.`, `No hover
-- information.`, `No diagnostics.` when empty; everything cut at
-- maxResultChars characters with a note. Failures are nil, err (the seam's
-- codes, INVALID_ARGUMENT for bad input, TIMEOUT after timeoutMs);
-- M.render_error(err) is the text a model should see.
local errors = require "dsh.errors"
local lsp = require "dsh.lsp"

local M = {
  name = "lsp",
  maxLocations = 100,
  maxResultChars = 16000,
  timeoutMs = 60000, -- hidden from the model
  maxContextChars = 200,
}

local OPS = {
  "goToDefinition", "findReferences", "goToImplementation", "hover", "documentSymbol", "workspaceSymbol",
  "incomingCalls", "outgoingCalls", "diagnostics",
}

M.description = "Ask the language server about code in the workspace, as it is now on disk. Operations: "
  .. "goToDefinition, findReferences (includes the declaration), goToImplementation, hover (type and docs), "
  .. "incomingCalls and outgoingCalls (call hierarchy) take file_path, line and character of a symbol; "
  .. "documentSymbol lists the symbols of file_path; workspaceSymbol searches symbols by name (query); "
  .. "diagnostics lists the errors and warnings of file_path once the server has analysed its latest "
  .. "version (use it after editing a file). line and character are 1-based; character counts UTF-16 "
  .. "code units (characters outside the Basic Multilingual Plane, such as most emoji, count 2). "
  .. "Results print locations as path:line:character followed by that line."

M.parameters = {
  type = "object",
  properties = {
    operation = { type = "string", enum = OPS, description = "What to ask." },
    file_path = { type = "string", description = "The file, absolute or relative to the workspace." },
    line = { type = { "integer", "null" },
      description = "1-based line of the symbol (null for documentSymbol, workspaceSymbol, diagnostics)." },
    character = { type = { "integer", "null" },
      description = "1-based column of the symbol in UTF-16 code units (null when line is null)." },
    query = { type = { "string", "null" }, description = "workspaceSymbol: the name to search (else null)." },
  },
  required = { "operation", "file_path", "line", "character", "query" },
  additionalProperties = false,
}

local NEEDS_POSITION = lsp.OPERATIONS

local function invalid(msg)
  return nil, errors.new("INVALID_ARGUMENT", msg)
end

local function present(v)
  return v ~= nil and type(v) ~= "userdata" -- JSON null decodes to a userdata
end

--- Check a decoded input object: a normalised copy, or nil, err (INVALID_ARGUMENT).
function M.validate(input)
  if type(input) ~= "table" then return invalid("lsp: input must be an object") end
  for k in pairs(input) do
    if not M.parameters.properties[k] then return invalid("lsp: unknown parameter " .. tostring(k)) end
  end
  local op = input.operation
  if type(op) ~= "string" or NEEDS_POSITION[op] == nil then
    return invalid("lsp: operation must be one of " .. table.concat(OPS, ", "))
  end
  if type(input.file_path) ~= "string" or not input.file_path:find("%S") then
    return invalid("lsp: file_path must be a non-empty string")
  end
  local out = { operation = op, file_path = input.file_path }
  if NEEDS_POSITION[op] then
    for _, k in ipairs { "line", "character" } do
      local v = input[k]
      if not present(v) or type(v) ~= "number" or v < 1 or v % 1 ~= 0 or v > 2 ^ 31 then
        return invalid(k .. " must be a positive integer (one-based)")
      end
      out[k] = v
    end
  end
  if op == "workspaceSymbol" then
    if not present(input.query) or type(input.query) ~= "string" then
      return invalid("lsp: workspaceSymbol needs query, a string")
    end
    out.query = input.query
  end
  return out
end

-- Rendering -------------------------------------------------------------------

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

--- The text for a ctx.lsp result. opts: fs (ctx.fs, for lines of context),
--- waitMs (diagnostics' note).
---@param r table
---@param opts {fs: table|nil, waitMs: integer|nil}|nil
---@return string
function M.render(r, opts)
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
  error("dsh.tools.lsp: render: unknown result kind " .. tostring(r.kind), 2)
end

--- The text a model sees for a failure.
---@param err dsh.Error
---@return string
function M.render_error(err)
  if type(err) ~= "table" then return "Error: " .. tostring(err) end
  if err.code == "TIMEOUT" then
    return "Error: the language server did not answer in time (" .. tostring(err.message) .. ")."
  end
  if err.code == "LSP_WORKSPACE_REQUIRED" then
    return "Error: no workspace is known for this session, so the language server cannot be asked."
  end
  return "Error: " .. tostring(err.message or err.code)
end

--- Run the tool: the rendered text, or nil, err.
---@param ctx table    a context with ctx.lsp (and ctx.fs for lines of context)
---@param input table  decoded tool input
---@param opts {workspaceRoot: string|nil, signal: dsh.AbortSignal|nil, timeoutMs: integer|nil}|nil
---@return string|nil, dsh.Error|nil
function M.run(ctx, input, opts)
  opts = opts or {}
  local inp, err = M.validate(input)
  if not inp then return nil, err end
  local svc = ctx.lsp
  if not svc then return nil, errors.new("LSP_UNAVAILABLE", "lsp: ctx.lsp is not configured") end
  local root = opts.workspaceRoot
  if type(root) ~= "string" or not root:find("%S") then
    return nil, errors.new("LSP_WORKSPACE_REQUIRED", "lsp: the session has no working directory")
  end
  local req = { operation = inp.operation, filePath = inp.file_path, workspaceRoot = root, query = inp.query }
  if inp.line then req.position = { line = inp.line - 1, character = inp.character - 1 } end
  local res, qerr = svc:query(req, { signal = opts.signal, timeoutMs = opts.timeoutMs or M.timeoutMs })
  if not res then return nil, qerr end
  return M.render(res, { fs = ctx.fs }), nil, res
end

return M
