--- dsh.fs._mutate: the writes and edits of the fs seam.
--
-- Every mutation resolves its targetKey, takes the host-local lock of that key
-- (so a write and an edit racing on one version serialise and exactly one
-- wins), checks its guards against fresh metadata, and commits atomically:
--   1. write <dir>/.<base>.dsh-<uuid>.tmp (tagged with the uuid),
--   2. chmod it to the old mode & 0777, or 0600 for a new file,
--   3. rename it onto the target; the rename's metadata is the new version.
-- Aborts are checked between steps; once renamed, the write has happened and
-- an abort no longer fails it. Any failure removes the temp file (errors of
-- the removal ignored) and maps the original error.
local async = require "dsh.async"
local errors = require "dsh.errors"
local fe = require "dsh.fs._errors"
local paths = require "dsh.fs._paths"
local read = require "dsh.fs._read"
local text = require "dsh.fs._text"
local bit = require "bit"

local M = {}
local MOD = "dsh.fs"

local unpack = unpack -- luacheck: ignore 143
local pack = function(...) return { n = select("#", ...), ... } end

M.NEW_FILE_MODE = 384 -- 0600

local E, map, aborted, step, is_aborted = fe.new, fe.map, fe.aborted, fe.step, fe.is_aborted

-- Per-key lock (fs._locks): the holder runs, later arrivals queue in order.
local release

local function acquire(fs, key, signal)
  local q = fs._locks[key]
  if not q then
    fs._locks[key] = {}
    return true
  end
  local waiter = { future = async.future() }
  q[#q + 1] = waiter
  local ok, err
  if signal then ok, err = async.race_signal(waiter.future, signal) else ok = waiter.future:await() end
  if ok then return true end
  if waiter.future:done() then
    release(fs, key) -- the lock was handed over as we gave up: pass it on
  else
    waiter.cancelled = true
  end
  return nil, err
end

function release(fs, key)
  fs._commits = fs._commits + 1
  local q = fs._locks[key]
  while #q > 0 do
    local w = table.remove(q, 1)
    if not w.cancelled then
      w.future:resolve(true)
      return
    end
  end
  fs._locks[key] = nil
end

-- The lock of a key, for the other mutations (dsh.fs._tree): acquire(fs,
-- key, signal) -> true | nil, err; release(fs, key).
M.acquire, M.release = acquire, release

-- Resolve, lock, stat; run body(display, key, info|false) under the lock.
local function mutate(fs, op, method, path, opts, body)
  local seen = fs._commits
  local display, key, info = paths.locate(fs, op, method, path, opts)
  if not display then return nil, key end
  local ok, lerr = acquire(fs, key, opts.signal)
  if not ok then return nil, is_aborted(opts) and aborted(op) or lerr end
  local res = pack(pcall(function()
    -- Metadata read before the lock is stale if any mutation finished since.
    if fs._commits ~= seen then
      local serr
      info, serr = fs._b:stat(key, opts)
      if not info then
        if serr.code ~= "FS_NOT_FOUND" then return nil, map(op, display, serr, opts.signal) end
        info = false
      end
    end
    if is_aborted(opts) then return nil, aborted(op) end
    return body(display, key, info)
  end))
  release(fs, key)
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, res.n)
end

-- The whole current content of key, or nil, mapped err.
local function slurp(fs, op, display, key, opts)
  local reader, err = fs._b:open(key, opts)
  if not reader then return nil, map(op, display, err, opts.signal) end
  local data, derr = read.drain(reader)
  if not data then return nil, map(op, display, derr, opts.signal) end
  return data
end

-- A temporary file beside key, and its tag.
local function temp_of(key)
  local dir, base = paths.split(key)
  local tag = paths.uuid()
  -- NAME_MAX is 255 bytes: keep the temp name within it however long base is.
  return dir .. "/." .. base:sub(1, 200) .. ".dsh-" .. tag .. ".tmp", tag
end

-- Steps 1-3 of the commit; returns the new version or nil, err.
local function commit(fs, op, display, key, data, mode, opts)
  local b = fs._b
  local tmp, tag = temp_of(key)
  if is_aborted(opts) then return nil, aborted(op) end
  local function abandon(err)
    b:remove(tmp, {}) -- cleanup runs even after an abort, so no signal here
    return nil, map(op, display, err, opts.signal)
  end
  local function hook(name)
    local ok, herr = pcall(step, opts, name, { temp = tmp, targetKey = key })
    if not ok then
      b:remove(tmp, {})
      error(herr, 0)
    end
  end
  local ok, err = b:writeTemp(tmp, data, tag, opts)
  if not ok then return abandon(err) end
  hook("written")
  if is_aborted(opts) then return abandon({}) end
  ok, err = b:chmod(tmp, mode, opts)
  if not ok then return abandon(err) end
  hook("chmodded")
  if is_aborted(opts) then return abandon({}) end
  local info, rerr = b:rename(tmp, key, opts)
  if not info then return abandon(rerr) end
  step(opts, "renamed", { targetKey = key })
  return paths.version(fs, info, key)
end

local function new_mode(info)
  return info and bit.band(info.mode or 0, 511) or M.NEW_FILE_MODE
end

-- Whether a write beside key could happen: nil, FS_PERMISSION_DENIED when
-- the world refuses it (a read-only file system, no permission), else true
-- (an empty temporary file is written and removed).
local function refused(fs, display, key, opts)
  local tmp, tag = temp_of(key)
  local ok, err = fs._b:writeTemp(tmp, "", tag, opts)
  if ok then
    fs._b:remove(tmp, {})
    return nil
  end
  local e = map("write", display, err, opts.signal)
  if e.code == "FS_PERMISSION_DENIED" then return e end
  return nil
end

-- Guards shared by writeText and writeBytes; nil when the write may go on.
local function write_guards(fs, display, key, info, opts)
  if info and info.type ~= "file" then return fe.not_regular(display) end
  if opts.createIfAbsent and info then
    -- "read it first" would send the caller to read a file it can never write
    return refused(fs, display, key, opts) or E("FS_NOT_OBSERVED",
      string.format('"%s" already exists; read it before overwriting it', display))
  end
  if opts.replaceIfVersion ~= nil then
    if not info then
      return fe.stale(display, true)
    elseif paths.version(fs, info, key) ~= opts.replaceIfVersion then
      return fe.stale(display)
    end
  end
  return nil
end

local function check_write_opts(method, opts)
  opts = fe.check_opts(method, opts)
  if opts.replaceIfVersion ~= nil and type(opts.replaceIfVersion) ~= "string" then
    errors.misuse(MOD, "%s: opts.replaceIfVersion must be a version string", method)
  end
  return opts
end

---@class dsh.FsWriteOpts: dsh.FsOpts
---@field createIfAbsent boolean|nil   fail with FS_NOT_OBSERVED if the file exists
---@field replaceIfVersion string|nil  fail with FS_STALE_VERSION unless the file has this version

---@class dsh.FsWriteResult
---@field operation "create"|"update"
---@field version string
---@field before string|nil   old text, CRLF -> LF; nil when new, binary or not UTF-8
---@field after string        content, CRLF -> LF (the file gets content verbatim)

--- Write content verbatim to path (atomically).
function M.write_text(fs, path, content, opts)
  if type(content) ~= "string" then
    errors.misuse(MOD, "writeText: content must be a string, got %s", type(content))
  end
  opts = check_write_opts("writeText", opts)
  return mutate(fs, "write", "writeText", path, opts, function(display, key, info)
    local gerr = write_guards(fs, display, key, info, opts)
    if gerr then return nil, gerr end
    step(opts, "stat", { targetKey = key })
    local before
    if info then
      if is_aborted(opts) then return nil, aborted("write") end
      local old, err = slurp(fs, "write", display, key, opts)
      if not old then return nil, err end
      if not text.problem(old, true) then before = text.lf(old) end
      step(opts, "read", { targetKey = key })
    end
    local version, cerr = commit(fs, "write", display, key, content, new_mode(info), opts)
    if not version then return nil, cerr end
    return { operation = info and "update" or "create", version = version, before = before,
      after = text.lf(content) }
  end)
end

--- Write bytes verbatim to path (atomically): {operation=, version=}.
function M.write_bytes(fs, path, data, opts)
  if type(data) ~= "string" then
    errors.misuse(MOD, "writeBytes: data must be a string, got %s", type(data))
  end
  opts = check_write_opts("writeBytes", opts)
  return mutate(fs, "write", "writeBytes", path, opts, function(display, key, info)
    local gerr = write_guards(fs, display, key, info, opts)
    if gerr then return nil, gerr end
    step(opts, "stat", { targetKey = key })
    local version, cerr = commit(fs, "write", display, key, data, new_mode(info), opts)
    if not version then return nil, cerr end
    return { operation = info and "update" or "create", version = version }
  end)
end

---@class dsh.FsEdit
---@field oldString string
---@field newString string
---@field replaceAll boolean|nil
---@field version string|nil   the version the edit was planned against

--- Replace oldString by newString in a text file (matching on LF-normalised
-- text): {operation="update", version=, before=, after=, replacements=}.
function M.edit_text(fs, path, edit, opts)
  if type(edit) ~= "table" then errors.misuse(MOD, "editText: edit must be a table, got %s", type(edit)) end
  if type(edit.oldString) ~= "string" then errors.misuse(MOD, "editText: oldString must be a string") end
  if type(edit.newString) ~= "string" then errors.misuse(MOD, "editText: newString must be a string") end
  if edit.version ~= nil and type(edit.version) ~= "string" then
    errors.misuse(MOD, "editText: version must be a string")
  end
  opts = fe.check_opts("editText", opts)
  return mutate(fs, "edit", "editText", path, opts, function(display, key, info)
    -- a missing target is stale on the guarded and the unconditional path
    -- alike (reference §2.2, §6.3 item 20)
    if not info then return nil, fe.stale(display, edit.version == nil and "missing" or true) end
    if info.type ~= "file" then return nil, fe.not_regular(display) end
    if edit.version ~= nil and paths.version(fs, info, key) ~= edit.version then
      return nil, fe.stale(display)
    end
    step(opts, "stat", { targetKey = key })
    if is_aborted(opts) then return nil, aborted("edit") end
    local old, err = slurp(fs, "edit", display, key, opts)
    if not old then return nil, err end
    local problem = text.problem(old, true)
    if problem then return nil, E("FS_NOT_TEXT", text.describe(display, problem)) end
    step(opts, "read", { targetKey = key })
    local before = text.lf(old)
    local from, to = text.lf(edit.oldString), text.lf(edit.newString)
    if from == "" then return nil, E("FS_EDIT_NOT_FOUND", "old_string must be non-empty") end
    local n = text.count(before, from)
    if n == 0 then
      return nil, E("FS_EDIT_NOT_FOUND", string.format('old_string not found in "%s"', display))
    end
    if n > 1 and not edit.replaceAll then
      return nil, E("FS_AMBIGUOUS_EDIT", string.format("old_string matched %d times", n))
    end
    local after = text.replace(before, from, to, edit.replaceAll)
    local stored = text.prefers_crlf(old) and text.crlf(after) or after
    local version, cerr = commit(fs, "edit", display, key, stored, new_mode(info), opts)
    if not version then return nil, cerr end
    return { operation = "update", version = version, before = before, after = after,
      replacements = edit.replaceAll and n or 1 }
  end)
end

return M
