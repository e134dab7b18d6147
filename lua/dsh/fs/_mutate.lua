--- dsh.fs._mutate: writes and edits of the fs seam (mixed into dsh.fs's FS).
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
local text = require "dsh.fs._text"
local bit = require "bit"

local M = {}
local MOD = "dsh.fs"

local unpack = unpack -- luacheck: ignore 143
local pack = function(...) return { n = select("#", ...), ... } end

function M.mixin(FS, h)
  local E, map, aborted, step, is_aborted = h.E, h.map, h.aborted, h.step, h.is_aborted

  -- Per-key lock: the holder runs, later arrivals queue in order.
  function FS:_acquire(key, signal)
    local q = self._locks[key]
    if not q then
      self._locks[key] = {}
      return true
    end
    local waiter = { future = async.future() }
    q[#q + 1] = waiter
    local ok, err
    if signal then ok, err = async.race_signal(waiter.future, signal) else ok = waiter.future:await() end
    if ok then return true end
    if waiter.future:done() then
      self:_release(key) -- the lock was handed over as we gave up: pass it on
    else
      waiter.cancelled = true
    end
    return nil, err
  end

  function FS:_release(key)
    self._commits = self._commits + 1
    local q = self._locks[key]
    while #q > 0 do
      local w = table.remove(q, 1)
      if not w.cancelled then
        w.future:resolve(true)
        return
      end
    end
    self._locks[key] = nil
  end

  -- Resolve, lock, stat; run body(display, key, info|false) under the lock.
  function FS:_mutate(op, path, opts, body)
    local seen = self._commits
    local display, key, info = self:_locate(op, path, opts)
    if not display then return nil, key end
    local ok, lerr = self:_acquire(key, opts.signal)
    if not ok then return nil, is_aborted(opts) and aborted(op) or lerr end
    local res = pack(pcall(function()
      -- Metadata read before the lock is stale if any mutation finished since.
      if self._commits ~= seen then
        local serr
        info, serr = self._b:stat(key, opts)
        if not info then
          if serr.code ~= "not_found" then return nil, map(op, display, serr, opts.signal) end
          info = false
        end
      end
      if is_aborted(opts) then return nil, aborted(op) end
      return body(display, key, info)
    end))
    self:_release(key)
    if not res[1] then error(res[2], 0) end
    return unpack(res, 2, res.n)
  end

  -- The whole current content of key, or nil, mapped err.
  function FS:_slurp(op, display, key, opts)
    local reader, err = self._b:open(key, opts)
    if not reader then return nil, map(op, display, err, opts.signal) end
    local data, derr = h.drain(reader)
    if not data then return nil, map(op, display, derr, opts.signal) end
    return data
  end

  -- Steps 1-3 of the commit; returns the new version or nil, err.
  function FS:_commit(op, display, key, data, mode, opts)
    local b = self._b
    local dir, base = h.split(key)
    local tag = h.uuid()
    -- NAME_MAX is 255 bytes: keep the temp name within it however long base is.
    local tmp = dir .. "/." .. base:sub(1, 200) .. ".dsh-" .. tag .. ".tmp"
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
    return self:_version(info, key)
  end

  local function not_regular(display)
    return E("FS_NOT_REGULAR_FILE", string.format('"%s" is not a regular file', display))
  end

  local function new_mode(info)
    return info and bit.band(info.mode or 0, 511) or h.NEW_FILE_MODE
  end

  -- Guards shared by writeText and writeBytes; nil when the write may go on.
  local function write_guards(self, display, key, info, opts)
    if info and info.type ~= "file" then return not_regular(display) end
    if opts.createIfAbsent and info then
      return E("FS_NOT_OBSERVED",
        string.format('"%s" already exists; read it before overwriting it', display))
    end
    if opts.replaceIfVersion ~= nil then
      if not info then
        return E("FS_STALE_VERSION", string.format('"%s" no longer exists', display))
      elseif self:_version(info, key) ~= opts.replaceIfVersion then
        return E("FS_STALE_VERSION", string.format('"%s" has changed since it was read', display))
      end
    end
    return nil
  end

  local function check_write_opts(op, opts)
    opts = h.check_opts(op, opts)
    if opts.replaceIfVersion ~= nil and type(opts.replaceIfVersion) ~= "string" then
      error(string.format("%s: %s: opts.replaceIfVersion must be a version string", MOD, op), 3)
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
  ---@param content string
  ---@param opts dsh.FsWriteOpts|nil
  ---@return dsh.FsWriteResult|nil, dsh.Error?
  function FS:writeText(path, content, opts)
    if type(content) ~= "string" then
      error(MOD .. ": writeText: content must be a string, got " .. type(content), 2)
    end
    opts = check_write_opts("writeText", opts)
    return self:_mutate("write", path, opts, function(display, key, info)
      local gerr = write_guards(self, display, key, info, opts)
      if gerr then return nil, gerr end
      step(opts, "stat", { targetKey = key })
      local before
      if info then
        if is_aborted(opts) then return nil, aborted("write") end
        local old, err = self:_slurp("write", display, key, opts)
        if not old then return nil, err end
        if not text.problem(old, true) then before = text.lf(old) end
        step(opts, "read", { targetKey = key })
      end
      local version, cerr = self:_commit("write", display, key, content, new_mode(info), opts)
      if not version then return nil, cerr end
      return { operation = info and "update" or "create", version = version, before = before,
        after = text.lf(content) }
    end)
  end

  --- Write bytes verbatim to path (atomically): {operation=, version=}.
  ---@param data string
  ---@param opts dsh.FsWriteOpts|nil
  ---@return {operation:string, version:string}|nil, dsh.Error?
  function FS:writeBytes(path, data, opts)
    if type(data) ~= "string" then
      error(MOD .. ": writeBytes: data must be a string, got " .. type(data), 2)
    end
    opts = check_write_opts("writeBytes", opts)
    return self:_mutate("write", path, opts, function(display, key, info)
      local gerr = write_guards(self, display, key, info, opts)
      if gerr then return nil, gerr end
      step(opts, "stat", { targetKey = key })
      local version, cerr = self:_commit("write", display, key, data, new_mode(info), opts)
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
  ---@param edit dsh.FsEdit
  ---@return table|nil, dsh.Error?
  function FS:editText(path, edit, opts)
    if type(edit) ~= "table" then error(MOD .. ": editText: edit must be a table, got " .. type(edit), 2) end
    if type(edit.oldString) ~= "string" then error(MOD .. ": editText: oldString must be a string", 2) end
    if type(edit.newString) ~= "string" then error(MOD .. ": editText: newString must be a string", 2) end
    if edit.version ~= nil and type(edit.version) ~= "string" then
      error(MOD .. ": editText: version must be a string", 2)
    end
    opts = h.check_opts("editText", opts)
    return self:_mutate("edit", path, opts, function(display, key, info)
      if not info then
        if edit.version == nil then return nil, h.missing(display) end
        return nil, E("FS_STALE_VERSION", string.format('"%s" no longer exists', display))
      end
      if info.type ~= "file" then return nil, not_regular(display) end
      if edit.version ~= nil and self:_version(info, key) ~= edit.version then
        return nil, E("FS_STALE_VERSION", string.format('"%s" has changed since it was read', display))
      end
      step(opts, "stat", { targetKey = key })
      if is_aborted(opts) then return nil, aborted("edit") end
      local old, err = self:_slurp("edit", display, key, opts)
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
      local version, cerr = self:_commit("edit", display, key, stored, new_mode(info), opts)
      if not version then return nil, cerr end
      return { operation = "update", version = version, before = before, after = after,
        replacements = edit.replaceAll and n or 1 }
    end)
  end
end

return M
