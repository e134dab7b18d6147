--- dsh.core.hostfs: host file primitives the fs_local backend needs beyond lfs.
--
-- statx (nanosecond times, device and inode, the same struct layout on every
-- Linux architecture), readlink, exclusive creation with an exact mode (at
-- once, or streamed: create_stream), chmod, mkdir, rename, unlink, symlink,
-- link, times that never follow a link (set_mtime), and a bounded read that
-- never follows a link (read_regular). Failures return nil, err with err.code
-- "not_found" (ENOENT; for stat calls also ENOTDIR), "permission_denied"
-- (EACCES, EPERM) or "io", err.message "<call>: <strerror>" and err.errno.
-- Never raises on I/O failure; raises on misuse.
local errors = require "dsh.errors"
local F = require "dsh.core._ffi"
local ffi = F.ffi
local C = ffi.C
local bit = require "bit"

local M = {}

-- libc's values, declared in dsh.core._ffi.hostfs and checked against the C headers.
local AT_FDCWD, AT_SYMLINK_NOFOLLOW = C.DSH_HOSTFS_AT_FDCWD, C.DSH_HOSTFS_AT_SYMLINK_NOFOLLOW
local STATX_BASIC_STATS = C.DSH_HOSTFS_STATX_BASIC_STATS
local O_WRONLY, O_CREAT, O_EXCL, O_CLOEXEC = C.DSH_HOSTFS_O_WRONLY, C.DSH_HOSTFS_O_CREAT, C.DSH_HOSTFS_O_EXCL,
  C.DSH_HOSTFS_O_CLOEXEC
local ENOENT, EPERM, EACCES = C.DSH_HOSTFS_ENOENT, C.DSH_HOSTFS_EPERM, C.DSH_HOSTFS_EACCES
local ENOTDIR, EINTR, ELOOP = C.DSH_HOSTFS_ENOTDIR, C.DSH_HOSTFS_EINTR, C.DSH_HOSTFS_ELOOP
local O_RDONLY, O_NONBLOCK, O_NOFOLLOW = C.DSH_HOSTFS_O_RDONLY, C.DSH_HOSTFS_O_NONBLOCK, C.DSH_HOSTFS_O_NOFOLLOW
local AT_EMPTY_PATH = C.DSH_HOSTFS_AT_EMPTY_PATH

local S_IFMT, S_IFREG, S_IFDIR, S_IFLNK = C.DSH_HOSTFS_S_IFMT, C.DSH_HOSTFS_S_IFREG, C.DSH_HOSTFS_S_IFDIR,
  C.DSH_HOSTFS_S_IFLNK

local function fail(call, errno, stat_call)
  local code = "io"
  if errno == ENOENT or (stat_call and errno == ENOTDIR) then
    code = "not_found"
  elseif errno == EACCES or errno == EPERM then
    code = "permission_denied"
  end
  return nil, errors.new(code, call .. ": " .. ffi.string(C.strerror(errno)), { errno = errno })
end

local function check_path(what, path)
  if type(path) ~= "string" then
    error("dsh.core.hostfs: " .. what .. ": expected a path string, got " .. type(path), 3)
  end
  if path:find("\0", 1, true) then
    error("dsh.core.hostfs: " .. what .. ": path contains a NUL byte", 3)
  end
end

local stx = ffi.new("struct dsh_hostfs_statx")

local function ts(t)
  return string.format("%d.%09d", tonumber(t.tv_sec), tonumber(t.tv_nsec))
end

---@class dsh.HostStat
---@field type "file"|"directory"|"symlink"|"other"
---@field size number
---@field mode integer   permission bits (mode & 07777)
---@field mtime string   "sec.nanosec"
---@field ctime string   "sec.nanosec"
---@field dev string     "major:minor"
---@field ino string
---@field nlink integer  hard links

local function statx(path, flags, call)
  check_path(call, path)
  if C.statx(AT_FDCWD, path, flags, STATX_BASIC_STATS, stx) ~= 0 then
    return fail(call, ffi.errno(), true)
  end
  local fmt = bit.band(stx.stx_mode, S_IFMT)
  local kind = fmt == S_IFREG and "file" or fmt == S_IFDIR and "directory"
    or fmt == S_IFLNK and "symlink" or "other"
  return {
    type = kind,
    size = tonumber(stx.stx_size),
    mode = bit.band(stx.stx_mode, 4095),
    mtime = ts(stx.stx_mtime),
    ctime = ts(stx.stx_ctime),
    dev = stx.stx_dev_major .. ":" .. stx.stx_dev_minor,
    ino = (tostring(stx.stx_ino):gsub("ULL$", "")),
    nlink = tonumber(stx.stx_nlink),
  }
end

--- Metadata of path itself (a symlink is reported as "symlink").
---@return dsh.HostStat|nil, dsh.Error?
function M.lstat(path)
  return statx(path, AT_SYMLINK_NOFOLLOW, "lstat")
end

--- Metadata of what path finally points to.
---@return dsh.HostStat|nil, dsh.Error?
function M.stat(path)
  return statx(path, 0, "stat")
end

local linkbuf = ffi.new("char[?]", 4097)

--- The text of a symbolic link.
function M.readlink(path)
  check_path("readlink", path)
  local n = C.readlink(path, linkbuf, 4097)
  if n < 0 then return fail("readlink", ffi.errno()) end
  return ffi.string(linkbuf, n)
end

--- Create path (which must not exist) with exactly mode (umask does not
-- apply), write data, close. A partial file is unlinked on failure.
function M.create(path, data, mode)
  check_path("create", path)
  errors.check("dsh.core.hostfs", "create: data", data, "string")
  local fd = C.open(path, bit.bor(O_WRONLY, O_CREAT, O_EXCL, O_CLOEXEC), ffi.cast("unsigned int", mode))
  if fd < 0 then return fail("open", ffi.errno()) end
  local ok, err = true, nil
  if C.fchmod(fd, mode) ~= 0 then ok, err = fail("fchmod", ffi.errno()) end
  local p, left = ffi.cast("const char *", data), #data
  while ok and left > 0 do
    local n = C.write(fd, p, left)
    if n < 0 then
      local e = ffi.errno()
      if e ~= EINTR then ok, err = fail("write", e) end
    else
      p, left = p + n, left - n
    end
  end
  if C.close(fd) ~= 0 and ok then ok, err = fail("close", ffi.errno()) end
  if not ok then
    C.unlink(path)
    return nil, err
  end
  return true
end

function M.chmod(path, mode)
  check_path("chmod", path)
  if C.chmod(path, mode) ~= 0 then return fail("chmod", ffi.errno()) end
  return true
end

function M.mkdir(path, mode)
  check_path("mkdir", path)
  if C.mkdir(path, mode or 493) ~= 0 then return fail("mkdir", ffi.errno()) end
  return true
end

function M.rename(from, to)
  check_path("rename", from)
  check_path("rename", to)
  if C.rename(from, to) ~= 0 then return fail("rename", ffi.errno()) end
  return true
end

--- The content of path when it is a regular file of at most max_bytes,
-- opened without following a final symbolic link (O_NOFOLLOW) and without
-- blocking: a link, a FIFO, a device or a larger file is refused (err.code
-- "io", the message says which), never followed, waited on or read. For the
-- files that decide what the host trusts (the sandbox lifecycle's records).
---@param path string
---@param max_bytes integer
---@return string|nil, dsh.Error?
function M.read_regular(path, max_bytes)
  check_path("read_regular", path)
  if type(max_bytes) ~= "number" or max_bytes < 0 or max_bytes % 1 ~= 0 then
    error("dsh.core.hostfs: read_regular: max_bytes must be a non-negative integer", 2)
  end
  local fd = C.open(path, bit.bor(O_RDONLY, O_NONBLOCK, O_NOFOLLOW, O_CLOEXEC))
  if fd < 0 then
    local e = ffi.errno()
    if e == ELOOP then return nil, errors.new("io", path .. " is a symbolic link", { errno = e }) end
    return fail("open", e)
  end
  local function refuse(msg)
    C.close(fd)
    return nil, errors.new("io", path .. " " .. msg)
  end
  if C.statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, stx) ~= 0 then
    local e = ffi.errno()
    C.close(fd)
    return fail("statx", e)
  end
  if bit.band(stx.stx_mode, S_IFMT) ~= S_IFREG then return refuse("is not a regular file") end
  if tonumber(stx.stx_size) > max_bytes then return refuse("is larger than " .. max_bytes .. " bytes") end
  -- Re-opening the descriptor's own /proc entry reads exactly the inode
  -- checked above, whatever the path names by now.
  local f = io.open("/proc/self/fd/" .. tonumber(fd), "rb")
  if not f then return refuse("cannot be read through /proc/self/fd") end
  local data = f:read(max_bytes + 1) or ""
  f:close()
  C.close(fd)
  if #data > max_bytes then return nil, errors.new("io", path .. " is larger than " .. max_bytes .. " bytes") end
  return data
end

---@class dsh.HostFileWriter
local Writer = {}
Writer.__index = Writer

--- Create path (which must not exist; never through a final symlink) with
--- exactly mode, to be written in pieces: w:write(s), then w:close(), or
--- w:abort() (closes and removes it).
---@return dsh.HostFileWriter|nil, dsh.Error?
function M.create_stream(path, mode)
  check_path("create_stream", path)
  local fd = C.open(path, bit.bor(O_WRONLY, O_CREAT, O_EXCL, O_CLOEXEC), ffi.cast("unsigned int", mode))
  if fd < 0 then return fail("open", ffi.errno()) end
  if C.fchmod(fd, mode) ~= 0 then
    local e = ffi.errno()
    C.close(fd)
    C.unlink(path)
    return fail("fchmod", e)
  end
  return setmetatable({ path = path, _fd = fd }, Writer)
end

function Writer:write(data)
  local p, left = ffi.cast("const char *", data), #data
  while left > 0 do
    local n = C.write(self._fd, p, left)
    if n < 0 then
      local e = ffi.errno()
      if e ~= EINTR then return fail("write", e) end
    else
      p, left = p + n, left - n
    end
  end
  return true
end

function Writer:close()
  if not self._fd then return true end
  local fd = self._fd
  self._fd = nil
  if C.close(fd) ~= 0 then return fail("close", ffi.errno()) end
  return true
end

function Writer:abort()
  if self._fd then
    C.close(self._fd)
    self._fd = nil
  end
  C.unlink(self.path)
end

--- A symbolic link at path whose text is target.
function M.symlink(target, path)
  check_path("symlink", target)
  check_path("symlink", path)
  if C.symlink(target, path) ~= 0 then return fail("symlink", ffi.errno()) end
  return true
end

--- A hard link at to of the file at from (never following a symlink at from).
function M.link(from, to)
  check_path("link", from)
  check_path("link", to)
  if C.link(from, to) ~= 0 then return fail("link", ffi.errno()) end
  return true
end

local times = ffi.new("struct dsh_hostfs_timespec[2]")

--- Set path's access and modification time to sec (whole seconds), never
--- following a final symlink (a symlink's own time is set).
function M.set_mtime(path, sec)
  check_path("set_mtime", path)
  times[0].tv_sec, times[0].tv_nsec = sec, 0
  times[1].tv_sec, times[1].tv_nsec = sec, 0
  if C.utimensat(AT_FDCWD, path, times, AT_SYMLINK_NOFOLLOW) ~= 0 then return fail("utimensat", ffi.errno()) end
  return true
end

function M.unlink(path)
  check_path("unlink", path)
  if C.unlink(path) ~= 0 then return fail("unlink", ffi.errno()) end
  return true
end

return M
