--- dsh.fs._read: the reading calls of the fs seam — metadata (stat, lstat),
-- directory listings, and file contents as text (streamed, whole code points
-- only, NUL-sniffed before anything is released) or as bytes.
local errors = require "dsh.errors"
local utf8 = require "dsh.core.utf8"
local fe = require "dsh.fs._errors"
local paths = require "dsh.fs._paths"
local text = require "dsh.fs._text"

local M = {}
local MOD = "dsh.fs"

-- Metadata --------------------------------------------------------------------

function M.stat(fs, path, opts)
  local display, key, info = paths.locate(fs, "stat", "stat", path, opts)
  if not display then return nil, key end
  if not info then return nil end
  return paths.public(fs, info, key)
end

function M.lstat(fs, path, opts)
  local display, err = paths.display(fs, "lstat", path, opts)
  if not display then return nil, err end
  if fe.is_aborted(opts) then return nil, fe.aborted("lstat") end
  local info, lerr = fs._b:lstat(display, opts)
  if not info then
    if lerr.code == "FS_NOT_FOUND" and not fe.is_aborted(opts) then return nil end
    return nil, fe.map("lstat", display, lerr, opts.signal)
  end
  if fe.is_aborted(opts) then return nil, fe.aborted("lstat") end
  return paths.public(fs, info, display)
end

-- The default child listing: names, one realpath batch, one stat each.
local function children(fs, key, opts)
  local b = fs._b
  local names, err = b:names(key, opts)
  if not names then return nil, err end
  local list = {}
  for i, name in ipairs(names) do list[i] = (key == "/" and "" or key) .. "/" .. name end
  local keys, rerr = b:realpath(list, opts)
  if not keys then return nil, rerr end
  local out = {}
  for i, name in ipairs(names) do
    local info, serr = b:stat(keys[i], opts)
    if not info and serr.code ~= "FS_NOT_FOUND" then return nil, serr end
    out[i] = { name = name, key = keys[i], info = info or false }
  end
  return out
end

function M.list_dir(fs, path, opts)
  local display, key, info = paths.locate(fs, "list", "listDir", path, opts)
  if not display then return nil, key end
  if not info then return nil, fe.missing(display) end
  if info.type ~= "directory" then return nil, fe.not_directory(display) end
  local kids, err
  if fs._b.children then
    kids, err = fs._b:children(key, opts)
  else
    kids, err = children(fs, key, opts)
  end
  if not kids then return nil, fe.map("list", display, err, opts.signal) end
  if fe.is_aborted(opts) then return nil, fe.aborted("list") end
  local out = {}
  for i, kid in ipairs(kids) do
    if kid.info then
      local pub = paths.public(fs, kid.info, kid.key)
      out[i] = { name = kid.name, type = pub.type, target = kid.key, size = pub.size, version = pub.version }
    else
      out[i] = { name = kid.name, type = "other", target = kid.key }
    end
  end
  -- LuaJIT compares strings bytewise (memcmp order), never by locale.
  table.sort(out, function(a, b) return a.name < b.name end)
  return out
end

-- Contents --------------------------------------------------------------------

-- display, key, info, reader of a regular file, or nil, err.
local function open(fs, method, path, opts)
  local display, key, info = paths.locate(fs, "read", method, path, opts)
  if not display then return nil, key end
  if not info then return nil, fe.missing(display) end
  if info.type ~= "file" then return nil, fe.not_regular(display) end
  fe.step(opts, "stat", { targetKey = key })
  if fe.is_aborted(opts) then return nil, fe.aborted("read") end
  local reader, err = fs._b:open(key, opts)
  if not reader then return nil, fe.map("read", display, err, opts.signal) end
  return display, key, info, reader
end

--- Every byte of an open reader (closing it), or nil, the backend's error.
function M.drain(reader)
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
  if self._closed then errors.misuse(MOD, "next: the stream is closed") end
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
    if fe.is_aborted(self._opts) then return self:_fail(fe.aborted("read")) end
    local chunk, err = self._reader:read()
    if err or (chunk == nil and fe.is_aborted(self._opts)) then
      return self:_fail(fe.map("read", self.displayPath, err or {}, self._opts.signal))
    end
    if chunk == nil then
      local _, ferr = self._utf8:finish()
      if ferr then
        return self:_fail(fe.new("FS_NOT_TEXT", text.describe(self.displayPath, { kind = "truncated" })))
      end
      self._eof = true
      self._reader:close()
    elseif #chunk > 0 then
      if not self._sampled then
        local want = text.SAMPLE_BYTES - self._seen
        local nul = chunk:find("\0", 1, true)
        if nul and nul <= want then
          return self:_fail(fe.new("FS_NOT_TEXT", text.describe(self.displayPath,
            { kind = "binary", offset = self._seen + nul - 1 })))
        end
        self._seen = self._seen + math.min(#chunk, want)
        self._sampled = self._seen >= text.SAMPLE_BYTES
      end
      local piece, uerr = self._utf8:feed(chunk)
      if not piece then
        return self:_fail(fe.new("FS_NOT_TEXT", text.describe(self.displayPath, {}), { cause = uerr }))
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

--- Call fn(piece) for every piece to the end, then close: true, or nil,
--- err when the stream failed (closed either way).
function TextStream:each(fn)
  while true do
    local piece, err = self:next()
    if not piece then
      self:close()
      if err then return nil, err end
      return true
    end
    fn(piece)
  end
end

function M.text_stream(fs, method, path, opts)
  local display, key, info, reader = open(fs, method, path, opts)
  if not display then return nil, key end
  return setmetatable({
    displayPath = display, targetKey = key, version = paths.version(fs, info, key),
    _reader = reader, _opts = opts, _utf8 = utf8.stream(), _seen = 0, _sampled = false, _ready = {},
  }, TextStream)
end

function M.text(fs, path, opts)
  local s, err = M.text_stream(fs, "readText", path, opts)
  if not s then return nil, err end
  local parts = {}
  local ok, perr = s:each(function(piece) parts[#parts + 1] = piece end)
  if not ok then return nil, perr end
  return { text = table.concat(parts), version = s.version }
end

function M.bytes(fs, path, opts)
  local display, key, info, reader = open(fs, "readBytes", path, opts)
  if not display then return nil, key end
  local data, err = M.drain(reader)
  if not data then return nil, fe.map("read", display, err, opts.signal) end
  return { data = data, version = paths.version(fs, info, key) }
end

M.TextStream = TextStream
return M
