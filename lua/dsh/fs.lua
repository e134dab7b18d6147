--- dsh.fs: the filesystem seam (ctx.fs), written once over a small backend.
--
-- Everything the model-facing tools rely on lives here: path resolution,
-- versions, text detection, guarded writes and edits, the atomic commit
-- (temp file, chmod, rename), abort checks, error mapping and per-file
-- serialisation of mutations. A backend (providers/fs_local, providers/fs_e2b)
-- only moves bytes and metadata; see dsh.FsBackend below.
--
-- Paths: displayPath is the POSIX resolution of the argument against opts.cwd
-- or the backend's cwd (lexical, `..` included); targetKey is `realpath -m` of
-- it (symlinks resolved, need not exist). Versions are digests of a file's
-- metadata (never its content), so any external change alters them.
-- Failures return nil, err with the reference's FS_* codes; misuse raises.
local async = require "dsh.async"
local errors = require "dsh.errors"
local sha256 = require "dsh.sha256"
local sysutil = require "dsh.sysutil"
local text = require "dsh.fs._text"
local utf8 = require "dsh.utf8"
local bit = require "bit"

local M = {}
local MOD = "dsh.fs"

M.CHUNK_BYTES = 64 * 1024
M.NEW_FILE_MODE = 384 -- 0600

---@class dsh.FsInfo                 what a backend reports about one path
---@field type "file"|"directory"|"symlink"|"other"
---@field size number|nil
---@field mode integer               permission bits
---@field mtime string|number|nil
---@field symlinkTarget string|nil
---@field identity string|nil        backend-specific (inode, dsh-version tag ...)

-- A backend returns values or nil, err; err.code "not_found" means nothing is
-- there, "canceled" an abort, and err.message is kept in the seam's messages.
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
---@field rename fun(self, from:string, to:string, opts:table):dsh.FsInfo|nil, dsh.Error?  `to` afterwards
---@field remove fun(self, path:string, opts:table):true|nil, dsh.Error?
---@field locate fun(self, display:string, opts:table):string|nil, dsh.FsInfo|false|dsh.Error  optional
---@field children fun(self, key:string, opts:table):table[]|nil, dsh.Error?  optional: {name, key, info}

---@class dsh.FsOpts
---@field cwd string|nil             directory relative paths resolve against
---@field signal dsh.AbortSignal|nil checked between steps; aborts in-flight transfers
---@field onStep fun(step:string, detail:table)|nil  "stat", "read", "written", "chmodded", "renamed"

---@class dsh.Fs
---@field kind string   "local" or "e2b": the prefix of every version
---@field cwd string    the directory relative paths resolve against by default
local FS = {}
FS.__index = FS
FS.__tostring = function(f) return "dsh.fs(" .. f.kind .. ", cwd " .. f.cwd .. ")" end

-- Errors ----------------------------------------------------------------------

local function E(code, msg, fields)
  return errors.new(code, msg, fields)
end

local function aborted(op)
  return E("FS_ABORTED", op .. " aborted")
end

local function is_abort(err)
  local c = err.code
  return c == "canceled" or c == "ABORTED" or c == "aborted" or c == "FS_ABORTED"
end

--- The seam's error for a failed backend call of operation op (§2.2 mapping).
local function map(op, display, err, signal)
  if signal and signal.aborted then return aborted(op) end
  if type(err) ~= "table" then err = { message = tostring(err) } end
  if is_abort(err) then return aborted(op) end
  local detail = tostring(err.message or err.code or "unknown error")
  local low = detail:lower()
  local code = "FS_IO_ERROR"
  if err.code == "not_found" then
    code = "FS_NOT_FOUND"
  elseif err.code == "permission_denied" or low:find("permission denied", 1, true)
    or low:find("operation not permitted", 1, true) then
    code = "FS_PERMISSION_DENIED"
  end
  return E(code, string.format('cannot %s "%s": %s', op, display, detail), { cause = err })
end

local function missing(display)
  return E("FS_NOT_FOUND", string.format('"%s" does not exist', display))
end

-- Options and paths -----------------------------------------------------------

local function check_opts(op, opts)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    error(string.format("%s: %s: opts must be a table, got %s", MOD, op, type(opts)), 3)
  end
  if opts.signal ~= nil and not async.is_signal(opts.signal) then
    error(string.format("%s: %s: opts.signal must be a dsh.async signal", MOD, op), 3)
  end
  if opts.cwd ~= nil and type(opts.cwd) ~= "string" then
    error(string.format("%s: %s: opts.cwd must be a string, got %s", MOD, op, type(opts.cwd)), 3)
  end
  if opts.onStep ~= nil and type(opts.onStep) ~= "function" then
    error(string.format("%s: %s: opts.onStep must be a function", MOD, op), 3)
  end
  return opts
end

local function normalize(abs)
  local out = {}
  for seg in abs:gmatch("[^/]+") do
    if seg == ".." then
      out[#out] = nil
    elseif seg ~= "." then
      out[#out + 1] = seg
    end
  end
  return "/" .. table.concat(out, "/")
end
M.normalize = normalize

--- POSIX resolve of path against cwd (both may be relative to base).
local function resolve_lexical(base, cwd, path)
  if path:sub(1, 1) == "/" then return normalize(path) end
  if cwd and cwd:sub(1, 1) ~= "/" then cwd = base .. "/" .. cwd end
  return normalize((cwd or base) .. "/" .. path)
end

function FS:_display(op, path, opts)
  if type(path) ~= "string" then
    error(string.format("%s: %s: path must be a string, got %s", MOD, op, type(path)), 3)
  end
  if not path:find("%S") then return nil, E("FS_NOT_FOUND", "file_path must be a non-empty string") end
  if path:find("\0", 1, true) then return nil, E("FS_NOT_FOUND", "file_path must not contain a NUL byte") end
  return resolve_lexical(self.cwd, opts.cwd, path)
end

local function split(key)
  local dir, base = key:match("^(.*)/([^/]*)$")
  return dir or "", base or key
end

local function uuid()
  local b = { sysutil.random_bytes(16):byte(1, 16) }
  b[7] = bit.bor(bit.band(b[7], 0x0f), 0x40)
  b[9] = bit.bor(bit.band(b[9], 0x3f), 0x80)
  local hex = string.format(string.rep("%02x", 16), unpack(b))
  return table.concat({ hex:sub(1, 8), hex:sub(9, 12), hex:sub(13, 16), hex:sub(17, 20), hex:sub(21) }, "-")
end
M.uuid = uuid

-- Versions --------------------------------------------------------------------

local function field(v)
  local s = v == nil and "" or tostring(v)
  return #s .. ":" .. s
end

--- Deterministic digest of [identity, path, type, size, mode, mtime, symlinkTarget].
function FS:_version(info, path)
  return self.kind .. ":" .. sha256.hex(field(info.identity) .. field(path) .. field(info.type)
    .. field(info.size) .. field(info.mode) .. field(info.mtime) .. field(info.symlinkTarget))
end

function FS:_public(info, path)
  local sized = info.type == "file" or info.type == "symlink"
  return { type = info.type, size = sized and info.size or nil, version = self:_version(info, path) }
end

-- Steps, hooks and aborts -----------------------------------------------------

-- Report a step to opts.onStep; a hook that raises propagates (after the
-- caller's cleanup), since it is the caller's bug, not an I/O failure.
local function step(opts, name, detail)
  if opts.onStep then opts.onStep(name, detail or {}) end
end

local function is_aborted(opts)
  return opts.signal ~= nil and opts.signal.aborted
end

-- Resolution and metadata -----------------------------------------------------

function FS:_resolve(op, path, opts)
  local display, err = self:_display(op, path, opts)
  if not display then return nil, err end
  if is_aborted(opts) then return nil, aborted(op) end
  local keys, rerr = self._b:realpath({ display }, opts)
  if not keys then return nil, map(op, display, rerr, opts.signal) end
  return display, keys[1]
end

-- display, key, info|false (false: nothing there) or nil, err.
function FS:_locate(op, path, opts)
  local display, err = self:_display(op, path, opts)
  if not display then return nil, err end
  if is_aborted(opts) then return nil, aborted(op) end
  local b = self._b
  local key, info
  if b.locate then
    key, info = b:locate(display, opts)
    if not key then return nil, map(op, display, info, opts.signal) end
  else
    local keys, rerr = b:realpath({ display }, opts)
    if not keys then return nil, map(op, display, rerr, opts.signal) end
    key = keys[1]
    local serr
    info, serr = b:stat(key, opts)
    if not info then
      if serr.code ~= "not_found" then return nil, map(op, display, serr, opts.signal) end
      info = false
    end
  end
  if is_aborted(opts) then return nil, aborted(op) end
  return display, key, info
end

--- Resolve path: {displayPath=, targetKey=}.
---@param path string
---@param opts dsh.FsOpts|nil
---@return {displayPath:string, targetKey:string}|nil, dsh.Error?
function FS:resolve(path, opts)
  opts = check_opts("resolve", opts)
  local display, key = self:_resolve("resolve", path, opts)
  if not display then return nil, key end
  return { displayPath = display, targetKey = key }
end

---@class dsh.FsStat
---@field type "file"|"directory"|"symlink"|"other"
---@field size number|nil   files (and, from lstat, symlinks) only
---@field version string

--- Metadata of what path points to; nil (no error) when nothing is there.
---@return dsh.FsStat|nil, dsh.Error?
function FS:stat(path, opts)
  opts = check_opts("stat", opts)
  local display, key, info = self:_locate("stat", path, opts)
  if not display then return nil, key end
  if not info then return nil end
  return self:_public(info, key)
end

--- Metadata of path itself (a symlink is "symlink"); nil when missing.
---@return dsh.FsStat|nil, dsh.Error?
function FS:lstat(path, opts)
  opts = check_opts("lstat", opts)
  local display, err = self:_display("lstat", path, opts)
  if not display then return nil, err end
  if is_aborted(opts) then return nil, aborted("lstat") end
  local info, lerr = self._b:lstat(display, opts)
  if not info then
    if lerr.code == "not_found" and not is_aborted(opts) then return nil end
    return nil, map("lstat", display, lerr, opts.signal)
  end
  if is_aborted(opts) then return nil, aborted("lstat") end
  return self:_public(info, display)
end

-- The default child listing: names, one realpath batch, one stat each.
function FS:_children(key, opts)
  local names, err = self._b:names(key, opts)
  if not names then return nil, err end
  local paths = {}
  for i, name in ipairs(names) do paths[i] = (key == "/" and "" or key) .. "/" .. name end
  local keys, rerr = self._b:realpath(paths, opts)
  if not keys then return nil, rerr end
  local out = {}
  for i, name in ipairs(names) do
    local info, serr = self._b:stat(keys[i], opts)
    if not info and serr.code ~= "not_found" then return nil, serr end
    out[i] = { name = name, key = keys[i], info = info or false }
  end
  return out
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
  opts = check_opts("listDir", opts)
  local display, key, info = self:_locate("list", path, opts)
  if not display then return nil, key end
  if not info then return nil, missing(display) end
  if info.type ~= "directory" then
    return nil, E("FS_NOT_DIRECTORY", string.format('"%s" is not a directory', display))
  end
  local kids, err
  if self._b.children then
    kids, err = self._b:children(key, opts)
  else
    kids, err = self:_children(key, opts)
  end
  if not kids then return nil, map("list", display, err, opts.signal) end
  if is_aborted(opts) then return nil, aborted("list") end
  local out = {}
  for i, kid in ipairs(kids) do
    if kid.info then
      local pub = self:_public(kid.info, kid.key)
      out[i] = { name = kid.name, type = pub.type, target = kid.key, size = pub.size, version = pub.version }
    else
      out[i] = { name = kid.name, type = "other", target = kid.key }
    end
  end
  -- LuaJIT compares strings bytewise (memcmp order), never by locale.
  table.sort(out, function(a, b) return a.name < b.name end)
  return out
end

-- Reads -----------------------------------------------------------------------

-- display, key, info, reader of a regular file, or nil, err.
function FS:_open(op, path, opts)
  local display, key, info = self:_locate(op, path, opts)
  if not display then return nil, key end
  if not info then return nil, missing(display) end
  if info.type ~= "file" then
    return nil, E("FS_NOT_REGULAR_FILE", string.format('"%s" is not a regular file', display))
  end
  step(opts, "stat", { targetKey = key })
  if is_aborted(opts) then return nil, aborted(op) end
  local reader, err = self._b:open(key, opts)
  if not reader then return nil, map(op, display, err, opts.signal) end
  return display, key, info, reader
end

---@class dsh.FsTextStream
---@field version string
---@field displayPath string
local TextStream = {}
TextStream.__index = TextStream
TextStream.__tostring = function(s)
  local state = s._closed and ", closed" or s._done and ", ended" or ""
  return "dsh.fs.text_stream(" .. s.displayPath .. state .. ")"
end

function TextStream:_fail(err)
  self._err = err
  self._reader:close()
  return nil, err
end

--- The next piece of text (whole code points only), nil at the end, or nil, err.
-- Nothing is released before the first SAMPLE_BYTES bytes were checked for NUL.
---@return string|nil, dsh.Error?
function TextStream:next()
  if self._closed then error(MOD .. ": next: the stream is closed", 2) end
  if self._err then return nil, self._err end
  while true do
    if #self._ready > 0 and (self._sampled or self._eof) then
      local out = table.concat(self._ready)
      self._ready = {}
      return out
    end
    if self._eof then
      self._done = true
      return nil
    end
    if is_aborted(self._opts) then return self:_fail(aborted("read")) end
    local chunk, err = self._reader:read()
    if err or (chunk == nil and is_aborted(self._opts)) then
      return self:_fail(map("read", self.displayPath, err or {}, self._opts.signal))
    end
    if chunk == nil then
      local _, ferr = self._utf8:finish()
      if ferr then
        return self:_fail(E("FS_NOT_TEXT", text.describe(self.displayPath, { kind = "truncated" })))
      end
      self._eof = true
      self._reader:close()
    elseif #chunk > 0 then
      if not self._sampled then
        local want = text.SAMPLE_BYTES - self._seen
        local nul = chunk:find("\0", 1, true)
        if nul and nul <= want then
          return self:_fail(E("FS_NOT_TEXT", text.describe(self.displayPath,
            { kind = "binary", offset = self._seen + nul - 1 })))
        end
        self._seen = self._seen + math.min(#chunk, want)
        self._sampled = self._seen >= text.SAMPLE_BYTES
      end
      local piece, uerr = self._utf8:feed(chunk)
      if not piece then
        return self:_fail(E("FS_NOT_TEXT", text.describe(self.displayPath, {}), { cause = uerr }))
      end
      if #piece > 0 then self._ready[#self._ready + 1] = piece end
    end
  end
end

--- Stop reading; cancels the underlying transfer. Idempotent.
function TextStream:close()
  if self._closed then return end
  self._closed = true
  self._reader:close()
end

--- A text stream of a regular file: :next() pieces, :close() to stop early.
---@return dsh.FsTextStream|nil, dsh.Error?
function FS:readTextStream(path, opts)
  opts = check_opts("readTextStream", opts)
  local display, key, info, reader = self:_open("read", path, opts)
  if not display then return nil, key end
  return setmetatable({
    displayPath = display, targetKey = key, version = self:_version(info, key),
    _reader = reader, _opts = opts, _utf8 = utf8.stream(), _seen = 0, _sampled = false, _ready = {},
  }, TextStream)
end

--- The whole text of a regular file: {text=, version=}.
---@return {text:string, version:string}|nil, dsh.Error?
function FS:readText(path, opts)
  opts = check_opts("readText", opts)
  local s, err = self:readTextStream(path, opts)
  if not s then return nil, err end
  local parts = {}
  while true do
    local piece, perr = s:next()
    if not piece then
      s:close()
      if perr then return nil, perr end
      break
    end
    parts[#parts + 1] = piece
  end
  return { text = table.concat(parts), version = s.version }
end

-- Reads every byte of an open reader (closing it).
local function drain(reader)
  local parts = {}
  while true do
    local chunk, err = reader:read()
    if not chunk then
      reader:close()
      if err then return nil, err end
      return table.concat(parts)
    end
    parts[#parts + 1] = chunk
  end
end

--- The bytes of a regular file: {data=, version=}.
---@return {data:string, version:string}|nil, dsh.Error?
function FS:readBytes(path, opts)
  opts = check_opts("readBytes", opts)
  local display, key, info, reader = self:_open("read", path, opts)
  if not display then return nil, key end
  local data, err = drain(reader)
  if not data then return nil, map("read", display, err, opts.signal) end
  return { data = data, version = self:_version(info, key) }
end

require("dsh.fs._mutate").mixin(FS, {
  E = E, map = map, aborted = aborted, missing = missing, step = step, is_aborted = is_aborted,
  split = split, uuid = uuid, drain = drain, check_opts = check_opts, NEW_FILE_MODE = M.NEW_FILE_MODE,
})

-- Paths for other worlds ------------------------------------------------------

--- The path a process in the same world sees for path (its displayPath).
---@return string|nil, dsh.Error?
function FS:processPath(path, opts)
  opts = check_opts("processPath", opts)
  return self:_display("processPath", path, opts)
end

--- file:// URL of path's displayPath, each segment percent-encoded (RFC 3986).
---@return string|nil, dsh.Error?
function FS:fileUrl(path, opts)
  opts = check_opts("fileUrl", opts)
  local display, err = self:_display("fileUrl", path, opts)
  if not display then return nil, err end
  return "file://" .. display:gsub("[^%w%-%._~/]", function(c) return string.format("%%%02X", c:byte()) end)
end

--- True when path, after resolution (`..` and symlinks), is root or inside it.
---@return boolean|nil, dsh.Error?
function FS:contains(root, path, opts)
  opts = check_opts("contains", opts)
  local droot, err = self:_display("contains", root, opts)
  if not droot then return nil, err end
  local dpath, perr = self:_display("contains", path, opts)
  if not dpath then return nil, perr end
  if is_aborted(opts) then return nil, aborted("resolve") end
  local keys, rerr = self._b:realpath({ droot, dpath }, opts)
  if not keys then return nil, map("resolve", dpath, rerr, opts.signal) end
  local r, p = keys[1], keys[2]
  if r == "/" then return true end
  return p == r or p:sub(1, #r + 1) == r .. "/"
end

--- A filesystem over backend b.
---@param b dsh.FsBackend
---@return table
function M.new(b)
  errors.check(MOD, "new: backend", b, "table")
  errors.check(MOD, "new: backend.prefix", b.prefix, "string")
  errors.check(MOD, "new: backend.cwd", b.cwd, "string")
  if b.cwd:sub(1, 1) ~= "/" then error(MOD .. ": new: backend.cwd must be absolute: " .. b.cwd, 2) end
  for _, m in ipairs { "realpath", "lstat", "stat", "open", "writeTemp", "chmod", "rename", "remove" } do
    errors.check(MOD, "new: backend." .. m, b[m], "function")
  end
  if not b.children then errors.check(MOD, "new: backend.names", b.names, "function") end
  return setmetatable({ kind = b.prefix, cwd = normalize(b.cwd), _b = b, _locks = {}, _commits = 0 }, FS)
end

M.FS = FS
return M
