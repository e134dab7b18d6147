--- dsh.fs._transfer: trees between this host and the fs world — uploadTree
-- and downloadTree — as one tar stream each way.
--
-- Upload: the host tree is walked and sent as a tar stream
-- (dsh.fs.hosttree) to the backend's unpackTree, which makes it the tree
-- at the destination (fs-e2b: streamed up through POST /files and unpacked
-- by the sandbox's tar; fs-local: unpacked here). Download: the backend's
-- packTree gives the tree at the source as a tar stream (fs-e2b: the
-- sandbox's tar, read from its stdout as it writes), which is made into the
-- host directory by the host's own reader, which trusts nothing in it.
-- Both are byte-exact: contents, names (any bytes), empty directories,
-- symlinks (never followed), hard links, modes (on the host without setuid
-- and setgid), modification times. Sockets, FIFOs and devices are skipped
-- and listed. opts.onProgress({bytes=, totalBytes=, files=, totalFiles=,
-- path=}) is told after each file and every MiB (totals when known: an
-- upload knows them, a download does not).
local errors = require "dsh.errors"
local fe = require "dsh.fs._errors"
local hosttree = require "dsh.fs.hosttree"
local lfs = require "lfs"
local paths = require "dsh.fs._paths"

local M = {}
local MOD = "dsh.fs"
M.PIECE_BYTES = 256 * 1024

local function check(method, opts)
  if opts.onProgress ~= nil and type(opts.onProgress) ~= "function" then
    errors.misuse(MOD, "%s: opts.onProgress must be a function", method)
  end
end

-- An absolute host path for dir (relative: to this process's directory).
local function host_path(method, dir)
  if type(dir) ~= "string" or dir == "" or dir:find("\0", 1, true) then
    errors.misuse(MOD, "%s: the host directory must be a non-empty path string", method)
  end
  if dir:sub(1, 1) ~= "/" then dir = lfs.currentdir() .. "/" .. dir end
  return paths.normalize(dir)
end

local function backend_can(fs, method, name)
  if type(fs._b[name]) ~= "function" then
    return nil, errors.new("FS_IO_ERROR", string.format("%s: %s: the %s backend cannot move trees", MOD, method,
      fs.kind))
  end
  return true
end

-- The directory at key, or nil, err (missing, or not a directory); false when
-- nothing is there and missing is allowed.
local function dir_at(fs, op, display, key, opts, missing_ok)
  local info, err = fs._b:stat(key, opts)
  if not info then
    if err.code == "FS_NOT_FOUND" and not fe.is_aborted(opts) then
      if missing_ok then return false end
      return nil, fe.missing(display)
    end
    return nil, fe.map(op, display, err, opts.signal)
  end
  if info.type ~= "directory" then return nil, fe.not_directory(display) end
  return true
end

-- progress(bytes, files, rel) for opts.onProgress. A hook that raises stops
-- the transfer (box.raised holds its error, raised again once everything
-- the transfer opened is closed): it is the caller's bug, not an I/O failure.
local function reporter(opts, totals, box)
  local fn = opts.onProgress
  if not fn then return nil end
  return function(bytes, files, rel)
    local ok, err = pcall(fn, { bytes = bytes, files = files, totalBytes = totals and totals.bytes,
      totalFiles = totals and totals.files, path = rel })
    if not ok then
      box.raised = err
      error(err, 0)
    end
  end
end

--- Copy the host directory hostDir into path (made with its parents; an
--- existing directory is merged into, its files replaced).
---@return dsh.fs.TreeSummary|nil, dsh.Error|nil
function M.upload(fs, hostDir, path, opts)
  check("uploadTree", opts)
  local host = host_path("uploadTree", hostDir)
  local op = "upload to"
  local ok, cerr = backend_can(fs, "uploadTree", "unpackTree")
  if not ok then return nil, cerr end
  local display, key = paths.resolve(fs, op, "uploadTree", path, opts)
  if not display then return nil, key end
  local there, derr = dir_at(fs, op, display, key, opts, true)
  if there == nil then return nil, derr end
  local entries, skipped, totals = hosttree.walk(host)
  if not entries then return nil, skipped end
  local box = {}
  -- pieces of 256 KiB: fewer, larger writes for a tree of small files
  local src = hosttree.coalesce(hosttree.source(host, entries, reporter(opts, totals, box), opts.signal),
    M.PIECE_BYTES)
  local guarded = function()
    if box.raised then return nil, errors.new("FS_ABORTED", "onProgress raised") end
    local ok2, chunk, err = pcall(src)
    if not ok2 then return nil, errors.new("FS_ABORTED", "onProgress raised") end
    return chunk, err
  end
  local uok, uerr = fs._b:unpackTree(key, guarded, opts)
  if box.raised then error(box.raised, 0) end
  if not uok then
    if uerr.code == "FS_NOT_FOUND" or uerr.code == "FS_NOT_DIRECTORY" then uerr.code = "FS_IO_ERROR" end
    return nil, fe.map(op, display, uerr, opts.signal)
  end
  local sum = { files = totals.files, bytes = totals.bytes, directories = 0, symlinks = 0, hardlinks = 0,
    skipped = skipped }
  for _, e in ipairs(entries) do
    if e.type == "directory" then
      sum.directories = sum.directories + 1
    elseif e.type == "symlink" then
      sum.symlinks = sum.symlinks + 1
    elseif e.type == "hardlink" then
      sum.hardlinks = sum.hardlinks + 1
    end
  end
  return sum
end

--- Copy the directory at path into the host directory hostDir (made with
--- its parents; an existing one is merged into).
---@return dsh.fs.TreeSummary|nil, dsh.Error|nil
function M.download(fs, path, hostDir, opts)
  check("downloadTree", opts)
  local host = host_path("downloadTree", hostDir)
  local op = "download"
  local ok, cerr = backend_can(fs, "downloadTree", "packTree")
  if not ok then return nil, cerr end
  local display, key = paths.resolve(fs, op, "downloadTree", path, opts)
  if not display then return nil, key end
  local there, derr = dir_at(fs, op, display, key, opts, false)
  if not there then return nil, derr end
  local reader, rerr = fs._b:packTree(key, opts)
  if not reader then return nil, fe.map(op, display, rerr, opts.signal) end
  local box = {}
  local res = { pcall(hosttree.extract, host, function() return reader:read() end,
    { progress = reporter(opts, nil, box), signal = opts.signal }) }
  reader:close()
  if not res[1] then error(box.raised or res[2], 0) end
  local sum, xerr = res[2], res[3]
  if not sum then
    if fe.is_aborted(opts) then return nil, fe.aborted(op) end
    return nil, errors.new(xerr.code, string.format('cannot download "%s" to "%s": %s', display, host,
      tostring(xerr.message)), { cause = xerr })
  end
  return sum
end

return M
