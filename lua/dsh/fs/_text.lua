--- dsh.fs._text: what makes a file text, and the text edits of the fs seam.
--
-- Text = no NUL byte in the first SAMPLE_BYTES bytes, and strict UTF-8
-- throughout (a NUL further on is valid UTF-8 and stays readable). Edits work
-- on LF-normalised text; a file whose head is mostly CRLF is stored back with
-- CRLF. Pure functions over strings, no I/O.
local utf8 = require "dsh.core.utf8"

local M = {}

M.SAMPLE_BYTES = 8192
M.CRLF_WINDOW = 4096 -- characters (code points) examined for the line-ending choice

--- nil when data is text; else {kind="binary", offset=} (0-based offset of a
-- NUL in the sample) or {kind="utf8", position=} (1-based byte).
---@param data string
---@param strict_nul boolean|nil  reject a NUL anywhere, not only in the sample
function M.problem(data, strict_nul)
  local nul = data:find("\0", 1, true)
  if nul and (strict_nul or nul <= M.SAMPLE_BYTES) then
    return { kind = "binary", offset = nul - 1 }
  end
  local ok, err = utf8.validate(data)
  if not ok then return { kind = "utf8", position = err.position } end
  return nil
end

--- The message of a FS_NOT_TEXT error for problem p at display path.
function M.describe(path, p)
  if p.kind == "binary" then
    return string.format('"%s" is not text (NUL byte at offset %d)', path, p.offset)
  elseif p.kind == "truncated" then
    return string.format('"%s" is not valid UTF-8 (it ends inside a character)', path)
  elseif p.position then
    return string.format('"%s" is not valid UTF-8 (at byte %d)', path, p.position)
  end
  return string.format('"%s" is not valid UTF-8', path)
end

--- CRLF -> LF (lone CRs stay).
function M.lf(s)
  return (s:gsub("\r\n", "\n"))
end

--- True when, in the first CRLF_WINDOW characters of s, CRLF line ends
-- outnumber lone LFs.
function M.prefers_crlf(s)
  -- byte length of the first CRLF_WINDOW code points (s is valid UTF-8 here)
  local chars, i, n = 0, 1, #s
  while i <= n and chars < M.CRLF_WINDOW do
    local b = s:byte(i)
    i = i + (b < 0x80 and 1 or b < 0xE0 and 2 or b < 0xF0 and 3 or 4)
    chars = chars + 1
  end
  local head = s:sub(1, i - 1)
  local crlf, lf = 0, 0
  local pos = 1
  while true do
    local at = head:find("\n", pos, true)
    if not at then break end
    if at > 1 and head:byte(at - 1) == 13 then crlf = crlf + 1 else lf = lf + 1 end
    pos = at + 1
  end
  return crlf > lf
end

--- Non-overlapping occurrences of needle (non-empty) in hay.
function M.count(hay, needle)
  local n, pos = 0, 1
  while true do
    local at = hay:find(needle, pos, true)
    if not at then return n end
    n = n + 1
    pos = at + #needle
  end
end

--- hay with the first (or every, when all) occurrence of old replaced by new.
-- Plain text, no patterns.
function M.replace(hay, old, new, all)
  local parts, pos = {}, 1
  while true do
    local at = hay:find(old, pos, true)
    if not at then break end
    parts[#parts + 1] = hay:sub(pos, at - 1)
    parts[#parts + 1] = new
    pos = at + #old
    if not all then break end
  end
  parts[#parts + 1] = hay:sub(pos)
  return table.concat(parts)
end

--- LF -> CRLF (for text already LF-normalised).
function M.crlf(s)
  return (s:gsub("\n", "\r\n"))
end

return M
