-- dsh's LSP source reader: a small resident program run with LuaJIT where the
-- language server runs (in the sandbox for lsp-e2b, on the host for
-- lsp-local), through ctx.subprocess, as `luajit -e <this text>`. It is not a
-- Lua module of dsh and needs nothing but LuaJIT and libc.
--
-- It answers requests on stdin with responses on stdout, both in the LSP
-- base protocol's framing ("Content-Length: N\r\n\r\n" + body). A body is one
-- line of ASCII words, "\n", then a payload:
--   resolve <id>\n<path>\0<path>\0...  -> <id> resolved\n then per path
--                                        <dir|file|other|error>\0<canonical path or message>\0
--   read <id> <max> <have>\n<path>     -> <id> ok <token> <size>\n<bytes>
--                                      | <id> same <token>\n      (content equals token <have>)
--                                      | <id> not-file\n | <id> oversize <size>\n | <id> grew\n
--                                      | <id> open-error\n<message>
--   find <id>\n<stop>\0<start>\0<name>\0...  -> <id> found\n<dir> | <id> none\n
--                                        (the nearest directory from <start> up to
--                                        <stop> holding an entry called one of the names)
-- resolve is realpath(3) (every component must exist). read opens the path
-- with O_NOFOLLOW|O_NONBLOCK (a final symlink fails with ELOOP; a FIFO does
-- not block), checks through /proc/self/fd that the file opened is the one
-- named (so a directory swapped for a symlink is caught too), requires a
-- regular file of at most <max> bytes, and reads at most <max>+1 bytes
-- ("grew" when there were more). The last content sent for each path is kept
-- (bounded), so an unchanged file is answered "same" without its bytes. The
-- host checks everything again; malformed input ends this program (status 2).
local ffi = require "ffi"
local bit = require "bit"

ffi.cdef [[
struct dsh_reader_ts { int64_t tv_sec; uint32_t tv_nsec; int32_t reserved; };
struct dsh_reader_statx {
  uint32_t stx_mask; uint32_t stx_blksize; uint64_t stx_attributes;
  uint32_t stx_nlink; uint32_t stx_uid; uint32_t stx_gid; uint16_t stx_mode; uint16_t spare0;
  uint64_t stx_ino; uint64_t stx_size; uint64_t stx_blocks; uint64_t stx_attributes_mask;
  struct dsh_reader_ts stx_atime, stx_btime, stx_ctime, stx_mtime;
  uint32_t stx_rdev_major; uint32_t stx_rdev_minor; uint32_t stx_dev_major; uint32_t stx_dev_minor;
  uint64_t spare2[14];
};
int statx(int dirfd, const char *path, int flags, unsigned int mask, struct dsh_reader_statx *buf);
int open(const char *path, int flags, ...);
long read(int fd, void *buf, size_t n);
int close(int fd);
long readlink(const char *path, char *buf, size_t size);
char *realpath(const char *path, char *resolved);
void free(void *p);
char *strerror(int errnum);
]]
local C = ffi.C

local O_NOFOLLOW = ({ x64 = 0x20000, x86 = 0x20000, arm64 = 0x8000, arm = 0x8000 })[ffi.arch]
if not O_NOFOLLOW then
  io.stderr:write("source reader: unsupported architecture " .. ffi.arch .. "\n")
  os.exit(2)
end
local O_RDONLY, O_NONBLOCK, O_CLOEXEC = 0, 0x800, 0x80000
local AT_EMPTY_PATH, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS = 0x1000, 0x100, 0x7ff
local S_IFMT, S_IFREG, S_IFDIR = 0xF000, 0x8000, 0x4000
local CHUNK = 65536
local MAX_REQUEST = 1048576
local CACHE_ENTRIES, CACHE_BYTES = 128, 268435456

local stx = ffi.new("struct dsh_reader_statx")
local buf = ffi.new("uint8_t[?]", CHUNK)
local linkbuf = ffi.new("char[?]", 4097)

local function die(msg)
  io.stderr:write("source reader: ", msg, "\n")
  os.exit(2)
end

local function strerror(e)
  return ffi.string(C.strerror(e))
end

local function send(body)
  io.stdout:write("Content-Length: ", #body, "\r\n\r\n", body)
  io.stdout:flush()
end

-- The next request body, or nil at end of input.
local function next_request()
  local len
  while true do
    local line = io.stdin:read("*l")
    if not line then return nil end
    if #line > 1024 then die("request header line too long") end
    line = line:gsub("\r$", "")
    if line == "" then break end
    local v = line:match("^[Cc]ontent%-[Ll]ength:%s*(%d+)%s*$")
    if v then len = tonumber(v) end
  end
  if not len or len > MAX_REQUEST then die("request without a valid Content-Length") end
  local body = io.stdin:read(len)
  if not body or #body ~= len then die("request cut short") end
  return body
end

local function kind_of(mode)
  local f = bit.band(mode, S_IFMT)
  return f == S_IFDIR and "dir" or f == S_IFREG and "file" or "other"
end

local function resolve(id, payload)
  local out = { id, " resolved\n" }
  for path in payload:gmatch("([^%z]*)%z") do
    local p = C.realpath(path, nil)
    if p == nil then
      out[#out + 1] = "error\0" .. strerror(ffi.errno()) .. "\0"
    else
      local canon = ffi.string(p)
      C.free(p)
      if C.statx(-100, canon, 0, STATX_BASIC_STATS, stx) ~= 0 then
        out[#out + 1] = "error\0" .. strerror(ffi.errno()) .. "\0"
      else
        out[#out + 1] = kind_of(stx.stx_mode) .. "\0" .. canon .. "\0"
      end
    end
  end
  send(table.concat(out))
end

local cache, cached_bytes, next_token = {}, 0, 1

local function remember(path, data)
  local old = cache[path]
  if old then cached_bytes = cached_bytes - #old.data end
  local token = next_token
  next_token = next_token + 1
  cache[path] = { token = token, data = data }
  cached_bytes = cached_bytes + #data
  -- bounded: drop the oldest entries
  while true do
    local n, oldest, oldest_path = 0, nil, nil
    for p, e in pairs(cache) do
      n = n + 1
      if not oldest or e.token < oldest then oldest, oldest_path = e.token, p end
    end
    if (n <= CACHE_ENTRIES and cached_bytes <= CACHE_BYTES) or oldest_path == path then break end
    cached_bytes = cached_bytes - #cache[oldest_path].data
    cache[oldest_path] = nil
  end
  return token
end

-- "kind rest\n" + payload for one read, the descriptor closed on every path.
local function read_file(path, max, have)
  local fd = C.open(path, bit.bor(O_RDONLY, O_NOFOLLOW, O_NONBLOCK, O_CLOEXEC))
  if fd < 0 then return "open-error\n" .. strerror(ffi.errno()) end
  local function finish(s)
    C.close(fd)
    return s
  end
  local n = C.readlink("/proc/self/fd/" .. fd, linkbuf, 4097)
  if n >= 0 then
    local opened = ffi.string(linkbuf, n)
    if opened ~= path then return finish("open-error\nthe file opened is " .. opened .. ", not the one named") end
  end
  if C.statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, stx) ~= 0 then
    return finish("open-error\n" .. strerror(ffi.errno()))
  end
  if kind_of(stx.stx_mode) ~= "file" then return finish("not-file\n") end
  local size = tonumber(stx.stx_size)
  if size > max then return finish("oversize " .. size .. "\n") end
  local parts, total = {}, 0
  while true do
    local r = C.read(fd, buf, CHUNK)
    if r < 0 then
      local e = ffi.errno()
      if e ~= 4 then return finish("open-error\n" .. strerror(e)) end -- EINTR: again
    elseif r == 0 then
      break
    else
      total = total + tonumber(r)
      if total > max then return finish("grew\n") end
      parts[#parts + 1] = ffi.string(buf, r)
    end
  end
  C.close(fd)
  local data = table.concat(parts)
  local e = cache[path]
  if have and e and e.token == have and e.data == data then return "same " .. have .. "\n" end
  return "ok " .. remember(path, data) .. " " .. #data .. "\n" .. data
end

-- The nearest directory from start up to stop (both canonical, start inside
-- stop) that holds an entry with one of the names.
local function find(id, payload)
  local parts = {}
  for p in payload:gmatch("([^%z]*)%z") do parts[#parts + 1] = p end
  local stop, dir = parts[1], parts[2]
  if not stop or not dir or #parts < 3 then die("malformed find request") end
  if dir ~= stop and dir:sub(1, #stop + 1) ~= (stop == "/" and "/" or stop .. "/") then
    return send(id .. " none\n")
  end
  while true do
    for i = 3, #parts do
      local name = parts[i]
      local at = (dir == "/" and "" or dir) .. "/" .. name
      if name ~= "" and not name:find("/", 1, true)
        and C.statx(-100, at, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, stx) == 0 then
        return send(id .. " found\n" .. dir)
      end
    end
    if dir == stop or dir == "/" then break end
    dir = dir:match("^(.*)/[^/]*$")
    if dir == "" then dir = "/" end
  end
  send(id .. " none\n")
end

while true do
  local body = next_request()
  if not body then break end
  local head, payload = body:match("^([^\n]*)\n(.*)$")
  if not head then die("request without a header line") end
  local op, id, rest = head:match("^(%a+) (%d+)(.*)$")
  if op == "resolve" and rest == "" then
    resolve(id, payload)
  elseif op == "find" and rest == "" then
    find(id, payload)
  elseif op == "read" then
    local max, have = rest:match("^ (%d+) (%S+)$")
    if not max or payload == "" or payload:find("\0", 1, true) then die("malformed read request") end
    send(id .. " " .. read_file(payload, tonumber(max), tonumber(have)))
  else
    die("unknown request " .. head:sub(1, 40))
  end
end
