--- dsh.fs._tree: the fs seam's directory operations — makeDir, remove, move.
--
-- makeDir resolves its path as every other call does (targetKey: a symlink to
-- a directory is that directory). remove and move act on the entry a path
-- names itself, as rm and rename(2) do: the key is the realpath of the parent
-- plus the last name, so a symlink is removed or moved, never its target.
-- Each takes the host-local lock of every key it touches (two keys in byte
-- order, so moves never wait on each other in a cycle), as writes and edits
-- do, and looks at the entries under the lock. Failures return nil, err
-- with FS_* codes; the seam checks what it can before asking the backend, so
-- both backends fail alike.
local errors = require "dsh.errors"
local fe = require "dsh.fs._errors"
local mutate = require "dsh.fs._mutate"
local paths = require "dsh.fs._paths"

local M = {}
local MOD = "dsh.fs"

local E, map, aborted, is_aborted = fe.new, fe.map, fe.aborted, fe.is_aborted
local unpack = unpack -- luacheck: ignore 143
local pack = function(...) return { n = select("#", ...), ... } end

-- display, key of the entry path names itself (see the header), or nil, err.
local function entry_key(fs, op, method, path, opts)
  local display, err = paths.display(fs, method, path, opts)
  if not display then return nil, err end
  if display == "/" then return nil, E("FS_PERMISSION_DENIED", string.format('cannot %s "/"', op)) end
  if is_aborted(opts) then return nil, aborted(op) end
  local dir, base = paths.split(display)
  local keys, rerr = fs._b:realpath({ dir == "" and "/" or dir }, opts)
  if not keys then return nil, map(op, display, rerr, opts.signal) end
  return display, (keys[1] == "/" and "" or keys[1]) .. "/" .. base
end

-- What is at key itself: info, false when nothing is, or nil, err.
local function look(fs, op, display, key, opts)
  local info, err = fs._b:lstat(key, opts)
  if info then return info end
  if err.code == "FS_NOT_FOUND" and not is_aborted(opts) then return false end
  return nil, map(op, display, err, opts.signal)
end

-- fn() under the locks of keys; its values, or nil, err when a lock wait was aborted.
local function locked(fs, op, keys, opts, fn)
  table.sort(keys)
  local held = {}
  for i, k in ipairs(keys) do
    if k ~= keys[i - 1] then
      local ok, err = mutate.acquire(fs, k, opts.signal)
      if not ok then
        for j = #held, 1, -1 do mutate.release(fs, held[j]) end
        return nil, is_aborted(opts) and aborted(op) or err
      end
      held[#held + 1] = k
    end
  end
  local res = pack(pcall(fn))
  for j = #held, 1, -1 do mutate.release(fs, held[j]) end
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, res.n)
end

local function not_empty(display, what)
  return E("FS_DIRECTORY_NOT_EMPTY", string.format('"%s" is a directory that is not empty; %s', display, what))
end

local function flag(method, opts, name)
  local v = opts[name]
  if v ~= nil and type(v) ~= "boolean" then errors.misuse(MOD, "%s: opts.%s must be a boolean", method, name) end
  return v == true
end

---@class dsh.FsMakeDirResult
---@field created boolean   false: it was a directory already

--- Make a directory and its missing parents; an existing directory is success.
function M.make_dir(fs, path, opts)
  local op = "create directory"
  local display, key = paths.resolve(fs, op, "makeDir", path, opts)
  if not display then return nil, key end
  return locked(fs, op, { key }, opts, function()
    local info, err = fs._b:stat(key, opts)
    if info then
      if info.type == "directory" then return { created = false } end
      return nil, E("FS_NOT_DIRECTORY", string.format('"%s" exists and is not a directory', display))
    elseif err.code ~= "FS_NOT_FOUND" or is_aborted(opts) then
      return nil, map(op, display, err, opts.signal)
    end
    local ok, merr = fs._b:mkdir(key, opts)
    if not ok then return nil, map(op, display, merr, opts.signal) end
    return { created = true }
  end)
end

--- Remove a file, a symlink (not its target) or a directory; a directory
-- that is not empty only with opts.recursive.
function M.remove(fs, path, opts)
  local recursive = flag("remove", opts, "recursive")
  local op = "remove"
  local display, key = entry_key(fs, op, "remove", path, opts)
  if not display then return nil, key end
  return locked(fs, op, { key }, opts, function()
    local info, err = look(fs, op, display, key, opts)
    if info == nil then return nil, err end
    if not info then return nil, fe.missing(display) end
    local ok, rerr
    if info.type ~= "directory" then
      ok, rerr = fs._b:remove(key, opts)
    elseif recursive then
      ok, rerr = fs._b:removeTree(key, opts)
    else
      ok, rerr = fs._b:rmdir(key, opts)
      if not ok and rerr.code == "FS_DIRECTORY_NOT_EMPTY" then
        return nil, not_empty(display, "remove it with recursive = true")
      end
    end
    if not ok then return nil, map(op, display, rerr, opts.signal) end
    return true
  end)
end

---@class dsh.FsMoveResult
---@field type "file"|"directory"|"symlink"|"other"
---@field version string   of the entry at its new path

--- Rename from to `to` (the entry itself; a symlink moves as a link), making
-- `to`'s missing parents. An existing `to` is replaced only with
-- opts.overwrite, and only by an entry of its kind (a directory replaces an
-- empty directory, anything else what is not a directory).
function M.move(fs, from, to, opts)
  local overwrite = flag("move", opts, "overwrite")
  local op = "move"
  local fdisplay, fkey = entry_key(fs, op, "move", from, opts)
  if not fdisplay then return nil, fkey end
  local tdisplay, tkey = entry_key(fs, op, "move", to, opts)
  if not tdisplay then return nil, tkey end
  if tkey:sub(1, #fkey + 1) == fkey .. "/" then
    return nil, E("FS_IO_ERROR", string.format('cannot move "%s" into itself ("%s")', fdisplay, tdisplay))
  end
  return locked(fs, op, { fkey, tkey }, opts, function()
    local src, serr = look(fs, op, fdisplay, fkey, opts)
    if src == nil then return nil, serr end
    if not src then return nil, fe.missing(fdisplay) end
    if fkey ~= tkey then
      local dst, derr = look(fs, op, tdisplay, tkey, opts)
      if dst == nil then return nil, derr end
      if dst then
        if not overwrite then
          return nil, E("FS_ALREADY_EXISTS",
            string.format('"%s" already exists; pass overwrite = true to replace it', tdisplay))
        elseif dst.type == "directory" and src.type ~= "directory" then
          return nil, E("FS_ALREADY_EXISTS",
            string.format('"%s" is a directory; only a directory can replace it', tdisplay))
        elseif dst.type ~= "directory" and src.type == "directory" then
          return nil, E("FS_ALREADY_EXISTS",
            string.format('"%s" is not a directory; a directory cannot replace it', tdisplay))
        end
      end
    end
    if is_aborted(opts) then return nil, aborted(op) end
    local info, err = fs._b:rename(fkey, tkey, opts)
    if not info then
      if err.code == "FS_DIRECTORY_NOT_EMPTY" then return nil, not_empty(tdisplay, "it cannot be replaced") end
      return nil, map(op, fdisplay, err, opts.signal)
    end
    local t = src.type == "symlink" and "symlink" or info.type
    return { type = t, version = paths.version(fs, info, tkey) }
  end)
end

return M
