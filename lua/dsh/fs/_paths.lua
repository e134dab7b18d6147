--- dsh.fs._paths: what a path names — display paths, target keys, versions.
--
-- displayPath is the POSIX resolution of the argument against opts.cwd or
-- the backend's cwd (lexical, `..` included); targetKey is `realpath -m` of
-- it (symlinks resolved, need not exist), asked of the backend. A version is
-- a digest of a file's metadata (never its content), so any external change
-- alters it. Also the paths "for other worlds": processPath, fileUrl, contains.
local errors = require "dsh.errors"
local fe = require "dsh.fs._errors"
local lexical = require "dsh.path"
local sha256 = require "dsh.core.sha256"
local sysutil = require "dsh.core.sysutil"
local bit = require "bit"

local M = {}
local MOD = "dsh.fs"

--- Lexical normalisation of an absolute path ("/a/./b/../c" -> "/a/c"): dsh.path's.
M.normalize = lexical.normalize

--- POSIX resolve of p against cwd (cwd may be relative to base).
local function resolve_lexical(base, cwd, p)
  return lexical.resolve(cwd and lexical.join(base, cwd) or base, p)
end

--- The displayPath of path for method (misuse raises), or nil, err.
function M.display(fs, method, path, opts)
  if type(path) ~= "string" then errors.misuse(MOD, "%s: path must be a string, got %s", method, type(path)) end
  if not path:find("%S") then return nil, fe.new("FS_NOT_FOUND", "file_path must be a non-empty string") end
  if path:find("\0", 1, true) then return nil, fe.new("FS_NOT_FOUND", "file_path must not contain a NUL byte") end
  return resolve_lexical(fs.cwd, opts.cwd, path)
end

--- dir, base of a key.
function M.split(key)
  local dir, base = key:match("^(.*)/([^/]*)$")
  return dir or "", base or key
end

--- A random (version 4) UUID.
function M.uuid()
  local b = { sysutil.random_bytes(16):byte(1, 16) }
  b[7] = bit.bor(bit.band(b[7], 0x0f), 0x40)
  b[9] = bit.bor(bit.band(b[9], 0x3f), 0x80)
  local hex = string.format(string.rep("%02x", 16), unpack(b))
  return table.concat({ hex:sub(1, 8), hex:sub(9, 12), hex:sub(13, 16), hex:sub(17, 20), hex:sub(21) }, "-")
end

-- Versions --------------------------------------------------------------------

local function field(v)
  local s = v == nil and "" or tostring(v)
  return #s .. ":" .. s
end

--- Deterministic digest of [identity, path, type, size, mode, mtime, symlinkTarget].
function M.version(fs, info, path)
  return fs.kind .. ":" .. sha256.hex(field(info.identity) .. field(path) .. field(info.type)
    .. field(info.size) .. field(info.mode) .. field(info.mtime) .. field(info.symlinkTarget))
end

--- What callers see of a backend's info: {type=, size=, version=}.
function M.public(fs, info, path)
  local sized = info.type == "file" or info.type == "symlink"
  return { type = info.type, size = sized and info.size or nil, version = M.version(fs, info, path) }
end

-- Resolution ------------------------------------------------------------------

--- display, key for method's op, or nil, err.
function M.resolve(fs, op, method, path, opts)
  local display, err = M.display(fs, method, path, opts)
  if not display then return nil, err end
  if fe.is_aborted(opts) then return nil, fe.aborted(op) end
  local keys, rerr = fs._b:realpath({ display }, opts)
  if not keys then return nil, fe.map(op, display, rerr, opts.signal) end
  return display, keys[1]
end

--- display, key, info|false (false: nothing there) or nil, err.
function M.locate(fs, op, method, path, opts)
  local display, err = M.display(fs, method, path, opts)
  if not display then return nil, err end
  if fe.is_aborted(opts) then return nil, fe.aborted(op) end
  local b = fs._b
  local key, info
  if b.locate then
    key, info = b:locate(display, opts)
    if not key then return nil, fe.map(op, display, info, opts.signal) end
  else
    local keys, rerr = b:realpath({ display }, opts)
    if not keys then return nil, fe.map(op, display, rerr, opts.signal) end
    key = keys[1]
    local serr
    info, serr = b:stat(key, opts)
    if not info then
      if serr.code ~= "FS_NOT_FOUND" then return nil, fe.map(op, display, serr, opts.signal) end
      info = false
    end
  end
  if fe.is_aborted(opts) then return nil, fe.aborted(op) end
  return display, key, info
end

-- Paths for other worlds ------------------------------------------------------

--- file:// URL of a display path, each segment percent-encoded (RFC 3986).
function M.file_url(display)
  return "file://" .. display:gsub("[^%w%-%._~/]", function(c) return string.format("%%%02X", c:byte()) end)
end

--- True when path, after resolution (`..` and symlinks), is root or inside it.
function M.contains(fs, root, path, opts)
  local droot, err = M.display(fs, "contains", root, opts)
  if not droot then return nil, err end
  local dpath, perr = M.display(fs, "contains", path, opts)
  if not dpath then return nil, perr end
  if fe.is_aborted(opts) then return nil, fe.aborted("resolve") end
  local keys, rerr = fs._b:realpath({ droot, dpath }, opts)
  if not keys then return nil, fe.map("resolve", dpath, rerr, opts.signal) end
  local r, p = keys[1], keys[2]
  if r == "/" then return true end
  return p == r or p:sub(1, #r + 1) == r .. "/"
end

return M
