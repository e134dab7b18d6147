--- ctx.fs inside the E2B sandbox (fs-e2b, reference §2.2): a dsh.fs backend over ctx.e2b.
--
-- targetKey is `realpath -z -m --` run in the sandbox (NUL-separated, so any
-- file name survives, and batched: one process resolves every path of a call).
-- Metadata comes from envd's Stat/ListDir EntryInfo; versions include the
-- `dsh-version` tag each commit stores with its temp file (an xattr on dshd),
-- so every commit changes the version even within one mtime tick.
--
-- Round trips, compared with the reference (§8): stat runs the realpath
-- process and the Stat of the lexical path concurrently and asks again only
-- when that path is a symlink; listDir probes only symlinked children (and
-- those concurrently) instead of realpath + Stat per child; a commit is one
-- upload, one chmod process and one Move whose EntryInfo is the new version.
--
-- Trees: packTree is the sandbox's `tar -c` read from its stdout as it
-- writes (in records of 1 MiB: a tree of small files is not a stream of
-- small events) (dshd pauses a process whose reader lags, so nothing is lost or
-- held whole); unpackTree streams the tar up with POST /files into the
-- adapter-private directory and unpacks it there with the sandbox's tar, then
-- removes it. Watches are envd's WatchDir stream (dshd or stock envd).
local async = require "dsh.async"
local errors = require "dsh.errors"
local fs = require "dsh.fs"
local schema = require "dsh.providers.fs_e2b.schema"

local M = {
  name = "fs-e2b",
  provides = "fs",
  inject = { "e2b" },
  validate = schema.validate,
}

-- GNU realpath -m never finishes on a symlink cycle whose remaining path
-- grows each round (u -> d/up, d/up -> ../u/z); the daemon kills it after this.
M.REALPATH_TIMEOUT_MS = 10000

local Backend = {}
Backend.__index = Backend

-- envd's words (Connect codes; a command's stderr) -> the fs backend
-- contract's (dsh.fs.BACKEND_CODES). An abort reaches here as envd's
-- "canceled" or, from ctx.e2b's own waits, dsh's ABORTED.
local CODES = {
  not_found = "FS_NOT_FOUND", permission_denied = "FS_PERMISSION_DENIED",
  canceled = "FS_ABORTED", ABORTED = "FS_ABORTED",
}

local function fs_error(err)
  local msg = tostring(err.message or err.code)
  local code = CODES[err.code] or (fs.PASSED_CODES[err.code] and err.code)
  if not code then
    local low = msg:lower()
    local denied = low:find("permission denied", 1, true) or low:find("operation not permitted", 1, true)
    code = denied and "FS_PERMISSION_DENIED" or low:find("directory not empty", 1, true) and "FS_DIRECTORY_NOT_EMPTY"
      or "FS_IO_ERROR"
  end
  return errors.new(code, msg, { cause = err })
end

-- A reader whose failures speak the contract's words too.
local Reader = {}
Reader.__index = Reader

function Reader:read()
  local chunk, err = self._r:read()
  if err then return nil, fs_error(err) end
  return chunk
end

function Reader:close()
  return self._r:close()
end

-- A dsh.FsInfo from a normalised envd entry. as_link: report a symlink as
-- itself (lstat); otherwise an entry is typed by what it points to, as envd does.
local function info_of(e, as_link)
  local t
  if as_link and e.symlink_target then
    t = "symlink"
  elseif e.type == "file" then
    t = "file"
  elseif e.type == "dir" then
    t = "directory"
  else
    t = "other"
  end
  return {
    type = t, size = e.size, mode = e.mode, mtime = e.modified_time, symlinkTarget = e.symlink_target,
    identity = e.metadata and e.metadata["dsh-version"] or nil,
  }
end

local function copts(opts)
  return { signal = opts and opts.signal }
end

function Backend:_envd()
  local h, err = self._e2b:getSandbox()
  if not h then return nil, fs_error(err) end
  return h.envd
end

-- Runs argv in the sandbox; true, stdout or nil, err (stderr as the message).
function Backend:_run(argv, opts, timeout_ms)
  local r, err = self._e2b:exec(argv, { signal = opts and opts.signal, timeout_ms = timeout_ms })
  if not r then
    if err.code == "deadline_exceeded" and timeout_ms then
      return nil, errors.new("FS_IO_ERROR", argv[1] .. " did not finish within " .. timeout_ms
        .. " ms (too many levels of symbolic links?)")
    end
    return nil, fs_error(err)
  end
  if r.exit_code ~= 0 then
    local msg = (r.stderr or ""):gsub("%s+$", "")
    if msg == "" then msg = argv[1] .. " exited with code " .. tostring(r.exit_code) end
    return nil, fs_error({ message = msg })
  end
  return true, r.stdout
end

function Backend:realpath(paths, opts)
  local argv = { "realpath", "-z", "-m", "--" }
  for _, p in ipairs(paths) do argv[#argv + 1] = p end
  local ok, out = self:_run(argv, opts, M.REALPATH_TIMEOUT_MS)
  if not ok then return nil, out end
  local keys = {}
  for key in out:gmatch("([^%z]*)%z") do keys[#keys + 1] = key end
  if #keys ~= #paths then
    return nil, errors.new("FS_IO_ERROR", string.format("realpath printed %d paths for %d", #keys, #paths))
  end
  return keys
end

function Backend:lstat(path, opts)
  local envd, err = self:_envd()
  if not envd then return nil, err end
  local e, serr = envd:stat(path, copts(opts))
  if not e then return nil, fs_error(serr) end
  return info_of(e, true)
end

function Backend:stat(key, opts)
  local envd, err = self:_envd()
  if not envd then return nil, err end
  local e, serr = envd:stat(key, copts(opts))
  if not e then return nil, fs_error(serr) end
  -- realpath -m leaves a symlink in a key only when it loops: stat(2) says ELOOP
  if e.symlink_target and e.symlink_target == key then
    return nil, errors.new("FS_IO_ERROR", "stat " .. key .. ": too many levels of symbolic links")
  end
  return info_of(e, false)
end

-- realpath and the Stat of the lexical path at once: when that path is not
-- itself a symlink its EntryInfo describes the same inode as Stat(targetKey).
function Backend:locate(display, opts)
  local envd, err = self:_envd()
  if not envd then return nil, err end
  local resolving = async.run(function() return self:realpath({ display }, opts) end)
  local e, serr = envd:stat(display, copts(opts))
  local keys, rerr = resolving:await()
  if not keys then return nil, rerr end
  local key = keys[1]
  if e and not e.symlink_target then return key, info_of(e, false) end
  if not e and serr.code == "not_found" then return key, false end
  local info, ierr = self:stat(key, opts)
  if info then return key, info end
  if ierr.code == "FS_NOT_FOUND" then return key, false end
  return nil, ierr
end

-- One ListDir; children that are symlinks are probed concurrently (resolvable
-- ones by a Stat of envd's resolved target, dangling ones by one realpath).
function Backend:children(key, opts)
  local envd, err = self:_envd()
  if not envd then return nil, err end
  local entries, lerr = envd:list_dir(key, 1, copts(opts))
  if not entries then return nil, fs_error(lerr) end
  local base = key == "/" and "" or key
  local out, linked, dangling = {}, {}, {}
  for i, e in ipairs(entries) do
    local child = base .. "/" .. e.name
    if not e.symlink_target then
      out[i] = { name = e.name, key = child, info = info_of(e, false) }
    elseif e.symlink_target ~= child then
      out[i] = { name = e.name, key = e.symlink_target }
      linked[#linked + 1] = out[i]
    else
      out[i] = { name = e.name, path = child, info = false }
      dangling[#dangling + 1] = out[i]
    end
  end
  local tasks = {}
  for j, item in ipairs(linked) do
    tasks[j] = async.run(function() return self:stat(item.key, opts) end)
  end
  local paths = {}
  for j, item in ipairs(dangling) do paths[j] = item.path end
  local keys, rerr
  if #paths > 0 then keys, rerr = self:realpath(paths, opts) end
  local first
  for j, item in ipairs(linked) do
    local info, serr = tasks[j]:await()
    if info then
      item.info = info
    elseif serr.code == "FS_NOT_FOUND" then
      item.info = false
    else
      first = first or serr
    end
  end
  if first then return nil, first end
  if #paths > 0 and not keys then return nil, rerr end
  for j, item in ipairs(dangling) do
    item.key, item.path = keys[j], nil
  end
  return out
end

function Backend:open(key, opts)
  local envd, err = self:_envd()
  if not envd then return nil, err end
  local r, oerr = envd:open_file(key, copts(opts))
  if not r then return nil, fs_error(oerr) end
  return setmetatable({ _r = r }, Reader)
end

function Backend:writeTemp(path, data, tag, opts)
  local envd, err = self:_envd()
  if not envd then return nil, err end
  local ok, werr = envd:write_file(path, data, { metadata = { ["dsh-version"] = tag }, signal = opts.signal })
  if not ok then return nil, fs_error(werr) end
  return true
end

function Backend:chmod(path, mode, opts)
  local ok, err = self:_run({ "chmod", string.format("%o", mode), "--", path }, opts)
  if not ok then return nil, err end
  return true
end

function Backend:rename(from, to, opts)
  local envd, err = self:_envd()
  if not envd then return nil, err end
  local e, merr = envd:move(from, to, copts(opts))
  if not e then return nil, fs_error(merr) end
  return info_of(e, false)
end

function Backend:remove(path, opts)
  local envd, err = self:_envd()
  if not envd then return nil, err end
  local ok, rerr = envd:remove(path, copts(opts))
  if not ok then return nil, fs_error(rerr) end
  return true
end

-- envd's Remove removes a directory with everything in it (links unfollowed).
Backend.removeTree = Backend.remove

-- envd has no rmdir: the sandbox's own, so a directory that is not empty stays.
function Backend:rmdir(key, opts)
  local ok, err = self:_run({ "rmdir", "--", key }, opts)
  if not ok then return nil, err end
  return true
end

-- MakeDir makes the missing parents too; a directory already there is fine.
function Backend:mkdir(key, opts)
  local envd, err = self:_envd()
  if not envd then return nil, err end
  local e, merr = envd:make_dir(key, copts(opts))
  if not e and merr.code ~= "already_exists" then return nil, fs_error(merr) end
  return true
end

-- Trees ---------------------------------------------------------------------------

M.STDERR_BYTES = 4096 -- what of tar's complaints a failure quotes

-- A reader of the tar stream of a running `tar -c` (its stdout).
local Pack = {}
Pack.__index = Pack

function Pack:read()
  if self._done then return nil, self._err end
  while true do
    local ev, err = self._p:next()
    if not ev then
      self._done, self._err = true, err and fs_error(err) or nil
      return nil, self._err
    end
    if ev.type == "data" then
      if ev.stream == "stdout" then
        if ev.data ~= "" then return ev.data end
      elseif #self._stderr < M.STDERR_BYTES then
        self._stderr = self._stderr .. ev.data:sub(1, M.STDERR_BYTES - #self._stderr)
      end
    else
      self._done, self._exited = true, true
      if ev.exit_code ~= 0 or ev.signal then
        local why = self._stderr:gsub("%s+$", "")
        self._err = errors.new("FS_IO_ERROR", string.format("tar in the sandbox failed (%s)%s",
          ev.signal or ("exit " .. tostring(ev.exit_code)), why ~= "" and (": " .. why) or ""))
        return nil, self._err
      end
      return nil
    end
  end
end

-- Stop: a tar that has not ended is killed (nobody reads what it writes).
function Pack:close()
  if self._closed then return end
  self._closed = true
  if not self._exited then self._envd:send_signal(self._p.pid, "SIGKILL") end
  self._p:close()
end

function Backend:packTree(key, opts)
  local envd, err = self:_envd()
  if not envd then return nil, err end
  local p, serr = envd:start { cmd = "tar", args = { "-c", "-b", "2048", "-f", "-", "-C", key, "." },
    signal = opts.signal }
  if not p then return nil, fs_error(serr) end
  return setmetatable({ _p = p, _envd = envd, _stderr = "" }, Pack)
end

M.UNPACK = [[mkdir -p -- "$1" && exec tar -x -p -f "$2" -C "$1"]]

function Backend:unpackTree(key, source, opts)
  local envd, err = self:_envd()
  if not envd then return nil, err end
  local tmp = (self._e2b.runtimeRoot or "/tmp") .. "/tree-" .. fs.uuid() .. ".tar"
  local ok, werr = envd:write_file(tmp, source, { signal = opts.signal })
  if ok then
    local done, out = self:_run({ "/bin/sh", "-c", M.UNPACK, "dsh-e2b", key, tmp }, opts)
    if not done then ok, werr = nil, errors.new("FS_IO_ERROR", "tar in the sandbox failed: " .. out.message) end
  else
    werr = fs_error(werr)
  end
  envd:remove(tmp)
  if not ok then return nil, werr end
  return true
end

-- Watches -------------------------------------------------------------------------

local EWatch = {}
EWatch.__index = EWatch

-- One read of the stream in flight at a time: an aborted next() leaves it
-- for the next call, so no event is lost.
function EWatch:next(signal)
  if self._closed then return nil end
  local f = self._pending
  if not f then
    f = async.run(function() return self._w:next() end)
    self._pending = f
  end
  local ev, err
  if signal then
    ev, err = async.race_signal(f, signal)
    if signal.aborted then return nil, errors.new("FS_ABORTED", "watch aborted") end
  else
    ev, err = f:await()
  end
  self._pending = nil
  if not ev then
    if self._closed or not err then return nil end
    return nil, fs_error(err)
  end
  return { type = ev.type, name = ev.name }
end

function EWatch:close()
  if self._closed then return end
  self._closed = true
  self._w:close()
end

function Backend:watch(key, o)
  local envd, err = self:_envd()
  if not envd then return nil, err end
  if o.signal and o.signal.aborted then return nil, errors.new("FS_ABORTED", "watch aborted") end
  local w, werr = envd:watch_dir(key, { recursive = o.recursive })
  if not w then return nil, fs_error(werr) end
  return setmetatable({ _w = w }, EWatch)
end

--- A dsh.fs backend over an E2B sandbox owner (ctx.e2b).
function M.backend(e2b)
  return setmetatable({ prefix = "e2b", cwd = e2b.cwd, _e2b = e2b }, Backend)
end

function M.setup(scope)
  local f = fs.new(M.backend(scope.ctx.e2b))
  scope:on_dispose(function() return f:dispose() end)
  return f
end

return M
