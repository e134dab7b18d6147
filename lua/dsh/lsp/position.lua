--- dsh.lsp.position: LSP positions (0-based line, 0-based UTF-16 code unit)
-- and byte offsets in UTF-8 text, converted exactly.
--
-- Language servers count columns in UTF-16 code units (dsh asks for and
-- accepts only that encoding): a CJK character is one unit and three bytes,
-- an emoji outside the BMP two units and four bytes. Callers that hold the
-- text (a grep hit, an editor's byte column, a model's quoted line) convert
-- here; the engine never guesses. Lines end at "\n", "\r\n" or "\r", as the
-- protocol says. A character past the end of its line means the line's end
-- (the protocol's rule); one inside a surrogate pair means the code point's
-- start. Text is assumed to be valid UTF-8 (the source reader checks it).
local errors = require "dsh.errors"

local M = {}

local find, byte, sub = string.find, string.byte, string.sub

local function starts_of(fn, text, starts)
  if type(text) ~= "string" then errors.misuse("dsh.lsp.position", "%s: text must be a string", fn) end
  if starts == nil then return M.line_starts(text) end
  if type(starts) ~= "table" then
    errors.misuse("dsh.lsp.position", "%s: starts must be the table line_starts returned", fn)
  end
  return starts
end

--- UTF-16 code units of UTF-8 text: every lead byte counts one, a 4-byte
--- lead one more.
---@param s string
---@return integer
function M.utf16_len(s)
  local _, leads = s:gsub("[^\128-\191]", "")
  local _, astral = s:gsub("[\240-\247]", "")
  return leads + astral
end

-- Byte length of the code point whose lead byte is b.
local function cp_len(b)
  if b < 0xC0 then return 1 end
  if b < 0xE0 then return 2 end
  if b < 0xF0 then return 3 end
  return 4
end

--- Byte index (1-based) in s reached after `units` UTF-16 code units,
--- clamped to #s + 1; a position inside a surrogate pair stays before it.
---@param s string the text of one line, without its terminator
---@param units integer
---@return integer
function M.utf16_to_index(s, units)
  local i, n, u = 1, #s, 0
  while i <= n do
    local b = byte(s, i)
    local len = cp_len(b)
    local w = len == 4 and 2 or 1
    if u + w > units then return i end
    u = u + w
    i = i + len
  end
  return n + 1
end

--- UTF-16 code units before byte index i (1-based) of s; an index inside a
--- code point counts that code point as not yet reached.
---@param s string
---@param i integer
---@return integer
function M.index_to_utf16(s, i)
  if i <= 1 then return 0 end
  local head = sub(s, 1, i - 1)
  -- drop a code point cut by the index
  local j = #head
  while j > 0 and j > #head - 3 do
    local b = byte(head, j)
    if b < 0x80 or b >= 0xC0 then
      if j + cp_len(b) - 1 > #head then head = sub(head, 1, j - 1) end
      break
    end
    j = j - 1
  end
  return M.utf16_len(head)
end

--- Byte indexes (1-based) where each line starts; lines[1] == 1.
---@param text string
---@return integer[]
function M.line_starts(text)
  local starts, i = { 1 }, 1
  while true do
    local a, b = find(text, "\r?\n", i)
    local c = find(text, "\r", i, true)
    if c and (not a or c < a) then a, b = c, c end
    if not a then return starts end
    starts[#starts + 1] = b + 1
    i = b + 1
  end
end

-- The text of line (0-based) without its terminator, and its start index.
local function line_of(text, starts, line)
  local s = starts[line + 1]
  if not s then return nil end
  local e = (starts[line + 2] or (#text + 1)) - 1
  -- strip the terminator
  if e >= s and byte(text, e) == 10 then e = e - 1 end
  if e >= s and byte(text, e) == 13 then e = e - 1 end
  return sub(text, s, e), s
end

--- The text of a line (0-based), without its terminator; nil past the end.
---@param text string
---@param line integer
---@param starts integer[]|nil from line_starts(text), to reuse
---@return string|nil
function M.line_text(text, line, starts)
  return (line_of(text, starts_of("line_text", text, starts), line))
end

---@class dsh.lsp.Position
---@field line integer       0-based
---@field character integer  0-based, UTF-16 code units

--- The byte index (1-based) a position designates; a line past the end
--- means the end of the text.
---@param text string
---@param pos dsh.lsp.Position
---@param starts integer[]|nil
---@return integer
function M.to_index(text, pos, starts)
  starts = starts_of("to_index", text, starts)
  local s, first = line_of(text, starts, pos.line)
  if not s then return #text + 1 end
  return first + M.utf16_to_index(s, pos.character) - 1
end

--- The position of byte index i (1-based) of text.
---@param text string
---@param i integer
---@param starts integer[]|nil
---@return dsh.lsp.Position
function M.from_index(text, i, starts)
  starts = starts_of("from_index", text, starts)
  -- binary search for the last line start <= i
  local lo, hi = 1, #starts
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    if starts[mid] <= i then lo = mid else hi = mid - 1 end
  end
  local s = line_of(text, starts, lo - 1)
  return { line = lo - 1, character = M.index_to_utf16(s, i - starts[lo] + 1) }
end

--- The position of the first occurrence of plain string needle (after byte
--- index init, default 1), or nil.
---@param text string
---@param needle string
---@param init integer|nil
---@return dsh.lsp.Position|nil
function M.of(text, needle, init)
  local i = find(text, needle, init or 1, true)
  if not i then return nil end
  return M.from_index(text, i)
end

return M
