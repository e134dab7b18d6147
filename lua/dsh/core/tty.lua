--- dsh.core.tty: this process's own terminal (core/include/dsh/tty.h), for
-- interactive commands: raw mode and its undo, the window size, and a
-- reader of an fd (stdin) on the loop.
--
--   local saved = assert(tty.raw(0))
--   local r = tty.reader(0)
--   local bytes = r:read()          -- waits inside a task; nil at end of file
--   r:close(); tty.restore(saved)
local F = require "dsh.core._ffi"
local errors = require "dsh.errors"
local loop = require "dsh.core.loop"
local readable = require "dsh.core._readable"
local ffi, C = F.ffi, F.C

local M = {}
local MOD = "dsh.core.tty"

local size_r, size_c = ffi.new("uint16_t[1]"), ffi.new("uint16_t[1]")
local n_p = ffi.new("size_t[1]")
local BUF = 65536
local buf = ffi.new("uint8_t[?]", BUF)

--- True when fd is a terminal.
function M.isatty(fd)
  return C.dsh_tty_isatty(fd) == 1
end

--- Raw mode on fd's terminal; returns the settings to restore, or nil, err.
function M.raw(fd)
  local out = ffi.new("dsh_tty_t *[1]")
  if C.dsh_tty_raw(fd, out) ~= C.DSH_OK then return nil, errors.new("TTY", "fd " .. fd .. " is not a terminal") end
  return { _ptr = out[0] }
end

--- Put back what raw() changed (idempotent).
function M.restore(saved)
  if saved and saved._ptr ~= nil then
    C.dsh_tty_restore(saved._ptr)
    saved._ptr = nil
  end
end

--- rows, cols of fd's terminal, or nil.
function M.size(fd)
  if C.dsh_tty_size(fd, size_r, size_c) ~= C.DSH_OK then return nil end
  return size_r[0], size_c[0]
end

---@class dsh.TtyReader
local Reader = {}
Reader.__index = Reader
Reader.__tostring = function(r) return "dsh.core.tty.reader(" .. r.fd .. (r._io and "" or ", closed") .. ")" end

--- A reader of fd on the loop (fd is made non-blocking until close()).
function M.reader(fd)
  errors.check(MOD, "reader: fd", fd, "number")
  local io = readable.new(fd)
  if not io then errors.misuse(MOD, "reader: cannot watch fd %d", fd) end
  C.dsh_fd_nonblock(fd, 1)
  local r = setmetatable({ fd = fd, _io = io }, Reader)
  loop.track(r, "tty_reader")
  return r
end

--- The next bytes; nil at end of file (or once closed); nil, err on failure.
function Reader:read()
  while self._io do
    local rc = C.dsh_fd_read(self.fd, buf, BUF, n_p)
    if rc == C.DSH_OK then return ffi.string(buf, n_p[0]) end
    if rc == C.DSH_EEOF then return nil end
    if rc ~= C.DSH_EAGAIN then return nil, errors.new("TTY", "reading fd " .. self.fd .. " failed") end
    self._io:wait()
  end
  return nil
end

function Reader:close()
  if not self._io then return end
  local io = self._io
  self._io = nil
  io:close()
  C.dsh_fd_nonblock(self.fd, 0)
  loop.untrack(self)
end

return M
