-- dsh's LSP file watcher for lsp-local: a small resident program run with
-- LuaJIT where the language servers run, through ctx.subprocess, as
-- `luajit -e <this text>` with DSH_WATCH_ROOT=<root>. It is not a Lua module of dsh and needs
-- nothing but LuaJIT and libc (inotify).
--
-- It watches <root> and every directory below it (not `.git`), adding the
-- directories created later, and writes one record per change on stdout:
--   "<kind> <n>\n" followed by n bytes: the path relative to <root>
-- kinds: c created (or moved in), w written, r removed, m moved away; o: the
-- kernel's queue overflowed (changes were lost), n = 0. A request on stdin,
-- "sync <id>\n", is answered "s <n>\n<id>" once every change the kernel had
-- queued when the request was read has been written: a barrier, so a change
-- made before a query is told before the query goes on. Watches beyond
-- MAX_WATCHES are not added ("l 0\n" once). Malformed input or a failure to
-- watch the root ends the program (status 2, the reason on stderr).
local ffi = require "ffi"
local bit = require "bit"

ffi.cdef [[
struct dsh_watch_pollfd { int fd; short events; short revents; };
int inotify_init1(int flags);
int inotify_add_watch(int fd, const char *path, uint32_t mask);
long read(int fd, void *buf, size_t n);
int poll(struct dsh_watch_pollfd *fds, unsigned long nfds, int timeout);
typedef struct DIR DIR;
struct dsh_watch_dirent { uint64_t d_ino; int64_t d_off; uint16_t d_reclen; uint8_t d_type; char d_name[256]; };
DIR *opendir(const char *name);
struct dsh_watch_dirent *readdir(DIR *d);
int closedir(DIR *d);
char *strerror(int errnum);
]]
local C = ffi.C

local IN_MODIFY, IN_MOVED_FROM, IN_MOVED_TO = 0x2, 0x40, 0x80
local IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF = 0x100, 0x200, 0x400, 0x800
local IN_Q_OVERFLOW, IN_IGNORED, IN_ONLYDIR, IN_DONT_FOLLOW, IN_ISDIR = 0x4000, 0x8000, 0x1000000, 0x2000000,
  0x40000000
local IN_NONBLOCK, IN_CLOEXEC = 0x800, 0x80000
local MASK = bit.bor(IN_MODIFY, IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF)
local DT_DIR, DT_UNKNOWN = 4, 0
local MAX_WATCHES = 8192
local EAGAIN, EINTR = 11, 4

local root = os.getenv("DSH_WATCH_ROOT")
local function die(msg)
  io.stderr:write("watcher: ", msg, "\n")
  os.exit(2)
end
if type(root) ~= "string" or root:sub(1, 1) ~= "/" then die("DSH_WATCH_ROOT must be an absolute path") end
root = root:gsub("/+$", "")
if root == "" then root = "/" end

local ifd = C.inotify_init1(bit.bor(IN_NONBLOCK, IN_CLOEXEC))
if ifd < 0 then die("inotify_init1: " .. ffi.string(C.strerror(ffi.errno()))) end

local dirs, nwatches, limited = {}, 0, false -- wd -> relative directory ("" for the root)

local function out(kind, s)
  io.stdout:write(kind, " ", #s, "\n", s)
end

local function join(rel, name)
  return rel == "" and name or (rel .. "/" .. name)
end

local function full(rel)
  return rel == "" and root or ((root == "/" and "" or root) .. "/" .. rel)
end

-- Watch rel and the directories below it; with report, say "created" for
-- what is found (a directory that appeared with entries in it).
local function add_tree(rel, report, depth)
  if depth > 64 then return end
  if nwatches >= MAX_WATCHES then
    if not limited then
      limited = true
      out("l", "")
    end
    return
  end
  local wd = C.inotify_add_watch(ifd, full(rel), bit.bor(MASK, IN_ONLYDIR, IN_DONT_FOLLOW))
  if wd < 0 then
    if rel == "" then die("cannot watch " .. root .. ": " .. ffi.string(C.strerror(ffi.errno()))) end
    return
  end
  if not dirs[wd] then nwatches = nwatches + 1 end
  dirs[wd] = rel
  local d = C.opendir(full(rel))
  if d == nil then return end
  local subdirs = {}
  while true do
    local e = C.readdir(d)
    if e == nil then break end
    local name = ffi.string(e.d_name)
    if name ~= "." and name ~= ".." then
      local child = join(rel, name)
      if report then out("c", child) end
      if (e.d_type == DT_DIR or e.d_type == DT_UNKNOWN) and name ~= ".git" then subdirs[#subdirs + 1] = child end
    end
  end
  C.closedir(d)
  for _, s in ipairs(subdirs) do add_tree(s, report, depth + 1) end
end

add_tree("", false, 0)
io.stdout:write("ready 0\n")
io.stdout:flush()

local EVBUF = 65536
local evbuf = ffi.new("uint8_t[?]", EVBUF)

-- Everything the kernel queued, written out; false when nothing was there.
local function drain()
  local any = false
  while true do
    local n = C.read(ifd, evbuf, EVBUF)
    if n < 0 then
      local e = ffi.errno()
      if e == EAGAIN then return any end
      if e ~= EINTR then die("read inotify: " .. ffi.string(C.strerror(e))) end
    elseif n == 0 then
      return any
    else
      any = true
      local off = 0
      while off < n do
        local wd = ffi.cast("int32_t *", evbuf + off)[0]
        local u = ffi.cast("uint32_t *", evbuf + off + 4)
        local mask, len = u[0], u[2]
        local name = len > 0 and ffi.string(evbuf + off + 16) or ""
        off = off + 16 + len
        if bit.band(mask, IN_Q_OVERFLOW) ~= 0 then
          out("o", "")
        elseif bit.band(mask, IN_IGNORED) ~= 0 then
          if dirs[wd] then nwatches = nwatches - 1 end
          dirs[wd] = nil
        else
          local dir = dirs[wd]
          if dir and name ~= "" then
            local rel = join(dir, name)
            local isdir = bit.band(mask, IN_ISDIR) ~= 0
            if bit.band(mask, bit.bor(IN_CREATE, IN_MOVED_TO)) ~= 0 then
              out("c", rel)
              if isdir and name ~= ".git" then add_tree(rel, true, 0) end
            end
            if bit.band(mask, IN_MODIFY) ~= 0 then out("w", rel) end
            if bit.band(mask, IN_MOVED_FROM) ~= 0 then out("m", rel) end
            if bit.band(mask, IN_DELETE) ~= 0 then out("r", rel) end
          end
        end
      end
    end
  end
end

local fds = ffi.new("struct dsh_watch_pollfd[2]")
fds[0].fd, fds[0].events = 0, 1
fds[1].fd, fds[1].events = ifd, 1
local inbuf = ffi.new("uint8_t[?]", 4096)
local pending = ""

while true do
  local r = C.poll(fds, 2, -1)
  if r < 0 and ffi.errno() ~= EINTR then die("poll: " .. ffi.string(C.strerror(ffi.errno()))) end
  if r > 0 then
    if fds[1].revents ~= 0 and drain() then io.stdout:flush() end
    if fds[0].revents ~= 0 then
      local n = C.read(0, inbuf, 4096)
      if n == 0 then break end -- the host went away
      if n > 0 then
        pending = pending .. ffi.string(inbuf, n)
        if #pending > 65536 then die("request too long") end
        while true do
          local line, rest = pending:match("^([^\n]*)\n(.*)$")
          if not line then break end
          pending = rest
          local id = line:match("^sync (%d+)$")
          if not id then die("malformed request") end
          drain()
          out("s", id)
        end
        io.stdout:flush()
      end
    end
  end
end
