--- dsh.core.termscreen: the screen a terminal shows (core/include/dsh/termscreen.h,
-- libvterm underneath).
--
-- Feed it what a PTY printed; read the visible rows as text and the cursor.
-- Full-screen programs (vim, less, top) show on the alternate screen, which is
-- what the rows are then. Resizing reflows the normal screen. Queries the
-- program sends (cursor position reports) produce replies the owner writes
-- back to the PTY, as a real terminal would.
--
--   local scr = termscreen.new(24, 80)
--   scr:feed("hello\r\nworld")
--   scr:snapshot()  --> {rows = {"hello", "world", "", ...}, cursor = {row = 1, col = 5}, ...}
local F = require "dsh.core._ffi"
local errors = require "dsh.errors"
local ffi, C = F.ffi, F.C

local M = {}
local MOD = "dsh.core.termscreen"
M.MAX_DIM = 1000

local data_p = ffi.new("const uint8_t *[1]")
local n_p = ffi.new("size_t[1]")
local info_buf = ffi.new("dsh_screen_info_t")

local function dim(fn, what, v)
  if type(v) ~= "number" or v < 1 or v > M.MAX_DIM or v % 1 ~= 0 then
    errors.misuse(MOD, "%s: %s must be an integer in [1, %d], got %s", fn, what, M.MAX_DIM, tostring(v))
  end
  return v
end

---@class dsh.TermScreen
local Screen = {}
Screen.__index = Screen
Screen.__tostring = function(s)
  local i = s:info()
  return ("dsh.core.termscreen(%dx%d%s)"):format(i.rows, i.cols, i.altscreen and ", alternate" or "")
end

--- A blank screen of rows x cols (each in 1..1000).
---@param rows integer
---@param cols integer
---@return dsh.TermScreen
function M.new(rows, cols)
  dim("new", "rows", rows)
  dim("new", "cols", cols)
  local out = ffi.new("dsh_screen_t *[1]")
  local rc = C.dsh_screen_new(rows, cols, out)
  if rc ~= C.DSH_OK then errors.misuse(MOD, "new: %s", select(2, F.status(rc))) end
  return setmetatable({ _ptr = ffi.gc(out[0], C.dsh_screen_free) }, Screen)
end

--- Feed output bytes (any chunking). Returns the replies the terminal owes
--- the program ("" normally), which the caller writes back to the PTY.
---@param s string
---@return string replies
function Screen:feed(s)
  errors.check(MOD, "feed", s, "string")
  C.dsh_screen_feed(self._ptr, s, #s)
  C.dsh_screen_replies(self._ptr, data_p, n_p)
  if n_p[0] == 0 then return "" end
  local r = ffi.string(data_p[0], n_p[0])
  C.dsh_screen_consume_replies(self._ptr)
  return r
end

--- Resize (reflows the normal screen).
function Screen:resize(rows, cols)
  dim("resize", "rows", rows)
  dim("resize", "cols", cols)
  local rc = C.dsh_screen_resize(self._ptr, rows, cols)
  if rc ~= C.DSH_OK then errors.misuse(MOD, "resize: %s", select(2, F.status(rc))) end
end

---@class dsh.TermScreenInfo
---@field rows integer
---@field cols integer
---@field cursor {row: integer, col: integer} 0-based
---@field cursorVisible boolean
---@field altscreen boolean
---@field fed integer bytes fed in total
---@field changes integer grows with every change of a cell or the cursor

---@return dsh.TermScreenInfo
function Screen:info()
  C.dsh_screen_info(self._ptr, info_buf)
  local i = info_buf
  return { rows = i.rows, cols = i.cols, cursor = { row = i.cursor_row, col = i.cursor_col },
    cursorVisible = i.cursor_visible ~= 0, altscreen = i.altscreen ~= 0, fed = tonumber(i.fed),
    changes = tonumber(i.changes) }
end

--- A number that grows whenever the visible screen or the cursor changed.
function Screen:changes()
  C.dsh_screen_info(self._ptr, info_buf)
  return tonumber(info_buf.changes)
end

--- The visible rows without trailing blanks, joined by "\n".
---@return string
function Screen:text()
  C.dsh_screen_text(self._ptr, data_p, n_p)
  return ffi.string(data_p[0], n_p[0])
end

---@class dsh.TermScreenSnapshot: dsh.TermScreenInfo
---@field lines string[] one per row, without trailing blanks

--- The rows (as a list) with the cursor and the screen's state.
---@return dsh.TermScreenSnapshot
function Screen:snapshot()
  local snap = self:info()
  local lines, text = {}, self:text()
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  snap.lines = lines
  return snap
end

return M
