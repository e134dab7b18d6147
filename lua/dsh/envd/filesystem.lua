--- dsh.envd.filesystem: filesystem.Filesystem RPCs of the envd client.
--
-- Entries are normalised to {name=, type="file"|"dir"|"symlink"|"other", path=,
-- size=, mode=, permissions=, owner=, group=, modified_time=, symlink_target=,
-- metadata=}; sizes become numbers, enums become short names.
local errors = require "dsh.errors"
local json = require "dsh.json"

local M = {}

local FILE_TYPES = {
  FILE_TYPE_FILE = "file", FILE_TYPE_DIRECTORY = "dir", FILE_TYPE_SYMLINK = "symlink",
  [1] = "file", [2] = "dir", [3] = "symlink",
}
local EVENT_TYPES = {
  EVENT_TYPE_CREATE = "create", EVENT_TYPE_WRITE = "write", EVENT_TYPE_REMOVE = "remove",
  EVENT_TYPE_RENAME = "rename", EVENT_TYPE_CHMOD = "chmod",
  [1] = "create", [2] = "write", [3] = "remove", [4] = "rename", [5] = "chmod",
}

local function str(v)
  return type(v) == "string" and v or nil
end

--- A normalised entry from an EntryInfo message.
function M.entry(e)
  if type(e) ~= "table" then return nil end
  local meta = type(e.metadata) == "table" and next(e.metadata) and e.metadata or nil
  return {
    name = str(e.name) or "",
    type = FILE_TYPES[e.type] or "other",
    path = str(e.path) or "",
    size = tonumber(e.size) or 0,
    mode = tonumber(e.mode) or 0,
    permissions = str(e.permissions),
    owner = str(e.owner),
    group = str(e.group),
    modified_time = str(e.modifiedTime or e.modified_time),
    symlink_target = str(e.symlinkTarget or e.symlink_target),
    metadata = meta,
  }
end

---@class dsh.EnvdWatch
local Watch = {}
Watch.__index = Watch
Watch.__tostring = function(w)
  return "dsh.envd.watch(" .. w.path .. (w._closed and ", closed" or "") .. ")"
end

--- Next filesystem event {name=, type="create"|"write"|"remove"|"rename"|"chmod",
-- entry=}; nil when the stream ended, nil, err on failure.
function Watch:next()
  while true do
    local msg, err = self._stream:next()
    if not msg then return nil, err end
    local fe = msg.filesystem
    if type(fe) == "table" then
      local kind = EVENT_TYPES[fe.type]
      if kind then
        return { name = str(fe.name) or "", type = kind, entry = M.entry(fe.entry) }
      end
    end
  end
end

function Watch:close()
  if self._closed then return end
  self._closed = true
  self._stream:close()
end

local function path_arg(what, p)
  if type(p) ~= "string" then
    errors.misuse("dsh.envd", "%s: path must be a string, got %s", what, type(p))
  end
  return p
end

function M.mixin(Client)
  --- Stat a path (symlinks reported as themselves). nil, err{code="not_found"} when missing.
  function Client:stat(path, opts)
    local resp, err = self:call("/filesystem.Filesystem/Stat", { path = path_arg("stat", path) }, opts)
    if not resp then return nil, err end
    return M.entry(resp.entry)
  end

  --- mkdir -p; an existing directory gives nil, err{code="already_exists"}.
  function Client:make_dir(path, opts)
    local resp, err = self:call("/filesystem.Filesystem/MakeDir", { path = path_arg("make_dir", path) }, opts)
    if not resp then return nil, err end
    return M.entry(resp.entry)
  end

  function Client:move(source, destination, opts)
    local resp, err = self:call("/filesystem.Filesystem/Move", {
      source = path_arg("move", source), destination = path_arg("move", destination),
    }, opts)
    if not resp then return nil, err end
    return M.entry(resp.entry)
  end

  --- Entries under path down to depth (default 1), in the daemon's order.
  function Client:list_dir(path, depth, opts)
    local resp, err = self:call("/filesystem.Filesystem/ListDir",
      { path = path_arg("list_dir", path), depth = depth or 1 }, opts)
    if not resp then return nil, err end
    local out = {}
    for _, e in ipairs(type(resp.entries) == "table" and resp.entries or {}) do out[#out + 1] = M.entry(e) end
    return out
  end

  --- rm -rf; a missing path is not an error.
  function Client:remove(path, opts)
    local resp, err = self:call("/filesystem.Filesystem/Remove", { path = path_arg("remove", path) }, opts)
    if not resp then return nil, err end
    return true
  end

  --- Watch a directory; returns once the watch is armed. opts: recursive,
  -- include_entry, timeout_ms (Connect-Timeout-Ms), signal.
  function Client:watch_dir(path, opts)
    opts = opts or {}
    local msg = { path = path_arg("watch_dir", path) }
    if opts.recursive then msg.recursive = true end
    if opts.include_entry then msg.includeEntry = true end
    local stream, err = self:stream("/filesystem.Filesystem/WatchDir", msg, opts)
    if not stream then return nil, err end
    local first, ferr = stream:next()
    if not first or type(first.start) ~= "table" then
      stream:close()
      return nil, ferr or errors.new("internal", "watch stream did not start")
    end
    return setmetatable({ path = path, _stream = stream }, Watch)
  end

  --- Polling watchers: create, fetch accumulated events, remove.
  function Client:create_watcher(path, opts)
    opts = opts or {}
    local resp, err = self:call("/filesystem.Filesystem/CreateWatcher", {
      path = path_arg("create_watcher", path),
      recursive = opts.recursive or nil, includeEntry = opts.include_entry or nil,
    }, opts)
    if not resp then return nil, err end
    return str(resp.watcherId or resp.watcher_id)
  end

  function Client:watcher_events(id, opts)
    local resp, err = self:call("/filesystem.Filesystem/GetWatcherEvents", { watcherId = id }, opts)
    if not resp then return nil, err end
    local out = {}
    for _, fe in ipairs(type(resp.events) == "table" and resp.events or {}) do
      local kind = EVENT_TYPES[fe.type]
      if kind then out[#out + 1] = { name = str(fe.name) or "", type = kind, entry = M.entry(fe.entry) } end
    end
    return out
  end

  function Client:remove_watcher(id, opts)
    local resp, err = self:call("/filesystem.Filesystem/RemoveWatcher", { watcherId = id }, opts)
    if not resp then return nil, err end
    return true
  end
end

M.Watch = Watch
M.null = json.null
return M
