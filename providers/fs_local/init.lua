--- ctx.fs on the host's own filesystem (fs-local).
--
-- A thin dsh.fs backend: lstat/stat through statx (nanosecond times, inode),
-- realpath -m walked component by component, reads through stdio, temp files
-- created exclusively with mode 0600, chmod and rename(2). Versions carry
-- device, inode and ctime, so a replaced or touched file changes version.
-- Trees go through the seam's own tar walker and reader (dsh.fs.hosttree),
-- watches through inotify (dsh.core.hostwatch: names relative to the watched
-- directory; recursive watches add every directory made or moved in, and
-- report what one already holds as creates).
-- Config: root = the directory relative paths resolve against (default: the
-- current directory). root does not confine anything; use fs:contains().
local fs = require "dsh.fs"
local errors = require "dsh.errors"
local bit = require "bit"
local hostfs = require "dsh.core.hostfs"
local hosttree = require "dsh.fs.hosttree"
local hostwatch = require "dsh.core.hostwatch"
local lfs = require "lfs"
local schema = require "dsh.providers.fs_local.schema"

local M = {
  name = "fs-local",
  provides = "fs",
  inject = {},
  validate = schema.validate,
}

local Backend = {}
Backend.__index = Backend

-- hostfs's words (from errno) -> the fs backend contract's (dsh.fs.BACKEND_CODES).
local CODES = { not_found = "FS_NOT_FOUND", permission_denied = "FS_PERMISSION_DENIED" }
local ENOENT, EPERM, EACCES, ENOTEMPTY = 2, 1, 13, 39

local function fs_error(err)
  local code = err.errno == ENOTEMPTY and "FS_DIRECTORY_NOT_EMPTY" or CODES[err.code] or "FS_IO_ERROR"
  return errors.new(code, err.message, { errno = err.errno })
end

-- os.remove's failure (nil, "<path>: <strerror>", errno) -> the contract's words.
local function remove_error(call, path, msg, errno)
  msg = tostring(msg)
  if msg:sub(1, #path + 2) == path .. ": " then msg = msg:sub(#path + 3) end
  local code = errno == ENOENT and "FS_NOT_FOUND" or (errno == EACCES or errno == EPERM) and "FS_PERMISSION_DENIED"
    or errno == ENOTEMPTY and "FS_DIRECTORY_NOT_EMPTY" or "FS_IO_ERROR"
  return errors.new(code, call .. ": " .. msg, { errno = errno })
end

local function info_of(st, target)
  return {
    type = st.type, size = st.size, mode = st.mode, mtime = st.mtime, symlinkTarget = target,
    identity = st.dev .. ":" .. st.ino .. ":" .. st.ctime,
  }
end

-- `realpath -m` as GNU coreutils computes it (gnulib canonicalize, CAN_MISSING):
-- components are resolved left to right, a symlink's text is spliced in
-- front of the rest, missing components are kept as they are. The first 20
-- symlinks are followed freely; after that a symlink met again with the same
-- parent directory and the same remaining text is a loop, and is kept as a
-- plain component instead of failing. Where coreutils never ends (a cycle
-- whose remaining text grows each round, e.g. u -> d/up, d/up -> ../u/z) this
-- stops after MAX_LINKS symlinks with ELOOP's message.
M.MAX_LINKS = 1000

local function realpath_m(path)
  local todo = {} -- remaining components, next one last
  for seg in path:gmatch("[^/]+") do table.insert(todo, 1, seg) end
  local out, links, seen = {}, 0, {}
  while #todo > 0 do
    local seg = table.remove(todo)
    if seg == ".." then
      out[#out] = nil
    elseif seg ~= "." then
      local dir = "/" .. table.concat(out, "/")
      local cand = dir .. (#out > 0 and "/" or "") .. seg
      local target = hostfs.readlink(cand) -- any failure: not a link here
      local loop = false
      if target then
        if links >= M.MAX_LINKS then
          return nil, errors.new("FS_IO_ERROR", "realpath: Too many levels of symbolic links")
        elseif links < 20 then
          links = links + 1
        else
          local parent, err = hostfs.stat(dir)
          if not parent then return nil, fs_error(err) end
          local rest = {}
          for i = #todo, 1, -1 do rest[#rest + 1] = todo[i] end
          local key = parent.dev .. ":" .. parent.ino .. "|" .. seg .. "/" .. table.concat(rest, "/")
          loop = seen[key]
          seen[key] = true
          links = links + 1
        end
      end
      if target and not loop then
        if target:sub(1, 1) == "/" then out = {} end
        local segs = {}
        for s in target:gmatch("[^/]+") do segs[#segs + 1] = s end
        for i = #segs, 1, -1 do todo[#todo + 1] = segs[i] end
      else
        out[#out + 1] = seg
      end
    end
  end
  return "/" .. table.concat(out, "/")
end
M.realpath_m = realpath_m

function Backend.realpath(_, paths)
  local out = {}
  for i, p in ipairs(paths) do
    local key, err = realpath_m(p)
    if not key then return nil, err end
    out[i] = key
  end
  return out
end

function Backend.lstat(_, path)
  local st, err = hostfs.lstat(path)
  if not st then return nil, fs_error(err) end
  local target
  if st.type == "symlink" then target = hostfs.readlink(path) end
  return info_of(st, target)
end

function Backend.stat(_, key)
  local st, err = hostfs.stat(key)
  if not st then return nil, fs_error(err) end
  return info_of(st)
end

function Backend.names(_, key)
  local names = {}
  local ok, err = pcall(function()
    for name in lfs.dir(key) do
      if name ~= "." and name ~= ".." then names[#names + 1] = name end
    end
  end)
  if not ok then
    -- lfs reports "cannot open <dir>: <strerror>"
    local denied = tostring(err):find("Permission denied", 1, true)
    return nil, errors.new(denied and "FS_PERMISSION_DENIED" or "FS_IO_ERROR", tostring(err))
  end
  return names
end

-- stdio reports "<path>: <strerror>" for open and "<strerror>" for read.
local function io_error(call, path, msg, errno)
  msg = tostring(msg)
  if path and msg:sub(1, #path + 2) == path .. ": " then msg = msg:sub(#path + 3) end
  local code = errno == 2 and "FS_NOT_FOUND" or (errno == 13 or errno == 1) and "FS_PERMISSION_DENIED"
    or "FS_IO_ERROR"
  return errors.new(code, call .. ": " .. msg, { errno = errno })
end

local Reader = {}
Reader.__index = Reader

function Reader:read()
  if not self._f then return nil end
  local chunk, msg, errno = self._f:read(fs.CHUNK_BYTES)
  if chunk then return chunk end
  if msg then return nil, io_error("read", nil, msg, errno) end
  return nil
end

function Reader:close()
  if self._f then
    self._f:close()
    self._f = nil
  end
end

function Backend.open(_, key)
  local f, msg, errno = io.open(key, "rb")
  if not f then return nil, io_error("open", key, msg, errno) end
  return setmetatable({ _f = f }, Reader)
end

-- mkdir -p of dir (as POST /files and MakeDir do for the E2B backend).
local function make_parents(dir)
  if dir == "" or lfs.attributes(dir, "mode") == "directory" then return true end
  local parent = dir:match("^(.*)/[^/]*$")
  local ok, err = make_parents(parent)
  if not ok then return nil, err end
  ok, err = hostfs.mkdir(dir, 493)
  if not ok and lfs.attributes(dir, "mode") ~= "directory" then
    if lfs.attributes(dir) then return nil, errors.new("FS_IO_ERROR", "mkdir: " .. dir .. ": Not a directory") end
    return nil, fs_error(err)
  end
  return true
end

function Backend.writeTemp(_, path, data)
  local ok, err = make_parents(path:match("^(.*)/[^/]*$"))
  if not ok then return nil, err end
  ok, err = hostfs.create(path, data, 384)
  if not ok then return nil, fs_error(err) end
  return true
end

function Backend.chmod(_, path, mode)
  local ok, err = hostfs.chmod(path, mode)
  if not ok then
    -- a vanished temp file is an I/O failure of the write, not "not found"
    return nil, errors.new(err.code == "not_found" and "FS_IO_ERROR" or fs_error(err).code, err.message)
  end
  return true
end

function Backend.rename(_, from, to)
  local made, merr = make_parents(to:match("^(.*)/[^/]*$"))
  if not made then return nil, merr end
  local ok, err = hostfs.rename(from, to)
  if not ok then return nil, fs_error(err) end
  local st = hostfs.lstat(to)
  -- gone again already: report a state no later stat can match
  if not st then return { type = "other", mode = 0, identity = "vanished" } end
  return info_of(st)
end

function Backend.remove(_, path)
  local ok, err = hostfs.unlink(path)
  if not ok then return nil, fs_error(err) end
  return true
end

function Backend.mkdir(_, key)
  return make_parents(key)
end

function Backend.rmdir(_, key)
  if lfs.symlinkattributes(key, "mode") ~= "directory" then
    return nil, errors.new("FS_IO_ERROR", "rmdir: " .. key .. ": Not a directory")
  end
  local ok, msg, errno = os.remove(key)
  if not ok then return nil, remove_error("rmdir", key, msg, errno) end
  return true
end

-- Everything below dir, depth first; links are removed, never followed.
local function remove_tree(dir)
  local ok, iter, d = pcall(lfs.dir, dir)
  if not ok then
    local denied = tostring(iter):find("Permission denied", 1, true)
    return nil, errors.new(denied and "FS_PERMISSION_DENIED" or "FS_IO_ERROR", tostring(iter))
  end
  for name in iter, d do
    if name ~= "." and name ~= ".." then
      local p = dir .. "/" .. name
      if lfs.symlinkattributes(p, "mode") == "directory" then
        local rok, rerr = remove_tree(p)
        if not rok then return nil, rerr end
      else
        local uok, msg, errno = os.remove(p)
        if not uok and errno ~= ENOENT then return nil, remove_error("unlink", p, msg, errno) end
      end
    end
  end
  local rok, msg, errno = os.remove(dir)
  if not rok and errno ~= ENOENT then return nil, remove_error("rmdir", dir, msg, errno) end
  return true
end

function Backend.removeTree(_, key)
  return remove_tree(key)
end

-- Trees -------------------------------------------------------------------------

function Backend.packTree(_, key)
  local entries, err = hosttree.walk(key)
  if not entries then return nil, err end
  local src = hosttree.coalesce(hosttree.source(key, entries), 256 * 1024)
  return { read = function() return src() end, close = function() end }
end

-- The source is this host too: modes are kept as they are, setuid included.
function Backend.unpackTree(_, key, source, opts)
  local sum, err = hosttree.extract(key, source, { signal = opts.signal, keepSetid = true })
  if not sum then return nil, err end
  return true
end

-- Watches ------------------------------------------------------------------------

local IN = hostwatch.IN

local LWatch = {}
LWatch.__index = LWatch

local function join(dir, name)
  if dir == "" then return name end
  return dir .. "/" .. name
end

-- Watch the directory rel (and, recursive, every directory below it); new:
-- report what it holds as creates (a directory that appeared with contents).
function LWatch:_add(rel, new)
  local path = rel == "" and self._root or self._root .. "/" .. rel
  local wd, err = self._w:add(path)
  if not wd then return nil, err end
  self._dirs[wd] = rel
  if not self._recursive and not new then return true end
  local ok, names = pcall(function()
    local out = {}
    for name in lfs.dir(path) do
      if name ~= "." and name ~= ".." then out[#out + 1] = name end
    end
    table.sort(out)
    return out
  end)
  if not ok then return true end -- gone again already: its removal is reported
  for _, name in ipairs(names) do
    local r = join(rel, name)
    if new then self._queue[#self._queue + 1] = { type = "create", name = r } end
    if self._recursive and lfs.symlinkattributes(path .. "/" .. name, "mode") == "directory" then
      self:_add(r, new)
    end
  end
  return true
end

-- One inotify record into events (envd's order: create, rename, chmod, write, remove).
function LWatch:_record(rec)
  local m = rec.mask
  if bit.band(m, IN.Q_OVERFLOW) ~= 0 then
    self._queue[#self._queue + 1] = { lost = true }
    return
  end
  local dir = self._dirs[rec.wd]
  if not dir then return end
  if bit.band(m, IN.IGNORED) ~= 0 then
    self._dirs[rec.wd] = nil
    if dir == "" then self._ended = true end
    return
  end
  local is_self = rec.name == ""
  if is_self and dir ~= "" then return end -- a directory below: its parent reports it
  local name = is_self and "." or join(dir, rec.name)
  local q = self._queue
  local function put(t) q[#q + 1] = { type = t, name = name } end
  if bit.band(m, bit.bor(IN.CREATE, IN.MOVED_TO)) ~= 0 then
    put("create")
    if self._recursive and bit.band(m, IN.ISDIR) ~= 0 then self:_add(name, true) end
  end
  if bit.band(m, bit.bor(IN.MOVED_FROM, IN.MOVE_SELF)) ~= 0 then put("rename") end
  if bit.band(m, IN.ATTRIB) ~= 0 then put("chmod") end
  if bit.band(m, IN.MODIFY) ~= 0 then put("write") end
  if bit.band(m, bit.bor(IN.DELETE, IN.DELETE_SELF)) ~= 0 then put("remove") end
end

function LWatch:next(signal)
  while true do
    local ev = self._queue[1]
    if ev then
      table.remove(self._queue, 1)
      if ev.lost then
        return nil, errors.new("FS_IO_ERROR", "events were lost: the kernel's inotify queue overflowed")
      end
      return ev
    end
    if self._ended or self._closed then return nil end
    local recs, err = self._w:read(signal)
    if not recs then return nil, err end
    if #recs == 0 then return nil end -- closed
    for _, rec in ipairs(recs) do self:_record(rec) end
  end
end

function LWatch:close()
  self._closed = true
  self._w:close()
end

function Backend.watch(_, key, o)
  local w, err = hostwatch.open()
  if not w then return nil, fs_error(err) end
  local lw = setmetatable({ _w = w, _root = key, _dirs = {}, _queue = {}, _recursive = o.recursive }, LWatch)
  local ok, aerr = lw:_add("", false)
  if not ok then
    w:close()
    return nil, fs_error(aerr)
  end
  return lw
end

--- A dsh.fs backend over the host filesystem; cwd must be absolute.
function M.backend(cwd)
  return setmetatable({ prefix = "local", cwd = cwd }, Backend)
end

function M.setup(scope, cfg)
  local here = lfs.currentdir()
  local root = cfg.root or here
  if root:sub(1, 1) ~= "/" then root = here .. "/" .. root end
  local f = fs.new(M.backend(fs.normalize(root)))
  if scope then scope:on_dispose(function() return f:dispose() end) end
  return f
end

return M
