--- dsh.fs._tar: the tar stream that moves a tree (ctx.fs uploadTree and
-- downloadTree), both ways, in Lua.
--
-- Written: GNU format (what GNU tar and busybox read): 512-byte headers,
-- names and link targets longer than the header holds in ././@LongLink
-- records (raw bytes, so any name survives, unlike PAX's UTF-8 paths), sizes
-- and times beyond the octal fields in base-256, two zero blocks at the end.
-- Read: that, POSIX ustar with its prefix field, and PAX extended headers
-- (path, linkpath, size, mtime); global headers are ignored. The reader
-- trusts nothing: checksums are checked, every field is bounded (a long name
-- to MAX_NAME bytes, a PAX header to MAX_PAX bytes), sizes must be numbers,
-- the stream must end where it says; anything else is an error naming what
-- was wrong, never a raise.
local bit = require "bit"

local M = {}

M.BLOCK = 512
M.MAX_NAME = 65536
M.MAX_PAX = 1024 * 1024
M.TYPES = { ["0"] = "file", ["\0"] = "file", ["7"] = "file", ["1"] = "hardlink", ["2"] = "symlink",
  ["5"] = "directory", ["3"] = "char", ["4"] = "block", ["6"] = "fifo" }

local ZERO = string.rep("\0", 512)

-- Encoding --------------------------------------------------------------------

-- n in an octal field of width w (w-1 digits and a NUL), or base-256 when it
-- does not fit (GNU: the first byte's high bit set, big-endian).
local function numeric(n, w)
  if n >= 0 and n < 8 ^ (w - 1) then return string.format("%0" .. (w - 1) .. "o", n) .. "\0" end
  local bytes = {}
  local v = n < 0 and (256 ^ w + n) or n
  for i = w, 1, -1 do
    bytes[i] = string.char(v % 256)
    v = math.floor(v / 256)
  end
  bytes[1] = string.char(bit.bor(bytes[1]:byte(), 0x80))
  return table.concat(bytes)
end

local function field(s, w)
  return s .. string.rep("\0", w - #s)
end

local function header(name, typeflag, o)
  local h = field(name:sub(1, 100), 100) .. numeric(o.mode or 0, 8) .. numeric(0, 8) .. numeric(0, 8)
    .. numeric(o.size or 0, 12) .. numeric(o.mtime or 0, 12) .. "        " .. typeflag
    .. field((o.link or ""):sub(1, 100), 100) .. "ustar  \0" .. field("", 32) .. field("", 32)
    .. numeric(0, 8) .. numeric(0, 8) .. field("", 167)
  local sum = 0
  for i = 1, #h do sum = sum + h:byte(i) end
  return h:sub(1, 148) .. string.format("%06o\0 ", sum) .. h:sub(157)
end

local function padding(n)
  local r = n % 512
  return r == 0 and "" or ZERO:sub(1, 512 - r)
end
M.padding = padding

--- The header blocks of one member (with ././@LongLink records before it
--- when its name or link target is longer than 100 bytes). m = {name, type
--- ("file", "directory", "symlink", "hardlink"), mode, size, mtime, link}.
---@return string
function M.header(m)
  local flag = ({ file = "0", directory = "5", symlink = "2", hardlink = "1" })[m.type]
  assert(flag, "dsh.fs._tar: unknown member type")
  local out = {}
  local name = m.type == "directory" and m.name:sub(-1) ~= "/" and m.name .. "/" or m.name
  if #name > 100 then
    out[#out + 1] = header("././@LongLink", "L", { size = #name + 1 }) .. name .. "\0" .. padding(#name + 1)
  end
  if m.link and #m.link > 100 then
    out[#out + 1] = header("././@LongLink", "K", { size = #m.link + 1 }) .. m.link .. "\0" .. padding(#m.link + 1)
  end
  out[#out + 1] = header(name, flag, { mode = m.mode, size = m.type == "file" and m.size or 0, mtime = m.mtime,
    link = m.link })
  return table.concat(out)
end

--- The end of an archive: two zero blocks.
M.TRAILER = ZERO .. ZERO

-- Decoding --------------------------------------------------------------------

local function cstr(s)
  local z = s:find("\0", 1, true)
  return z and s:sub(1, z - 1) or s
end

-- A numeric field: octal digits (spaces and NULs around them) or base-256.
local function number(s)
  local b = s:byte(1)
  if b >= 0x80 then
    local v = b == 0xFF and -1 or bit.band(b, 0x7F) -- 0xFF: negative, two's complement
    for i = 2, #s do v = v * 256 + s:byte(i) end
    if math.abs(v) > 2 ^ 53 then return nil end
    return v
  end
  local digits = s:match("^[ %z]*([0-7]*)[ %z]*$")
  if not digits then return nil end
  if digits == "" then return 0 end
  return tonumber(digits, 8)
end

local function checksum_ok(h)
  local want = number(h:sub(149, 156))
  if not want then return false end
  local unsigned, signed = 256, 256 -- the field itself counts as eight spaces
  for i = 1, 512 do
    if i < 149 or i > 156 then
      local b = h:byte(i)
      unsigned = unsigned + b
      signed = signed + (b >= 128 and b - 256 or b)
    end
  end
  return want == unsigned or want == signed
end

---@class dsh.fs.TarReader
local Reader = {}
Reader.__index = Reader

--- A reader of the tar stream source() yields (chunks, then nil; or nil, err).
function M.reader(source)
  return setmetatable({ _src = source, _buf = "", _pos = 1, offset = 0 }, Reader)
end

local function fail(msg)
  return nil, { code = "FS_IO_ERROR", message = "malformed tar stream: " .. msg }
end

-- More bytes into the buffer: true, false at the end, or nil, err.
function Reader:_fill()
  local chunk, err = self._src()
  if chunk == nil then
    if err then return nil, err end
    return false
  end
  if self._pos > #self._buf then
    self._buf, self._pos = chunk, 1
  else
    self._buf, self._pos = self._buf:sub(self._pos) .. chunk, 1
  end
  return true
end

-- Exactly n bytes (n small: headers, names), or nil, err.
function Reader:_take(n, what)
  while #self._buf - self._pos + 1 < n do
    local more, err = self:_fill()
    if more == nil then return nil, err end
    if not more then return fail("it ends in the middle of " .. what .. " at byte " .. self.offset) end
  end
  local s = self._buf:sub(self._pos, self._pos + n - 1)
  self._pos, self.offset = self._pos + n, self.offset + n
  return s
end

--- Up to max bytes of the current member's data (at least one), or nil, err.
function Reader:_some(max, what)
  if self._pos > #self._buf then
    local more, err = self:_fill()
    if more == nil then return nil, err end
    if not more then return fail("it ends in the middle of " .. what .. " at byte " .. self.offset) end
  end
  local n = math.min(max, #self._buf - self._pos + 1)
  local s = self._buf:sub(self._pos, self._pos + n - 1)
  self._pos, self.offset = self._pos + n, self.offset + n
  return s
end

-- A long-name record's or PAX header's body (size bytes, then padding).
function Reader:_body(size, limit, what)
  if size > limit then return fail(string.format("%s of %d bytes (at most %d)", what, size, limit)) end
  local s, err = self:_take(size, what)
  if not s then return nil, err end
  local _, perr = self:_take((512 - size % 512) % 512, what)
  if perr then return nil, perr end
  return s
end

-- PAX records "<len> <key>=<value>\n" into t.
local function pax(body, t)
  local pos = 1
  while pos <= #body do
    local len = body:match("^(%d+) ", pos)
    local n = tonumber(len)
    if not n or n < #len + 3 or pos + n - 1 > #body then return false end
    local rec = body:sub(pos + #len + 1, pos + n - 2)
    if body:sub(pos + n - 1, pos + n - 1) ~= "\n" then return false end
    local k, v = rec:match("^([^=]*)=(.*)$")
    if not k then return false end
    t[k] = v
    pos = pos + n
  end
  return true
end

---@class dsh.fs.TarMember
---@field name string   as in the archive ("./a/b", "a/b/")
---@field type string   "file", "directory", "symlink", "hardlink", "char", "block", "fifo", "other"
---@field mode integer
---@field size integer
---@field mtime integer
---@field link string|nil

--- The next member (its data is read with data()), false at the end of the
--- archive, or nil, err.
---@return dsh.fs.TarMember|false|nil, table|nil
function Reader:next()
  if self._left and self._left > 0 then
    repeat
      local s, err = self:data(65536)
      if not s then return nil, err end
    until s == ""
  end
  local long_name, long_link, ext = nil, nil, {}
  while true do
    if self._pos > #self._buf then
      local more, ferr = self:_fill()
      if more == nil then return nil, ferr end
      if not more then return fail("it ends at byte " .. self.offset .. " without its end-of-archive blocks") end
    end
    local h, err = self:_take(512, "a header")
    if not h then return nil, err end
    if h == ZERO then return false end
    if not checksum_ok(h) then return fail("bad header checksum at byte " .. (self.offset - 512)) end
    local flag = h:sub(157, 157)
    local size = number(h:sub(125, 136))
    if not size or size < 0 then return fail("bad size field at byte " .. (self.offset - 512)) end
    if flag == "L" or flag == "K" then
      local body, berr = self:_body(size, M.MAX_NAME, "a long name")
      if not body then return nil, berr end
      if flag == "L" then long_name = cstr(body) else long_link = cstr(body) end
    elseif flag == "x" or flag == "g" then
      local body, berr = self:_body(size, M.MAX_PAX, "a PAX header")
      if not body then return nil, berr end
      if flag == "x" and not pax(body, ext) then return fail("bad PAX header at byte " .. self.offset) end
    else
      local name = cstr(h:sub(1, 100))
      if h:sub(258, 263) == "ustar\0" then -- POSIX ustar: a prefix (GNU keeps times there)
        local prefix = cstr(h:sub(346, 500))
        if prefix ~= "" then name = prefix .. "/" .. name end
      end
      name = ext.path or long_name or name
      local link = ext.linkpath or long_link or cstr(h:sub(158, 257))
      if ext.size then
        size = tonumber(ext.size)
        if not size or size < 0 or size % 1 ~= 0 then return fail("bad PAX size") end
      end
      local t = M.TYPES[flag] or "other"
      local mode, mtime = number(h:sub(101, 108)), tonumber(ext.mtime and ext.mtime:match("^%-?%d+"))
        or number(h:sub(137, 148))
      if not mode or not mtime then return fail("bad mode or time field at byte " .. (self.offset - 512)) end
      self._left = size -- only a file's data is given out; any other member's is skipped
      self._pad = (512 - size % 512) % 512
      return { name = name, type = t, mode = bit.band(mode, 4095), size = t == "file" and size or 0,
        mtime = mtime, link = (t == "symlink" or t == "hardlink") and link or nil }
    end
  end
end

--- The current member's data in pieces of at most max bytes; "" once all of
--- it was read (its padding skipped too); nil, err.
---@return string|nil, table|nil
function Reader:data(max)
  local left = self._left or 0
  if left == 0 then
    if self._pad and self._pad > 0 then
      local _, err = self:_take(self._pad, "padding")
      if err then return nil, err end
      self._pad = 0
    end
    return ""
  end
  local s, err = self:_some(math.min(max or 65536, left), "a member's data")
  if not s then return nil, err end
  self._left = left - #s
  return s
end

--- Read (and ignore) the rest of the source after the end of the archive.
function Reader:drain()
  while true do
    local more, err = self:_fill()
    if not more then return more == false, err end
    self._buf, self._pos = "", 1
  end
end

return M
