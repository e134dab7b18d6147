--- code-runtime-supervisor: the one process of a Code Mode run that writes
-- frames (harness-behaviour.md §3.2, §4.1; §8.11: one supervisor, one ledger).
--
--   luajit code-runtime-supervisor.lua <maxFrameBytes> <luajit> <node|->
--
-- The host starts it as a managed process group with piped stdin/stdout.
-- It reads the boot frame, starts the worker (a fresh LuaJIT process running
-- code-runtime-worker.lua, or a fresh Node process running
-- code-runtime-runner.mjs, which runs the program in a worker thread) with an
-- empty environment, its stdin on /dev/null, its stdout and stderr on pipes
-- whose bytes become `log` frames, and a private message channel (fds 3 and
-- 4). Model code can write to fds 1 and 2 or start children that inherit
-- them: those bytes only ever reach the host as log text. The supervisor
-- validates and re-encodes every worker message, measures the Lua worker's
-- CPU time against computeMs, and when the run settles kills every
-- descendant (it is a child subreaper, so orphans stay its descendants:
-- also a process that left the session with setsid), drains the log pipes,
-- and writes the terminal frame last. When the host ends the run first (it
-- sends the group SIGTERM: a timeout, an abort, disposal), the supervisor
-- takes that TERM from a signalfd and kills every descendant before it
-- exits, so nothing the run started outlives it.
--
-- It keeps no output ledger (the host has the one ledger): it only stops
-- forwarding once more log bytes than maxOutputBytes went out, which the
-- host's ledger can never accept, and says `output-limit`.
-- Plain LuaJIT and libc through the FFI: nothing else is needed in the sandbox.
local ffi = require "ffi"
local bit = require "bit"

local DIR = arg[0]:match("^(.*)/[^/]*$") or "."
local fast = dofile(DIR .. "/code-runtime-fast.lua")
local J, W = fast.wire(DIR)

ffi.cdef [[
int pipe2(int fd[2], int flags);
int fork(void);
int execve(const char *path, char *const argv[], char *const envp[]);
int dup2(int oldfd, int newfd);
int close(int fd);
long read(int fd, void *buf, size_t n);
long write(int fd, const void *buf, size_t n);
struct pollfd { int fd; short events; short revents; };
int poll(struct pollfd *fds, unsigned long nfds, int timeout);
int waitpid(int pid, int *status, int options);
int kill(int pid, int sig);
int getpid(void);
void _exit(int status);
struct rlimit { unsigned long cur; unsigned long max; };
int setrlimit(int resource, const struct rlimit *r);
struct timespec { long tv_sec; long tv_nsec; };
int clock_getcpuclockid(int pid, int *clk);
int clock_gettime(int clk, struct timespec *ts);
int fcntl(int fd, int cmd, ...);
int open(const char *path, int flags, ...);
int prctl(int option, unsigned long a2, unsigned long a3, unsigned long a4, unsigned long a5);
typedef void (*dsh_sighandler_t)(int);
dsh_sighandler_t signal(int sig, dsh_sighandler_t handler);
char *strerror(int errnum);
typedef struct { unsigned long val[16]; } dsh_sigset_t;
int sigemptyset(dsh_sigset_t *set);
int sigaddset(dsh_sigset_t *set, int sig);
int sigprocmask(int how, const dsh_sigset_t *set, dsh_sigset_t *old);
int signalfd(int fd, const dsh_sigset_t *mask, int flags);
typedef struct dsh_dir DIR;
struct dsh_dirent { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[256]; };
DIR *opendir(const char *path);
struct dsh_dirent *readdir(DIR *d);
int closedir(DIR *d);
]]
local C = ffi.C

local O_CLOEXEC, O_NONBLOCK, O_RDONLY = 0x80000, 0x800, 0
local F_SETFL = 4
local POLLIN, POLLOUT, POLLERR = 1, 4, 8
local EINTR, EAGAIN = 4, 11
local WNOHANG = 1
local SIGKILL, SIGPIPE, SIGTERM, SIGHUP, SIGINT = 9, 13, 15, 1, 2
local SIG_BLOCK, SIG_UNBLOCK = 0, 1
local RLIMIT_AS, RLIMIT_CORE = 9, 4
local PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
local SIG_DFL, SIG_IGN = ffi.cast("dsh_sighandler_t", 0), ffi.cast("dsh_sighandler_t", 1)
local MAX_SAFE = 9007199254740991
local READ_SIZE = 65536
local LUA_AS_OVERHEAD_MB = 96 -- code, stacks and libraries of a LuaJIT process

local MAX_FRAME = tonumber(arg[1])
local LUAJIT, NODE = arg[2], arg[3]
if not MAX_FRAME or MAX_FRAME < 1 or MAX_FRAME ~= math.floor(MAX_FRAME) or not LUAJIT then
  io.stderr:write("usage: code-runtime-supervisor.lua <maxFrameBytes> <luajit> <node|->\n")
  os.exit(2)
end
local MAX_ENCODED = math.ceil(MAX_FRAME / 3) * 4
local MAX_WORKER_LINE = MAX_FRAME + 4096

C.signal(SIGPIPE, SIG_IGN)
C.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
local MYPID = C.getpid()

-- TERM, HUP and INT arrive on a signalfd the loop polls (the worker gets them
-- unblocked again), so ending the run from outside ends all of it.
local ending = ffi.new("dsh_sigset_t")
C.sigemptyset(ending)
for _, sig in ipairs { SIGTERM, SIGHUP, SIGINT } do C.sigaddset(ending, sig) end
C.sigprocmask(SIG_BLOCK, ending, nil)
local SIGFD = C.signalfd(-1, ending, bit.bor(O_NONBLOCK, O_CLOEXEC))

-- Base64 (strict on input, as the host's decoder) ------------------------------------

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local dec_tab = ffi.new("int16_t[256]")
for i = 0, 255 do dec_tab[i] = -1 end
for i = 1, 64 do dec_tab[B64:byte(i)] = i - 1 end
local scratch, scratch_n = ffi.new("uint8_t[?]", 65536), 65536
local function buf(n)
  if n > scratch_n then
    scratch_n = math.max(n, scratch_n * 2)
    scratch = ffi.new("uint8_t[?]", scratch_n)
  end
  return scratch
end

local function b64decode(s)
  local n = #s
  if n == 0 or n % 4 ~= 0 then return nil end
  local src = ffi.cast("const uint8_t *", s)
  local pad = (src[n - 1] == 61 and 1 or 0) + (src[n - 2] == 61 and 1 or 0)
  local out = buf(n / 4 * 3)
  local o = 0
  for i = 0, n - 1, 4 do
    local a, b, c, d = dec_tab[src[i]], dec_tab[src[i + 1]], dec_tab[src[i + 2]], dec_tab[src[i + 3]]
    local last = i + 4 == n
    if a < 0 or b < 0 then return nil end
    if c < 0 then
      if not (last and pad == 2 and src[i + 2] == 61 and bit.band(b, 15) == 0) then return nil end
      c, d = 0, 0
    elseif d < 0 then
      if not (last and pad == 1 and bit.band(c, 3) == 0) then return nil end
      d = 0
    end
    local v = bit.bor(bit.lshift(a, 18), bit.lshift(b, 12), bit.lshift(c, 6), d)
    out[o], out[o + 1], out[o + 2] = bit.rshift(v, 16), bit.band(bit.rshift(v, 8), 255), bit.band(v, 255)
    o = o + 3
  end
  return ffi.string(out, o - pad)
end

-- Raw I/O -----------------------------------------------------------------------------

local rbuf = ffi.new("uint8_t[?]", READ_SIZE)

local function errno_text()
  return ffi.string(C.strerror(ffi.errno()))
end

-- One read: a string, "" at end of file, or nil when nothing is ready.
local function read_some(fd)
  while true do
    local n = C.read(fd, rbuf, READ_SIZE)
    if n > 0 then return ffi.string(rbuf, n) end
    if n == 0 then return "" end
    local e = ffi.errno()
    if e == EAGAIN then return nil end
    if e ~= EINTR then return "" end
  end
end

-- Frames to the host ------------------------------------------------------------------

-- Frames wait in a queue and go out as fd 1 takes them, so the loop keeps
-- reading the host's replies while the host is not reading (it holds back
-- while calls it serves hold too much: were this process blocked writing,
-- those replies could never arrive). Past HOST_HIGH queued bytes the worker
-- is not read, so it waits instead.
local settled = false
local host_gone = false
local HOST_HIGH = 4194304
local host_q, host_head, host_tail, host_off, host_bytes = {}, 1, 0, 0, 0

-- Writes what fd 1 takes now; true once the queue is empty.
local function flush_host()
  while host_head <= host_tail do
    local s = host_q[host_head]
    local left = #s - host_off
    local n = tonumber(C.write(1, ffi.cast("const uint8_t *", s) + host_off, left)) -- a long: a cdata
    if n < 0 then
      local e = ffi.errno()
      if e == EAGAIN or e == EINTR then return false end
      host_gone = true -- nobody reads: drop everything
      host_q, host_head, host_tail, host_off, host_bytes = {}, 1, 0, 0, 0
      return true
    end
    host_bytes = host_bytes - n
    if n < left then
      host_off = host_off + n
      return false
    end
    host_q[host_head] = nil
    host_head, host_off = host_head + 1, 0
  end
  host_q, host_head, host_tail = {}, 1, 0
  return true
end

local function send(json)
  if host_gone then return end
  local line = fast.b64line(json)
  host_tail = host_tail + 1
  host_q[host_tail] = line
  host_bytes = host_bytes + #line
  flush_host()
end

-- The last frames out, waiting for fd 1 as long as it takes (the host ends us otherwise).
local function flush_host_all()
  local pfd = ffi.new("struct pollfd[1]")
  while not flush_host() do
    pfd[0].fd, pfd[0].events, pfd[0].revents = 1, POLLOUT, 0
    C.poll(pfd, 1, 100)
  end
end

-- UTF-8 text of raw bytes: invalid bytes become U+FFFD; an incomplete trailing
-- sequence is held back until the next chunk (or the end).
local function lead_len(b)
  return (b >= 0xC2 and b <= 0xDF) and 2 or (b >= 0xE0 and b <= 0xEF) and 3
    or (b >= 0xF0 and b <= 0xF4) and 4 or 0
end

local function incomplete_suffix(s)
  local n = #s
  for i = n, math.max(1, n - 2), -1 do
    local b = s:byte(i)
    if b < 0x80 then return 0 end
    if b >= 0xC0 then
      local need = lead_len(b)
      if need > n - i + 1 then return n - i + 1 end
      return 0
    end
  end
  return 0
end

local function sanitize(s)
  if fast.ascii(s) or J.valid_utf8(s) then return s end
  local out, i, n = {}, 1, #s
  while i <= n do
    local j = s:find("[\128-\255]", i) or n + 1
    out[#out + 1] = s:sub(i, j - 1)
    if j > n then break end
    local need = lead_len(s:byte(j))
    local piece = need > 0 and s:sub(j, j + need - 1) or ""
    if need > 0 and #piece == need and J.valid_utf8(piece) then
      out[#out + 1] = piece
      i = j + need
    else
      out[#out + 1] = "\239\191\189"
      i = j + 1
    end
  end
  return table.concat(out)
end

local boot
local log_bytes = 0

-- Forwards one log (or a piece of one); false once the output bound is passed.
local function send_log(text, more)
  if log_bytes > boot.maxOutputBytes then return false end
  log_bytes = log_bytes + #text
  local q = fast.plain(text) and ('"' .. text .. '"') or J.quote(text)
  send('{"type":"log","text":' .. q .. (more and ',"more":true}' or "}"))
  return log_bytes <= boot.maxOutputBytes
end

-- Processes ---------------------------------------------------------------------------

local worker_pid
local worker_exit, exit_seen_ms -- the worker's wait status, and when it was seen
local status = ffi.new("int[1]")
local mono = ffi.new("struct timespec")
local function now_ms()
  C.clock_gettime(1, mono) -- CLOCK_MONOTONIC
  return tonumber(mono.tv_sec) * 1000 + tonumber(mono.tv_nsec) / 1e6
end

-- Reaps every child that ended (orphans that came to us too). The worker
-- may be among them: its status is kept, or the loop would wait for an
-- exit it can no longer learn.
local function reap_any()
  while true do
    local pid = C.waitpid(-1, status, WNOHANG)
    if pid <= 0 then return end
    if pid == worker_pid and not worker_exit then worker_exit, exit_seen_ms = status[0], now_ms() end
  end
end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- The thread ids of pid (a child forked by any thread is listed under that thread).
local function tasks(pid)
  local out = {}
  local d = C.opendir("/proc/" .. pid .. "/task")
  if d == nil then return out end
  while true do
    local e = C.readdir(d)
    if e == nil then break end
    local tid = tonumber(ffi.string(e.name))
    if tid then out[#out + 1] = tid end
  end
  C.closedir(d)
  return out
end

-- Every descendant's pid (orphans are ours too: we are a subreaper).
local function descendants()
  local out, queue = {}, { MYPID }
  local qi = 1
  while queue[qi] do
    local pid = queue[qi]
    qi = qi + 1
    for _, tid in ipairs(tasks(pid)) do
      local kids = read_file("/proc/" .. pid .. "/task/" .. tid .. "/children") or ""
      for c in kids:gmatch("%d+") do
        local cp = tonumber(c)
        out[#out + 1] = cp
        queue[#queue + 1] = cp
      end
    end
  end
  return out
end

local function kill_descendants()
  if worker_pid then C.kill(worker_pid, SIGKILL) end
  for _ = 1, 10000 do
    reap_any()
    local list = descendants()
    if #list == 0 then return end
    for _, pid in ipairs(list) do C.kill(pid, SIGKILL) end
    C.poll(nil, 0, 1)
  end
end

local cstr_keep = {}
local function cstrings(list)
  local arr = ffi.new("char *[?]", #list + 1)
  for i, s in ipairs(list) do
    local c = ffi.new("char[?]", #s + 1, s)
    cstr_keep[#cstr_keep + 1] = c
    arr[i - 1] = c
  end
  arr[#list] = nil
  return arr
end

local function new_pipe()
  local fds = ffi.new("int[2]")
  if C.pipe2(fds, O_CLOEXEC) ~= 0 then return nil end
  return fds[0], fds[1]
end

-- Starts the worker: fds 0 /dev/null, 1 and 2 log pipes, 3 messages to us, 4 messages from us.
local function start_worker(argv, as_limit_mb)
  local out_r, out_w = new_pipe()
  local err_r, err_w = new_pipe()
  local msg_r, msg_w = new_pipe()
  local in_r, in_w = new_pipe()
  if not in_w then return nil, "pipe: " .. errno_text() end
  local null = C.open("/dev/null", bit.bor(O_RDONLY, O_CLOEXEC))
  local cargv, cenv = cstrings(argv), cstrings({})
  local limit = as_limit_mb and ffi.new("struct rlimit", { (as_limit_mb + LUA_AS_OVERHEAD_MB) * 1048576,
    (as_limit_mb + LUA_AS_OVERHEAD_MB) * 1048576 })
  local nocore = ffi.new("struct rlimit", { 0, 0 })
  local pid = C.fork()
  if pid == 0 then
    C.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
    C.signal(SIGPIPE, SIG_DFL)
    C.sigprocmask(SIG_UNBLOCK, ending, nil)
    C.dup2(null, 0)
    C.dup2(out_w, 1)
    C.dup2(err_w, 2)
    C.dup2(msg_w, 3)
    C.dup2(in_r, 4)
    C.setrlimit(RLIMIT_CORE, nocore)
    if limit then C.setrlimit(RLIMIT_AS, limit) end
    C.execve(cargv[0], cargv, cenv)
    C.write(2, "exec failed\n", 12)
    C._exit(127)
  end
  for _, fd in ipairs { out_w, err_w, msg_w, in_r, null } do C.close(fd) end
  if pid < 0 then return nil, "fork: " .. errno_text() end
  for _, fd in ipairs { out_r, err_r, msg_r, in_w } do C.fcntl(fd, F_SETFL, ffi.new("int", O_NONBLOCK)) end
  worker_pid = pid
  return { out = out_r, err = err_r, msg = msg_r, input = in_w }
end

-- Settling ----------------------------------------------------------------------------

local fds           -- the worker's pipes
local raw_pending = { [1] = "", [2] = "" }
local limited = false

local function forward_raw(key, chunk, final)
  if limited then return end
  local data = raw_pending[key] .. chunk
  local hold = final and 0 or incomplete_suffix(data)
  raw_pending[key] = hold > 0 and data:sub(#data - hold + 1) or ""
  data = data:sub(1, #data - hold)
  if data ~= "" and not send_log(sanitize(data)) then limited = true end
end

local function drain_raw()
  if not fds then return end
  for key, fd in ipairs { fds.out, fds.err } do
    while true do
      local chunk = read_some(fd)
      if not chunk or chunk == "" then break end
      forward_raw(key, chunk)
    end
    forward_raw(key, "", true)
  end
end

local function finish(terminal)
  if settled then return end
  settled = true
  kill_descendants()
  drain_raw()
  if limited then terminal = '{"type":"output-limit"}' end
  send(terminal)
  flush_host_all()
  os.exit(0)
end

local function fail(kind, message)
  finish('{"type":"done","error":{"kind":' .. J.quote(kind) .. ',"message":' .. J.quote(message) .. "}}")
end

local KINDS = { exception = true, timeout = true, abort = true, ["worker-exit"] = true,
  ["invalid-output"] = true, ["output-limit"] = true }

local function safe_id(v)
  return type(v) == "number" and v >= 1 and v <= MAX_SAFE and v == math.floor(v)
end

local function is_array(v)
  return type(v) == "table" and getmetatable(v) == W.array_mt
end

-- One message from the worker; malformed ones are ignored (§3.2).
local function on_worker_message(line)
  local m = J.decode_json(line, true) -- whatever it holds is re-encoded before it goes on
  if type(m) ~= "table" or getmetatable(m) == W.array_mt then return end
  local t = m.type
  if t == "log" then
    if type(m.text) ~= "string" then return end
    if not send_log(sanitize(m.text), m.more == true) then limited = true finish() end
  elseif t == "call" then
    if not safe_id(m.id) or type(m.global) ~= "string" or type(m.name) ~= "string" or not is_array(m.args) then
      return
    end
    local args = J.encode_json(m.args)
    send('{"type":"call","id":' .. J.number(m.id) .. ',"global":' .. J.quote(sanitize(m.global))
      .. ',"name":' .. J.quote(sanitize(m.name)) .. ',"args":' .. args .. "}")
  elseif t == "output-limit" then
    finish('{"type":"output-limit"}')
  elseif t == "done" then
    if m.error ~= nil then
      local e = m.error
      if type(e) ~= "table" or not KINDS[e.kind] or type(e.message) ~= "string" then return end
      fail(e.kind, sanitize(e.message))
    elseif m.value ~= nil then
      if not is_array(m.value) then return end
      finish('{"type":"done","value":' .. J.encode_json(m.value) .. "}")
    else
      finish('{"type":"done"}')
    end
  end
end

-- Messages to the worker, queued while its pipe is full; out_off bytes of
-- the first one are written already (a long line is never copied again).
local out_queue, out_head, out_off = {}, 1, 0
local function to_worker(line)
  out_queue[#out_queue + 1] = line
end

local function flush_worker()
  while out_queue[out_head] do
    local s = out_queue[out_head]
    local left = #s - out_off
    local n = tonumber(C.write(fds.input, ffi.cast("const uint8_t *", s) + out_off, left)) -- a long: a cdata
    if n < 0 then
      local e = ffi.errno()
      if e == EAGAIN or e == EINTR then return end
      out_queue, out_head, out_off = {}, 1, 0 -- the worker is gone; its exit settles the run
      return
    end
    if n < left then
      out_off = out_off + n
      return
    end
    out_queue[out_head] = nil
    out_head, out_off = out_head + 1, 0
  end
  out_queue, out_head, out_off = {}, 1, 0
end

-- One frame from the host.
local function on_host_frame(line)
  local json = #line <= MAX_ENCODED and b64decode(line)
  local m = json and #json <= MAX_FRAME and J.valid_utf8(json) and J.decode_json(json)
  if type(m) ~= "table" or getmetatable(m) == W.array_mt then
    io.stderr:write("code-runtime frame error: a frame that is not base64 JSON within maxFrameBytes\n")
    return fail("worker-exit", "remote runner received a malformed frame")
  end
  if not boot then
    local ok = m.type == "boot" and type(m.code) == "string" and is_array(m.namespaces)
      and safe_id(m.maxOutputBytes) and m.maxOutputBytes >= 4 and safe_id(m.computeMs)
      and (m.language == "lua" or m.language == "typescript" or m.language == "javascript")
    if not ok then return fail("worker-exit", "remote runner received an invalid boot frame") end
    boot = m
    local argv, as_mb
    if m.language == "lua" then
      argv = { LUAJIT, DIR .. "/code-runtime-worker.lua" }
      as_mb = safe_id(m.maxMemoryMb) and m.maxMemoryMb or 512
    else
      if NODE == "-" then
        return fail("worker-exit", "remote runner has no Node.js to run " .. m.language)
      end
      argv = { NODE, "--no-warnings", DIR .. "/code-runtime-runner.mjs" }
    end
    local err
    fds, err = start_worker(argv, as_mb)
    if not fds then return fail("worker-exit", "remote worker could not start: " .. err) end
    to_worker(json .. "\n")
    return
  end
  if m.type == "reply" and safe_id(m.id) and type(m.ok) == "boolean" then
    if m.ok then
      if not is_array(m.value) then return end
      to_worker('{"type":"reply","id":' .. J.number(m.id) .. ',"ok":true,"value":' .. J.encode_json(m.value) .. "}\n")
    else
      local msg = type(m.message) == "string" and m.message or tostring(m.message)
      to_worker('{"type":"reply","id":' .. J.number(m.id) .. ',"ok":false,"message":' .. J.quote(msg) .. "}\n")
    end
  end
end

-- The loop ----------------------------------------------------------------------------

C.fcntl(0, F_SETFL, ffi.new("int", O_NONBLOCK))
C.fcntl(1, F_SETFL, ffi.new("int", O_NONBLOCK))
local host_buf, msg_buf = {}, {}
local host_len, msg_len = 0, 0
local msg_eof = false
local cpu_clock, ts = ffi.new("int[1]"), ffi.new("struct timespec")
local have_clock = false

-- Splits buffered bytes into complete lines; calls fn(line) for each.
local function lines(parts, len, chunk, limit, fn, on_over)
  local start = 1
  while true do
    local nl = chunk:find("\n", start, true)
    if not nl then break end
    local piece = chunk:sub(start, nl - 1)
    if #parts > 0 then
      parts[#parts + 1] = piece
      piece = table.concat(parts)
      for k = #parts, 1, -1 do parts[k] = nil end
    end
    len = 0
    fn(piece)
    if settled then return 0 end
    start = nl + 1
  end
  local rest = chunk:sub(start)
  if rest ~= "" then
    parts[#parts + 1] = rest
    len = len + #rest
    if len > limit then on_over() end
  end
  return len
end

local function cpu_ms()
  if not have_clock then return 0 end
  if C.clock_gettime(cpu_clock[0], ts) ~= 0 then return 0 end
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end

local pfds = ffi.new("struct pollfd[7]")
while true do
  local n = 0
  local function add(fd, ev)
    pfds[n].fd, pfds[n].events, pfds[n].revents = fd, ev, 0
    n = n + 1
  end
  add(0, POLLIN)
  if SIGFD >= 0 then add(SIGFD, POLLIN) end
  if host_head <= host_tail then add(1, POLLOUT) end
  if fds then
    if host_bytes < HOST_HIGH then -- else the worker waits until the host has read
      add(fds.out, POLLIN)
      add(fds.err, POLLIN)
      if not msg_eof then add(fds.msg, POLLIN) end
    end
    if out_queue[out_head] then add(fds.input, POLLOUT) end
  end
  local r = C.poll(pfds, n, 25)
  if r < 0 and ffi.errno() ~= EINTR then break end
  for k = 0, n - 1 do
    local fd, rev = pfds[k].fd, pfds[k].revents
    if rev ~= 0 then
      if fd == SIGFD then -- the host ends the run: nothing it started may stay
        kill_descendants()
        os.exit(1)
      elseif fd == 1 then
        flush_host()
      elseif fd == 0 then
        local chunk = read_some(0)
        if chunk == "" then -- the host is gone: nobody can read a result
          host_gone = true
          kill_descendants()
          os.exit(1)
        elseif chunk then
          host_len = lines(host_buf, host_len, chunk, MAX_ENCODED, on_host_frame, function()
            io.stderr:write("code-runtime frame error: a frame longer than maxFrameBytes\n")
            fail("worker-exit", "remote runner received a malformed frame")
          end)
        end
      elseif fds and fd == fds.msg then
        local chunk = read_some(fd)
        if chunk == "" then
          msg_eof = true
        elseif chunk then
          msg_len = lines(msg_buf, msg_len, chunk, MAX_WORKER_LINE, on_worker_message, function()
            fail("worker-exit", "remote worker sent a message over maxFrameBytes")
          end)
        end
      elseif fds and (fd == fds.out or fd == fds.err) then
        local chunk = read_some(fd)
        if chunk and chunk ~= "" then
          forward_raw(fd == fds.out and 1 or 2, chunk)
          if limited then finish() end
        end
      elseif fds and fd == fds.input then
        flush_worker()
      end
      if bit.band(rev, POLLERR) ~= 0 and fds and fd == fds.input then out_queue, out_head, out_off = {}, 1, 0 end
    end
  end
  if settled then break end
  if worker_pid then
    if not have_clock and boot.language == "lua" then
      have_clock = C.clock_getcpuclockid(worker_pid, cpu_clock) == 0
    end
    if not worker_exit then
      local w = C.waitpid(worker_pid, status, WNOHANG)
      if w == worker_pid then worker_exit, exit_seen_ms = status[0], now_ms() end
    end
    -- a child of the worker may hold its message pipe open: wait for it briefly only
    -- (while the pipe is read: the worker's last messages may wait behind the host)
    if worker_exit and not msg_eof then
      if host_bytes >= HOST_HIGH then
        exit_seen_ms = now_ms()
      elseif now_ms() - exit_seen_ms > 200 then
        msg_eof = true
      end
    end
    if worker_exit and msg_eof then
      local st = worker_exit
      local sig = bit.band(st, 0x7f)
      if sig ~= 0 then
        fail("worker-exit", "remote worker was killed by signal " .. sig .. " before completing")
      else
        fail("worker-exit", "remote worker exited with code " .. bit.rshift(bit.band(st, 0xff00), 8)
          .. " before completing")
      end
    elseif boot.language == "lua" and not worker_exit and cpu_ms() > boot.computeMs then
      fail("timeout", "compute budget exhausted (" .. boot.computeMs .. "ms busy)")
    end
  end
  reap_any()
end
