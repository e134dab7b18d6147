--- dsh.core._readable: waiting on the loop until an fd is readable, for the
-- bindings that read a non-blocking fd themselves (tty, hostwatch).
--
-- The watcher is started only while a task waits, and stops when the fd is
-- readable, so an fd nobody reads from does not wake the loop.
local F = require "dsh.core._ffi"
local async = require "dsh.async"
local loop = require "dsh.core.loop"
local ffi, C = F.ffi, F.C

local M = {}

---@class dsh.core.Readable
local Readable = {}
Readable.__index = Readable

--- A watcher of fd's readability, or nil when the loop cannot watch fd.
---@return dsh.core.Readable|nil
function M.new(fd)
  local id = loop.new_id()
  local out = ffi.new("dsh_io_t *[1]")
  if C.dsh_io_new(loop.ptr, id, fd, out) ~= C.DSH_OK then return nil end
  local r = setmetatable({ id = id, _io = ffi.gc(out[0], C.dsh_io_free) }, Readable)
  loop.on(id, function()
    C.dsh_io_stop(r._io)
    r:_wake()
  end)
  return r
end

function Readable:_wake()
  local f = self._ready
  self._ready = nil
  if f then f:resolve() end
end

--- Wait until the fd is readable or the watcher is closed: true; nil, err
--- when signal aborted first.
function Readable:wait(signal)
  if not self._io then return true end
  local ready = self._ready or async.future()
  self._ready = ready
  C.dsh_io_start(self._io, 1)
  if not signal then
    ready:await()
    return true
  end
  local ok, err = async.race_signal(ready, signal)
  if ok == nil and err then return nil, err end
  return true
end

--- Stop watching; a task waiting in wait() returns.
function Readable:close()
  if not self._io then return end
  C.dsh_io_free(ffi.gc(self._io, nil))
  self._io = nil
  loop.off(self.id)
  self:_wake()
end

return M
