--- Raw client sockets for specs that must misbehave on the wire (half-close,
-- stop reading, read byte by byte), which the envd client never does.
-- addr is "host:port" (IPv4) or a unix socket path (local sandboxes). Reads
-- wait in the loop, so a dshd in the same process keeps running.
local async = require "dsh.async"
local bit = require "bit"
local ffi = require "ffi"
local loop = require "dsh.core.loop"

local M = {}

ffi.cdef [[
struct dsh_spec_sockaddr_in { uint16_t family; uint16_t port; uint32_t addr; uint8_t zero[8]; };
struct dsh_spec_sockaddr_un { uint16_t family; char path[108]; };
struct dsh_spec_pollfd { int fd; short events; short revents; };
int socket(int domain, int type, int protocol);
int connect(int fd, const void *a, uint32_t len);
long send(int fd, const void *buf, size_t n, int flags);
long recv(int fd, void *buf, size_t n, int flags);
int poll(struct dsh_spec_pollfd *fds, unsigned long n, int timeout);
int shutdown(int fd, int how);
int close(int fd);
int inet_pton(int af, const char *src, void *dst);
]]

local AF_UNIX, AF_INET, SOCK_STREAM, MSG_NOSIGNAL, SHUT_WR, POLLIN = 1, 2, 1, 0x4000, 1, 1

--- A connected socket's fd (raises when the connection fails).
function M.open(addr)
  local sa, fd
  if addr:sub(1, 1) == "/" then
    assert(#addr < 108, "socket path too long: " .. addr)
    sa = ffi.new("struct dsh_spec_sockaddr_un")
    sa.family = AF_UNIX
    ffi.copy(sa.path, addr)
    fd = ffi.C.socket(AF_UNIX, SOCK_STREAM, 0)
  else
    local host, port = addr:match("^(.*):(%d+)$")
    port = assert(tonumber(port), "not host:port or a socket path: " .. addr)
    sa = ffi.new("struct dsh_spec_sockaddr_in")
    sa.family = AF_INET
    sa.port = bit.bor(bit.rshift(port, 8), bit.lshift(bit.band(port, 255), 8))
    assert(ffi.C.inet_pton(AF_INET, host, ffi.cast("char *", sa) + 4) == 1, "bad address " .. host)
    fd = ffi.C.socket(AF_INET, SOCK_STREAM, 0)
  end
  assert(fd >= 0, "socket failed")
  if ffi.C.connect(fd, sa, ffi.sizeof(sa)) ~= 0 then
    ffi.C.close(fd)
    error("connect to " .. addr .. " failed", 2)
  end
  return fd
end

--- Send all of s (raises on a short send).
function M.send(fd, s)
  assert(ffi.C.send(fd, s, #s, MSG_NOSIGNAL) == #s, "short send")
end

--- Half-close: the peer reads end of input, this side can still read.
function M.shutdown_write(fd)
  assert(ffi.C.shutdown(fd, SHUT_WR) == 0, "shutdown failed")
end

local buf = ffi.new("char[65536]")

--- Up to max bytes (default 65536), waiting in the loop at most ms for the
-- first: the bytes, "" at end of stream, or nil when none came in time.
function M.recv_some(fd, ms, max)
  local pfd = ffi.new("struct dsh_spec_pollfd", { fd = fd, events = POLLIN })
  local deadline = loop.now_ms() + ms
  while ffi.C.poll(pfd, 1, 0) == 0 do
    if loop.now_ms() > deadline then return nil end
    async.sleep(5)
  end
  local n = ffi.C.recv(fd, buf, math.min(max or 65536, 65536), 0)
  return n > 0 and ffi.string(buf, n) or ""
end

function M.close(fd)
  ffi.C.close(fd)
end

return M
