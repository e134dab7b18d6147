--- dsh.lsp._symbols: finding a symbol by its name path.
--
-- A name path names a symbol by its containers: "Parser/parse" is method
-- parse of Parser (dsh.lsp._normalize makes the paths, whatever the server
-- calls members: "Parser::parse", "(*Parser).parse"). "parse" matches any
-- symbol called parse, "Parser/parse" any symbol whose path ends with those
-- parts, "/Parser/parse" (leading slash) only the whole path. Each match
-- carries its selection range, its whole range (bodyRange: from the
-- declaration's first character to its last, what replacing the symbol
-- replaces) and, when asked and the document's text is known, the body text.
local position = require "dsh.lsp.position"

local M = {}

M.MAX_BODY_BYTES = 200000

--- The parts of a name path ("/A/b" → {"A", "b"}, absolute), or nil when empty.
function M.parse(name_path)
  local absolute = name_path:sub(1, 1) == "/"
  local parts = {}
  for p in name_path:gmatch("[^/]+") do parts[#parts + 1] = p end
  if #parts == 0 then return nil end
  return parts, absolute
end

local function matches(sym_path, parts, absolute)
  local have = {}
  for p in sym_path:gmatch("[^/]+") do have[#have + 1] = p end
  if absolute and #have ~= #parts then return false end
  if #have < #parts then return false end
  local off = #have - #parts
  for i = 1, #parts do
    if have[off + i] ~= parts[i] then return false end
  end
  return true
end

--- The symbols of syms (normalized, with namePath and bodyRange) that
--- name_path names, in document order.
---@param syms table[]
---@param name_path string
---@param text string|nil  the document's text (for bodies)
---@param include_body boolean|nil
function M.find(syms, name_path, text, include_body)
  local parts, absolute = M.parse(name_path)
  local out = {}
  if not parts then return out end
  local starts = text and position.line_starts(text)
  for _, s in ipairs(syms) do
    if s.namePath and matches(s.namePath, parts, absolute) then
      local m = { name = s.name, namePath = s.namePath, kind = s.kind, detail = s.detail, uri = s.uri,
        range = s.range, bodyRange = s.bodyRange or s.range }
      if include_body and text and m.bodyRange then
        local a = position.to_index(text, m.bodyRange.start, starts)
        local b = position.to_index(text, m.bodyRange["end"], starts)
        local body = text:sub(a, b - 1)
        if #body > M.MAX_BODY_BYTES then
          body = body:sub(1, M.MAX_BODY_BYTES)
          m.bodyTruncated = true
        end
        m.body = body
      end
      out[#out + 1] = m
    end
  end
  return out
end

return M
