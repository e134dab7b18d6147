--- dsh.core.hostwatch: inotify on this host, read on the loop (fs-local's watch).
--
-- One inotify instance per watcher, non-blocking, its fd watched by a loop
-- io watcher; read() waits (inside a task) until the kernel has records and
-- returns them decoded: {wd, mask, cookie, name}. Directories are added
-- with IN_ONLYDIR and IN_DONT_FOLLOW (a link is never watched through). The
-- kernel's queue is the only buffer (bounded by fs.inotify.max_queued_events;
-- an overflow is a record with IN_Q_OVERFLOW). close() frees everything.
local F = require "dsh.core._ffi"
local bit = require "bit"
local errors = require "dsh.errors"
local loop = require "dsh.core.loop"
local readable = require "dsh.core._readable"
local ffi, C = F.ffi, F.C

local M = {}
local MOD = "dsh.core.hostwatch"

--- The mask bits, by name (IN_CREATE, IN_MODIFY, ..., IN_ISDIR).
M.IN = {
  MODIFY = C.DSH_HOSTFS_IN_MODIFY, ATTRIB = C.DSH_HOSTFS_IN_ATTRIB, MOVED_FROM = C.DSH_HOSTFS_IN_MOVED_FROM,
  MOVED_TO = C.DSH_HOSTFS_IN_MOVED_TO, CREATE = C.DSH_HOSTFS_IN_CREATE, DELETE = C.DSH_HOSTFS_IN_DELETE,
  DELETE_SELF = C.DSH_HOSTFS_IN_DELETE_SELF, MOVE_SELF = C.DSH_HOSTFS_IN_MOVE_SELF,
  Q_OVERFLOW = C.DSH_HOSTFS_IN_Q_OVERFLOW, IGNORED = C.DSH_HOSTFS_IN_IGNORED, ISDIR = C.DSH_HOSTFS_IN_ISDIR,
}
local IN = M.IN
M.MASK = bit.bor(IN.CREATE, IN.MODIFY, IN.DELETE, IN.DELETE_SELF, IN.MOVED_FROM, IN.MOVED_TO, IN.MOVE_SELF,
  IN.ATTRIB)
local ADD_FLAGS = bit.bor(C.DSH_HOSTFS_IN_ONLYDIR, C.DSH_HOSTFS_IN_DONT_FOLLOW)

local BUF = 65536
local buf = ffi.new("uint8_t[?]", BUF)
local n_p = ffi.new("size_t[1]")
local EVENT = ffi.sizeof("struct dsh_hostfs_inotify_event")
local event_p = ffi.typeof("const struct dsh_hostfs_inotify_event *")

local function fail(call)
  local e = ffi.errno()
  local code = (e == C.DSH_HOSTFS_ENOENT or e == C.DSH_HOSTFS_ENOTDIR) and "not_found"
    or (e == C.DSH_HOSTFS_EACCES or e == C.DSH_HOSTFS_EPERM) and "permission_denied" or "io"
  return nil, errors.new(code, call .. ": " .. ffi.string(C.strerror(e)), { errno = e })
end

---@class dsh.HostWatch
local Watch = {}
Watch.__index = Watch
Watch.__tostring = function(w) return "dsh.core.hostwatch(" .. (w._io and "fd " .. w.fd or "closed") .. ")" end

--- A new inotify instance, or nil, err.
---@return dsh.HostWatch|nil, dsh.Error|nil
function M.open()
  local fd = C.inotify_init1(bit.bor(C.DSH_HOSTFS_IN_NONBLOCK, C.DSH_HOSTFS_IN_CLOEXEC))
  if fd < 0 then return fail("inotify_init1") end
  local io = readable.new(fd)
  if not io then
    C.close(fd)
    return nil, errors.new("io", "dsh.core.hostwatch: cannot watch the inotify fd")
  end
  local w = setmetatable({ fd = fd, _io = io }, Watch)
  loop.track(w, "hostwatch")
  return w
end

--- Watch the directory path: its watch descriptor, or nil, err.
function Watch:add(path)
  errors.check(MOD, "add", path, "string")
  if not self._io then errors.misuse(MOD, "add: the watch is closed") end
  local wd = C.inotify_add_watch(self.fd, path, bit.bor(M.MASK, ADD_FLAGS))
  if wd < 0 then return fail("inotify_add_watch") end
  return wd
end

function Watch:remove(wd)
  if self._io then C.inotify_rm_watch(self.fd, wd) end
end

--- The records the kernel has, waiting until there is one (or signal
--- aborts: nil, ABORTED); {} once closed.
---@return {wd: integer, mask: integer, cookie: integer, name: string}[]|nil, dsh.Error|nil
function Watch:read(signal)
  while self._io do
    local rc = C.dsh_fd_read(self.fd, buf, BUF, n_p)
    if rc == C.DSH_OK then
      local out, pos, n = {}, 0, tonumber(n_p[0])
      while pos + EVENT <= n do
        local e = ffi.cast(event_p, buf + pos)
        local len = tonumber(e.len)
        local name = len > 0 and ffi.string(buf + pos + EVENT) or "" -- NUL-padded
        out[#out + 1] = { wd = tonumber(e.wd), mask = tonumber(e.mask), cookie = tonumber(e.cookie), name = name }
        pos = pos + EVENT + len
      end
      return out
    end
    if rc ~= C.DSH_EAGAIN then return nil, errors.new("io", "dsh.core.hostwatch: reading the inotify fd failed") end
    local ok, err = self._io:wait(signal)
    if not ok then return nil, err end
  end
  return {}
end

function Watch:close()
  if not self._io then return end
  local io = self._io
  self._io = nil
  io:close()
  C.close(self.fd)
  loop.untrack(self)
end

return M
