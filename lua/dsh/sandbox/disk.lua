--- dsh.sandbox.disk: the disk limit of a local sandbox.
--
-- When the host runs as root, a sandbox's writable files (/home/user, /tmp,
-- and the copies of what it must not see the host's path of) live in a
-- sparse ext4 image of diskMb, `disk.img` in its state directory, that the
-- launcher mounts (loop, nodev, nosuid) in its own mount namespace: the image
-- takes only what is written, writing past diskMb fails inside with ENOSPC,
-- and nothing on the host fills. Its layout:
--   home/        /home/user (owned by `user`)
--   tmp/         /tmp (1777)
--   .dsh/        dshd and the generated /etc files, copied at every start
--                (read-only inside: nothing of the host's paths shows in
--                /proc/self/mountinfo)
-- Without root (no loop devices) the disk is not bounded: the sandbox's
-- limits have no diskMb, and the README says so.
local errors = require "dsh.errors"
local lfs = require "lfs"
local limits = require "dsh.sandbox.limits"
local proc = require "dsh.core.proc"
local sys = require "dsh.core.sysutil"

local M = {}

M.MIN_MB = limits.MIN_DISK_MB
M.DEFAULT_MAX_MB = 10240
M.IMAGE = "disk.img"
M.MOUNT = "disk" -- mount point in the state directory (empty on the host)

local function mkfs()
  return sys.which("mkfs.ext4") or (sys.exists("/sbin/mkfs.ext4") and "/sbin/mkfs.ext4")
    or (sys.exists("/usr/sbin/mkfs.ext4") and "/usr/sbin/mkfs.ext4") or nil
end

--- True when this host can give sandboxes a disk limit.
function M.available()
  return sys.getuid() == 0 and sys.exists("/dev/loop-control") and mkfs() ~= nil and sys.exists("/bin/mount")
end

--- Free MiB of the file system that holds path (nil when unknown).
function M.free_mb(path)
  local p = proc.spawn { argv = { "df", "-P", "-m", path }, env = { PATH = "/usr/bin:/bin" },
    stdout = "pipe", stderr = "null" }
  if not p then return nil end
  local out = p:read_all() or ""
  p:wait()
  p:close()
  return tonumber(out:match("\n%S+%s+%d+%s+%d+%s+(%d+)"))
end

--- diskMb for a new sandbox whose files go under state_root: the figure, nil
-- (not bounded here), or nil, err when the request cannot be given.
function M.plan(want, state_root)
  if not M.available() then
    if want then
      return nil, errors.new("failed_precondition", "diskMb cannot be enforced here: a disk limit needs root "
        .. "(a loop-mounted image per sandbox) and mkfs.ext4")
    end
    return nil
  end
  local free = M.free_mb(state_root or "/")
  if not want and free and math.floor(free / 4) < M.MIN_MB then
    return nil, errors.new("failed_precondition", string.format("not enough free space where sandboxes live "
      .. "(%d MiB free; a sandbox takes at most a quarter of it by default, at least %d MiB): free some, or "
      .. "pass a smaller diskMb", free, M.MIN_MB))
  end
  if want then
    if free and want > free then
      return nil, errors.new("failed_precondition", string.format(
        "diskMb %d is more than the free space where sandboxes live (%d MiB free)", want, free))
    end
    return want
  end
  return math.min(M.DEFAULT_MAX_MB, math.floor((free or 4 * M.DEFAULT_MAX_MB) / 4))
end

--- Make the sandbox's image at dir (sparse, mb MiB), owned by root_uid.
function M.create(dir, mb, root_uid, root_gid)
  local path = dir .. "/" .. M.IMAGE
  local f, err = io.open(path, "wb")
  if not f then return nil, "cannot create " .. path .. ": " .. tostring(err) end
  f:close()
  sys.chmod(path, "600")
  local p
  p, err = proc.spawn {
    argv = { "truncate", "-s", string.format("%dM", mb), path }, env = { PATH = "/usr/bin:/bin" }, stdout = "null" }
  if p then
    local st = p:wait()
    p:close()
    if st.exit_code ~= 0 then err = { message = "truncate failed" } end
  end
  if err then return nil, "cannot size " .. path .. ": " .. tostring(err.message) end
  -- no blocks reserved for root (the sandbox's root is the sandbox's), one
  -- inode per 8 KiB (node_modules), no room kept to grow it (a sandbox's
  -- image is never resized), tables written lazily: the new image takes
  -- about 250 KiB of the host and 20-40 ms
  p, err = proc.spawn {
    argv = { mkfs(), "-q", "-F", "-m", "0", "-i", "8192", "-O", "^resize_inode", "-J", "size=16", "-E",
      string.format("root_owner=%d:%d,lazy_itable_init=1,lazy_journal_init=1", root_uid, root_gid), path },
    env = { PATH = "/usr/sbin:/usr/bin:/sbin:/bin" }, stdout = "null", stderr = "pipe",
  }
  if not p then return nil, "cannot run mkfs.ext4: " .. err.message end
  local out = p:read_all("stderr") or ""
  local st = p:wait()
  p:close()
  if st.exit_code ~= 0 then return nil, "mkfs.ext4 failed: " .. out end
  local ok, merr = lfs.mkdir(dir .. "/" .. M.MOUNT)
  if not ok and not sys.is_dir(dir .. "/" .. M.MOUNT) then return nil, tostring(merr) end
  return true
end

--- True when the sandbox at dir keeps its files in an image.
function M.has_image(dir)
  return lfs.symlinkattributes(dir .. "/" .. M.IMAGE, "mode") == "file"
end

--- Bytes the image takes on the host (what the sandbox wrote, and keeps:
-- it is mounted with discard, so what it deletes is given back), or nil.
function M.used_bytes(dir)
  local blocks = lfs.symlinkattributes(dir .. "/" .. M.IMAGE, "blocks")
  return blocks and blocks * 512 or nil
end

--- Bytes used in the running sandbox's file system, as its own df would say
-- (what is written but not yet on the image included), or nil. init: the
-- host pid of the sandbox's first process. A figure the sandbox's root could
-- skew (it is read through the sandbox's root directory), so for display only.
function M.fs_used_bytes(init)
  local p = proc.spawn { argv = { "stat", "-f", "-c", "%b %f %S", "/proc/" .. init .. "/root/home/user" },
    env = { PATH = "/usr/bin:/bin" }, stdout = "pipe", stderr = "null" }
  if not p then return nil end
  local out = p:read_all() or ""
  p:wait()
  p:close()
  local blocks, free, size = out:match("^(%d+) (%d+) (%d+)")
  if not blocks then return nil end
  return (tonumber(blocks) - tonumber(free)) * tonumber(size)
end

return M
