--- dsh.fs._watch: the fs seam's file watch (fs:watch).
--
-- A watch of a directory (and, with recursive, of every directory below it,
-- those made later included) yields events one at a time with next():
-- {type = "create"|"write"|"remove"|"rename"|"chmod", name = <path relative
-- to the watched directory, "." for itself>, path = <its display path>}.
-- The backend does the watching (fs-e2b: envd's WatchDir stream, on dshd or
-- a stock envd; fs-local: inotify) and returns names relative to the
-- directory's key; the seam adds display paths. next(signal) returns nil
-- once the watch ended (closed, or the directory went away) and nil, err
-- when its transport failed; an aborted signal returns nil, FS_ABORTED and
-- loses no event. Disposing ctx.fs closes every watch.
local errors = require "dsh.errors"
local fe = require "dsh.fs._errors"
local paths = require "dsh.fs._paths"

local M = {}
local MOD = "dsh.fs"

M.TYPES = { create = true, write = true, remove = true, rename = true, chmod = true }

---@class dsh.FsWatch
---@field path string   the watched directory's display path
local Watch = {}
Watch.__index = Watch
Watch.__tostring = function(w) return "dsh.fs.watch(" .. w.path .. (w._closed and ", closed" or "") .. ")" end

---@class dsh.FsWatchEvent
---@field type "create"|"write"|"remove"|"rename"|"chmod"
---@field name string   relative to the watched directory ("." for itself)
---@field path string   display path

--- The next event; nil once the watch ended; nil, err (FS_ABORTED when
--- signal aborted: the event is kept for the next call).
---@param signal dsh.AbortSignal|nil
---@return dsh.FsWatchEvent|nil, dsh.Error|nil
function Watch:next(signal)
  if self._closed then return nil end
  local ev, err = self._raw:next(signal)
  if not ev then
    if signal and signal.aborted then return nil, fe.aborted("watch") end
    if err then return nil, fe.map("watch", self.path, err) end
    return nil
  end
  local name = (ev.name == "" or ev.name == ".") and "." or ev.name
  return { type = ev.type, name = name, path = name == "." and self.path or paths.normalize(self.path .. "/" .. name) }
end

--- Stop watching (idempotent).
function Watch:close()
  if self._closed then return end
  self._closed = true
  self._fs._watches[self] = nil
  self._raw:close()
end

function M.watch(fs, path, opts)
  local recursive = opts.recursive
  if recursive ~= nil and type(recursive) ~= "boolean" then
    errors.misuse(MOD, "watch: opts.recursive must be a boolean")
  end
  if type(fs._b.watch) ~= "function" then
    return nil, errors.new("FS_IO_ERROR", MOD .. ": watch: the " .. fs.kind .. " backend cannot watch files")
  end
  local op = "watch"
  local display, key = paths.resolve(fs, op, "watch", path, opts)
  if not display then return nil, key end
  local info, serr = fs._b:stat(key, opts)
  if not info then
    if serr.code == "FS_NOT_FOUND" and not fe.is_aborted(opts) then return nil, fe.missing(display) end
    return nil, fe.map(op, display, serr, opts.signal)
  end
  if info.type ~= "directory" then return nil, fe.not_directory(display) end
  local raw, err = fs._b:watch(key, { recursive = recursive == true, signal = opts.signal })
  if not raw then return nil, fe.map(op, display, err, opts.signal) end
  local w = setmetatable({ path = display, _raw = raw, _fs = fs }, Watch)
  fs._watches[w] = true
  return w
end

M.Watch = Watch
return M
