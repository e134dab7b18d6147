--- dsh.fs: the filesystem seam (ctx.fs), written once over a small backend.
--
-- Everything the model-facing tools rely on lives in this seam: path
-- resolution and versions (dsh.fs._paths), reads and text detection
-- (dsh.fs._read, dsh.fs._text), guarded writes and edits with their atomic
-- commit and per-file serialisation (dsh.fs._mutate), directories (makeDir,
-- remove, move: dsh.fs._tree), whole trees to and from this host
-- (uploadTree, downloadTree: dsh.fs._transfer) and file watches (watch:
-- dsh.fs._watch), abort checks and the failure words (dsh.fs._errors).
-- This file is the public surface: the class, its methods and the backend
-- contract. A backend (providers/fs_local,
-- providers/fs_e2b) only moves bytes and metadata; see dsh.FsBackend below.
--
-- Paths: displayPath is the POSIX resolution of the argument against opts.cwd
-- or the backend's cwd (lexical, `..` included); targetKey is `realpath -m` of
-- it (symlinks resolved, need not exist). Versions are digests of a file's
-- metadata (never its content), so any external change alters them.
-- Failures return nil, err with the reference's FS_* codes; misuse raises.
--
-- Boundaries: paths are not confined. A write may leave cwd (`../x`, an
-- absolute path, a symlink pointing out) but never the world of the backend:
-- with fs-e2b that is the sandbox, whose system directories are read-only.
-- A host that keeps a model inside a workspace checks each path first with
-- fs:contains(workspace, path), which resolves `..` and symlinks as a write
-- would.
local errors = require "dsh.errors"
local fe = require "dsh.fs._errors"
local mutate = require "dsh.fs._mutate"
local paths = require "dsh.fs._paths"
local read = require "dsh.fs._read"
local schema = require "dsh.schema"
local transfer = require "dsh.fs._transfer"
local tree = require "dsh.fs._tree"
local watch = require "dsh.fs._watch"

local M = {}
local MOD = "dsh.fs"

M.CHUNK_BYTES = 64 * 1024
M.NEW_FILE_MODE = mutate.NEW_FILE_MODE
M.normalize = paths.normalize
M.uuid = paths.uuid
--- The backend contract: the functions every backend provides (dsh.FsBackend
--- below says what each does; locate, children, packTree, unpackTree and
--- watch are optional, names is needed unless children is there).
M.BACKEND = { "realpath", "lstat", "stat", "open", "writeTemp", "chmod", "rename", "remove", "mkdir", "rmdir",
  "removeTree" }
--- The failure codes a backend may return (code -> meaning); see dsh.fs._errors.
M.BACKEND_CODES = fe.BACKEND_CODES
--- Codes from below a backend that reach the caller as they are (SANDBOX_GONE,
-- SANDBOX_UNRESPONSIVE, DISPOSED).
M.PASSED_CODES = fe.PASSED_CODES

---@class dsh.FsInfo                 what a backend reports about one path
---@field type "file"|"directory"|"symlink"|"other"
---@field size number|nil
---@field mode integer               permission bits
---@field mtime string|number|nil
---@field symlinkTarget string|nil
---@field identity string|nil        backend-specific (inode, dsh-version tag ...)

-- A backend returns values or nil, err; err.code is one of BACKEND_CODES
-- (FS_NOT_FOUND: nothing is there, FS_PERMISSION_DENIED, FS_ABORTED,
-- FS_IO_ERROR), each backend mapping its own world's words to them, and
-- err.message is kept in the seam's messages.
---@class dsh.FsBackend
---@field prefix string   version prefix ("local", "e2b")
---@field cwd string      absolute default directory
---@field realpath fun(self, paths:string[], opts:table):string[]|nil, dsh.Error?  `realpath -m` of each
---@field lstat fun(self, path:string, opts:table):dsh.FsInfo|nil, dsh.Error?  the path itself
---@field stat fun(self, key:string, opts:table):dsh.FsInfo|nil, dsh.Error?  a targetKey (follows links)
---@field names fun(self, key:string, opts:table):string[]|nil, dsh.Error?  child names of a directory
---@field open fun(self, key:string, opts:table):table|nil, dsh.Error?  reader: read(), close()
---@field writeTemp fun(self, path:string, data:string, tag:string, opts:table):true|nil, dsh.Error?
---@field chmod fun(self, path:string, mode:integer, opts:table):true|nil, dsh.Error?
---@field rename fun(self, from:string, to:string, opts:table):dsh.FsInfo|nil, dsh.Error?  `to` afterwards;
---                                      makes to's missing parents; replaces a file or an empty directory
---@field remove fun(self, path:string, opts:table):true|nil, dsh.Error?  a file or symlink itself
---@field mkdir fun(self, key:string, opts:table):true|nil, dsh.Error?  with missing parents; a directory is fine
---@field rmdir fun(self, key:string, opts:table):true|nil, dsh.Error?  an empty directory (else FS_DIRECTORY_NOT_EMPTY)
---@field removeTree fun(self, key:string, opts:table):true|nil, dsh.Error?  a directory and all below, links unfollowed
---@field locate fun(self, display:string, opts:table):string|nil, dsh.FsInfo|false|dsh.Error  optional
---@field children fun(self, key:string, opts:table):table[]|nil, dsh.Error?  optional: {name, key, info}
---@field packTree fun(self, key:string, opts:table):table|nil, dsh.Error?  optional: a reader (read(), close())
---                                      of a tar stream of the directory key (members relative to it, "./" first)
---@field unpackTree fun(self, key:string, source:function, opts:table):true|nil, dsh.Error?  optional: make
---                                      the tar stream source() yields the tree at key (made with its parents)
---@field watch fun(self, key:string, o:{recursive:boolean, signal:table|nil}):table|nil, dsh.Error?  optional:
---                                      a watch of the directory key: next(signal) → {type, name} | nil | nil, err;
---                                      close()

---@class dsh.FsOpts
---@field cwd string|nil             directory relative paths resolve against
---@field signal dsh.AbortSignal|nil checked between steps; aborts in-flight transfers
---@field onStep fun(step:string, detail:table)|nil  "stat", "read", "written", "chmodded", "renamed"

---@class dsh.Fs
---@field kind string   "local" or "e2b": the prefix of every version
---@field cwd string    the directory relative paths resolve against by default
local FS = {}
FS.__index = FS
FS.__tostring = function(f)
  return "dsh.fs(" .. f.kind .. ", cwd " .. f.cwd .. (f._disposed and ", disposed" or "") .. ")"
end

local function disposed(method)
  return errors.new("DISPOSED", MOD .. ": " .. method .. ": ctx.fs is disposed")
end

-- Paths -----------------------------------------------------------------------

--- Resolve path: {displayPath=, targetKey=}.
---@param path string
---@param opts dsh.FsOpts|nil
---@return {displayPath:string, targetKey:string}|nil, dsh.Error?
function FS:resolve(path, opts)
  if self._disposed then return nil, disposed("resolve") end
  opts = fe.check_opts("resolve", opts)
  local display, key = paths.resolve(self, "resolve", "resolve", path, opts)
  if not display then return nil, key end
  return { displayPath = display, targetKey = key }
end

--- The path a process in the same world sees for path (its displayPath).
---@return string|nil, dsh.Error?
function FS:processPath(path, opts)
  if self._disposed then return nil, disposed("processPath") end
  opts = fe.check_opts("processPath", opts)
  return paths.display(self, "processPath", path, opts)
end

--- file:// URL of path's displayPath, each segment percent-encoded (RFC 3986).
---@return string|nil, dsh.Error?
function FS:fileUrl(path, opts)
  if self._disposed then return nil, disposed("fileUrl") end
  opts = fe.check_opts("fileUrl", opts)
  local display, err = paths.display(self, "fileUrl", path, opts)
  if not display then return nil, err end
  return paths.file_url(display)
end

--- True when path, after resolution (`..` and symlinks), is root or inside it.
---@return boolean|nil, dsh.Error?
function FS:contains(root, path, opts)
  if self._disposed then return nil, disposed("contains") end
  opts = fe.check_opts("contains", opts)
  return paths.contains(self, root, path, opts)
end

-- Reads -----------------------------------------------------------------------

---@class dsh.FsStat
---@field type "file"|"directory"|"symlink"|"other"
---@field size number|nil   files (and, from lstat, symlinks) only
---@field version string

--- Metadata of what path points to; nil (no error) when nothing is there.
---@return dsh.FsStat|nil, dsh.Error?
function FS:stat(path, opts)
  if self._disposed then return nil, disposed("stat") end
  return read.stat(self, path, fe.check_opts("stat", opts))
end

--- Metadata of path itself (a symlink is "symlink"); nil when missing.
---@return dsh.FsStat|nil, dsh.Error?
function FS:lstat(path, opts)
  if self._disposed then return nil, disposed("lstat") end
  return read.lstat(self, path, fe.check_opts("lstat", opts))
end

---@class dsh.FsDirEntry
---@field name string
---@field type "file"|"directory"|"other"
---@field target string     the child's targetKey
---@field size number|nil
---@field version string|nil  nil for a child that vanished while listing

--- Direct children of a directory, sorted by name in byte order.
---@return dsh.FsDirEntry[]|nil, dsh.Error?
function FS:listDir(path, opts)
  if self._disposed then return nil, disposed("listDir") end
  return read.list_dir(self, path, fe.check_opts("listDir", opts))
end

--- A text stream of a regular file: :next() pieces (whole code points),
-- :close() to stop early.
---@return dsh.FsTextStream|nil, dsh.Error?
function FS:readTextStream(path, opts)
  if self._disposed then return nil, disposed("readTextStream") end
  return read.text_stream(self, "readTextStream", path, fe.check_opts("readTextStream", opts))
end

--- The whole text of a regular file: {text=, version=}.
---@return {text:string, version:string}|nil, dsh.Error?
function FS:readText(path, opts)
  if self._disposed then return nil, disposed("readText") end
  return read.text(self, path, fe.check_opts("readText", opts))
end

--- The bytes of a regular file: {data=, version=}.
---@return {data:string, version:string}|nil, dsh.Error?
function FS:readBytes(path, opts)
  if self._disposed then return nil, disposed("readBytes") end
  return read.bytes(self, path, fe.check_opts("readBytes", opts))
end

-- Mutations -------------------------------------------------------------------

--- Write content verbatim to path (atomically).
---@param content string
---@param opts dsh.FsWriteOpts|nil
---@return dsh.FsWriteResult|nil, dsh.Error?
function FS:writeText(path, content, opts)
  if self._disposed then return nil, disposed("writeText") end
  return mutate.write_text(self, path, content, opts)
end

--- Write bytes verbatim to path (atomically): {operation=, version=}.
---@param data string
---@param opts dsh.FsWriteOpts|nil
---@return {operation:string, version:string}|nil, dsh.Error?
function FS:writeBytes(path, data, opts)
  if self._disposed then return nil, disposed("writeBytes") end
  return mutate.write_bytes(self, path, data, opts)
end

--- Replace oldString by newString in a text file (matching on LF-normalised
-- text): {operation="update", version=, before=, after=, replacements=}.
---@param edit dsh.FsEdit
---@return table|nil, dsh.Error?
function FS:editText(path, edit, opts)
  if self._disposed then return nil, disposed("editText") end
  return mutate.edit_text(self, path, edit, opts)
end

--- Make a directory and its missing parents: {created=}; an existing
-- directory is success (created = false), anything else there is FS_NOT_DIRECTORY.
---@param opts dsh.FsOpts|nil
---@return dsh.FsMakeDirResult|nil, dsh.Error?
function FS:makeDir(path, opts)
  if self._disposed then return nil, disposed("makeDir") end
  return tree.make_dir(self, path, fe.check_opts("makeDir", opts))
end

--- Remove what path names (a symlink itself, not its target): true. A
-- directory with entries needs opts.recursive, else FS_DIRECTORY_NOT_EMPTY;
-- nothing there is FS_NOT_FOUND.
---@param opts {recursive: boolean|nil, cwd: string|nil, signal: dsh.AbortSignal|nil}|nil
---@return true|nil, dsh.Error?
function FS:remove(path, opts)
  if self._disposed then return nil, disposed("remove") end
  return tree.remove(self, path, fe.check_opts("remove", opts))
end

--- Rename from to `to` (making to's missing parents): {type=, version=}. An
-- existing `to` is FS_ALREADY_EXISTS unless opts.overwrite, which replaces a
-- file by a file (or anything not a directory) and an empty directory by a
-- directory.
---@param opts {overwrite: boolean|nil, cwd: string|nil, signal: dsh.AbortSignal|nil}|nil
---@return dsh.FsMoveResult|nil, dsh.Error?
function FS:move(from, to, opts)
  if self._disposed then return nil, disposed("move") end
  return tree.move(self, from, to, fe.check_opts("move", opts))
end

-- Trees and watches -------------------------------------------------------------

---@class dsh.FsTreeOpts: dsh.FsOpts
---@field onProgress fun(p: dsh.FsProgress)|nil  after each file and every MiB

---@class dsh.FsProgress
---@field bytes integer            file bytes moved so far
---@field files integer            files moved so far
---@field totalBytes integer|nil   when known (uploads)
---@field totalFiles integer|nil
---@field path string              the file (relative to the tree)

--- Copy the host directory hostDir (an absolute path on this machine, or
-- relative to this process's directory) into path, as a tar stream:
-- contents, names, empty directories, symlinks, hard links, modes and times
-- exactly (sockets, FIFOs and devices are skipped and listed). path is made
-- with its parents; an existing directory is merged into.
---@param opts dsh.FsTreeOpts|nil
---@return dsh.fs.TreeSummary|nil, dsh.Error?
function FS:uploadTree(hostDir, path, opts)
  if self._disposed then return nil, disposed("uploadTree") end
  return transfer.upload(self, hostDir, path, fe.check_opts("uploadTree", opts))
end

--- Copy the directory at path into the host directory hostDir (made with its
-- parents; an existing one is merged into), as a tar stream read by the
-- host's own reader, which trusts nothing in it: no member is written
-- outside hostDir or through a symlink, setuid and setgid bits are dropped.
---@param opts dsh.FsTreeOpts|nil
---@return dsh.fs.TreeSummary|nil, dsh.Error?
function FS:downloadTree(path, hostDir, opts)
  if self._disposed then return nil, disposed("downloadTree") end
  return transfer.download(self, path, hostDir, fe.check_opts("downloadTree", opts))
end

--- Watch the directory at path (opts.recursive: and every directory below
-- it): a watch whose next(signal) yields {type, name, path} events.
---@param opts {recursive: boolean|nil, cwd: string|nil, signal: dsh.AbortSignal|nil}|nil
---@return dsh.FsWatch|nil, dsh.Error?
function FS:watch(path, opts)
  if self._disposed then return nil, disposed("watch") end
  return watch.watch(self, path, fe.check_opts("watch", opts))
end

--- Every later call returns nil, DISPOSED (the provider's disposal calls
-- it); every watch is closed.
function FS:dispose()
  self._disposed = true
  for w in pairs(self._watches) do w:close() end
  return true
end

--- A filesystem over backend b.
---@param b dsh.FsBackend
---@return dsh.Fs
function M.new(b)
  schema.backend(MOD, "new", b, M.BACKEND)
  errors.check(MOD, "new: backend.prefix", b.prefix, "string")
  errors.check(MOD, "new: backend.cwd", b.cwd, "string")
  if b.cwd:sub(1, 1) ~= "/" then errors.misuse(MOD, "new: backend.cwd must be absolute: %s", b.cwd) end
  if not b.children then errors.check(MOD, "new: backend.names", b.names, "function") end
  return setmetatable({ kind = b.prefix, cwd = paths.normalize(b.cwd), _b = b, _locks = {}, _commits = 0,
    _watches = {} }, FS)
end

M.FS = FS
return M
