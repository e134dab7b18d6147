--- dsh.tools.lsp: the model-facing `lsp` tool over ctx.lsp (reference §5 "lsp").
--
-- One tool with an `operation` field. Input (M.parameters, valid for OpenAI
-- strict mode and Anthropic: every property required, the optional ones
-- nullable; null means absent): operation, file_path, line and character
-- (1-based; character counts UTF-16 code units, as editors and servers do),
-- query (workspaceSymbol), name_path (symbol), new_name (rename), title
-- (applyCodeAction). The workspace is the session's working directory
-- (opts.workspaceRoot); without one the tool fails with LSP_WORKSPACE_REQUIRED.
-- Output: dsh.tools._lsp_render (compact, bounded). describe(ctx.lsp) is
-- the description with the extensions that have servers there. Failures
-- are nil, err (the seam's codes, INVALID_ARGUMENT for bad input, TIMEOUT
-- after timeoutMs); M.render_error(err) is the text a model should see.
local errors = require "dsh.errors"
local lsp = require "dsh.lsp"
local render = require "dsh.tools._lsp_render"

local M = {
  name = "lsp",
  maxLocations = render.maxLocations,
  maxResultChars = render.maxResultChars,
  timeoutMs = 60000, -- hidden from the model
  maxContextChars = render.maxContextChars,
}

local OPS = {
  "goToDefinition", "findReferences", "goToImplementation", "goToTypeDefinition", "goToDeclaration", "hover",
  "documentSymbol", "workspaceSymbol", "symbol", "incomingCalls", "outgoingCalls", "supertypes", "subtypes",
  "diagnostics", "workspaceDiagnostics", "completion", "signatureHelp", "rename", "codeActions",
  "applyCodeAction", "organizeImports", "format",
}

M.description = "Ask the language server about code in the workspace, as it is now on disk, or have it "
  .. "change code. Operations taking file_path, line and character of a symbol: goToDefinition, "
  .. "findReferences (includes the declaration), goToImplementation, goToTypeDefinition, goToDeclaration, "
  .. "hover (type and docs), incomingCalls and outgoingCalls (call hierarchy), supertypes and subtypes (type "
  .. "hierarchy), completion, signatureHelp, rename (to new_name, in every file), codeActions (list the fixes "
  .. "and refactorings there) and applyCodeAction (the one with that title). Taking file_path only: "
  .. "documentSymbol, symbol (by name_path such as Parser/parse: its whole range and body), diagnostics "
  .. "(errors and warnings once the server analysed the latest version: use it after editing), "
  .. "workspaceDiagnostics (every file the server knows), organizeImports, format; workspaceSymbol searches "
  .. "by name (query). Edits are written to the files at once, all or none. line and character are 1-based; "
  .. "character counts UTF-16 code units (characters outside the Basic Multilingual Plane, such as most emoji, "
  .. "count 2). Results print locations as path:line:character followed by that line."

--- The description, with the extensions that have servers in ctx.lsp.
function M.describe(svc)
  if type(svc) ~= "table" or type(svc.extensions) ~= "function" then return M.description end
  local exts, missing = svc:extensions()
  local have, gone = {}, {}
  for ext in pairs(exts) do
    if missing[ext] then gone[#gone + 1] = ext else have[#have + 1] = ext end
  end
  table.sort(have)
  table.sort(gone)
  local text = M.description
  if #have > 0 then text = text .. " Files with a language server here: " .. table.concat(have, " ") .. "." end
  if #gone > 0 then text = text .. " Configured but not installed: " .. table.concat(gone, " ") .. "." end
  if #have == 0 and #gone == 0 then text = text .. " No language server is configured." end
  return text
end

local function nullable(kind, description)
  return { type = { kind, "null" }, description = description }
end

M.parameters = {
  type = "object",
  properties = {
    operation = { type = "string", enum = OPS, description = "What to ask or do." },
    file_path = { type = "string", description = "The file, absolute or relative to the workspace." },
    line = nullable("integer", "1-based line of the symbol (null for the operations that take file_path only)."),
    character = nullable("integer", "1-based column of the symbol in UTF-16 code units (null when line is null)."),
    query = nullable("string", "workspaceSymbol: the name to search (else null)."),
    name_path = nullable("string", "symbol: the symbol's name path, containers first, joined by / (else null)."),
    new_name = nullable("string", "rename: the new name (else null)."),
    title = nullable("string", "applyCodeAction: the title of the action, as codeActions listed it (else null)."),
  },
  required = { "operation", "file_path", "line", "character", "query", "name_path", "new_name", "title" },
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
  local needs = { symbol = "name_path", rename = "new_name", applyCodeAction = "title" }
  local key = needs[op]
  if key then
    local v = input[key]
    if not present(v) or type(v) ~= "string" or not v:find("%S") then
      return invalid("lsp: " .. op .. " needs " .. key .. ", a non-empty string")
    end
    out[key] = v
  end
  return out
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
  local req = { operation = inp.operation, filePath = inp.file_path, workspaceRoot = root, query = inp.query,
    namePath = inp.name_path, newName = inp.new_name, title = inp.title,
    includeBody = inp.operation == "symbol" or nil }
  if inp.line then req.position = { line = inp.line - 1, character = inp.character - 1 } end
  local res, qerr = svc:query(req, { signal = opts.signal, timeoutMs = opts.timeoutMs or M.timeoutMs })
  if not res then return nil, qerr end
  return M.render(res, { fs = ctx.fs }), nil, res
end

M.render = render.render

return M
