--- Spec helpers for dshd and local sandboxes (spec/03-dshd and others).
--
--   local D = require "helpers.dshd"
--   describe("...", function()
--     local S = D.use_sandbox()   -- one sandbox for the block, checked idle after each test
--     it(..., function() helpers.run(function() local c = S:test_client() ... end) end)
--   end)
--   D.use_state()                 -- only an isolated $DSH_STATE_DIR (sandboxes made per test)
--
-- Everything is real: sandboxes are dsh.sandbox sandboxes (dshd in
-- bubblewrap) under a temporary $DSH_STATE_DIR, bare daemons are
-- build/bin/dshd started with dsh.core.proc, raw requests go through
-- spec/fixtures/rawhttp.c.
local async = require "dsh.async"
local envd = require "dsh.envd"
local helpers = require "helpers"
local json = require "dsh.json"
local lfs = require "lfs"
local proc = require "dsh.core.proc"
local sandbox = require "dsh.sandbox"
local state = require "dsh.sandbox.state"
local sys = require "dsh.core.sysutil"

local M = {}

-- Setup and teardown of a describe block -------------------------------------------

-- busted's hooks, from the environment of the spec that called us.
local function hooks(level)
  local env = getfenv(level + 1)
  return env.setup, env.teardown, env.before_each, env.after_each
end

--- In a describe block (or at a spec file's top level): an isolated
-- $DSH_STATE_DIR for the block; sandboxes left there are killed in teardown.
function M.isolated_state()
  local setup, teardown = hooks(2)
  setup(helpers.isolate_state)
  teardown(helpers.restore_state)
end

--- In a describe block: isolated_state() and helpers.assert_clean after each test.
function M.use_state()
  local setup, teardown, before_each, after_each = hooks(2)
  setup(helpers.isolate_state)
  teardown(helpers.restore_state)
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)
end

--- In a describe block: use_state() plus one sandbox for the block, created
-- in setup (with opts, as dsh.sandbox.create takes them) and killed in
-- teardown. After each test the sandbox must run no process (assert_clean
-- checks it, and kills what is left so one failure stays one). Returns the
-- sandbox object, filled in when setup runs.
function M.use_sandbox(opts)
  local setup, teardown, before_each, after_each = hooks(2)
  local S = setmetatable({}, M.Shared)
  local stop_checking
  setup(function()
    helpers.isolate_state()
    M.sandbox(opts, S)
    stop_checking = helpers.add_clean_check(function() S:assert_idle() end)
  end)
  teardown(function()
    if stop_checking then stop_checking() end
    if S.id then S:kill() end
    helpers.restore_state()
  end)
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)
  return S
end

--- Run fn (inside the current task) but give up after the ceiling ms
-- (scaled: helpers.ceiling): raises "<what>: timed out after <ms> ms"
-- instead of hanging the spec run. What fn waits on keeps waiting until the
-- test's clients are closed.
function M.within(ms, what, fn)
  local tag, a, b, c = async.timeout(helpers.ceiling(ms), function() return "done", fn() end)
  if tag ~= "done" then error(what .. ": " .. tostring(a and a.message or a), 2) end
  return a, b, c
end

-- Sandboxes ------------------------------------------------------------------------

local Shared = {}
Shared.__index = Shared
M.Shared = Shared

--- Create a sandbox (call inside setup; use_sandbox does). Its handle is
-- closed at once: every test opens its own client with S:client(), so the
-- per-test leak check sees nothing of it. Fills into when given.
function M.sandbox(opts, into)
  local S = into or setmetatable({}, Shared)
  helpers.run(function()
    local sb = assert(sandbox.create(opts or {}))
    local meta = state.read_meta(sb.id)
    S.id, S.url, S.unix_socket = sb.id, not sb.envd.unix_socket and sb.envd.url or nil, sb.envd.unix_socket
    S.token, S.network = meta.token, sb.network
    sb:close()
  end)
  return S
end

--- A new envd client for the sandbox (token and user set). opts override.
function Shared:client(opts)
  local o = { url = self.url, unix_socket = self.unix_socket, access_token = self.token, user = "user" }
  for k, v in pairs(opts or {}) do o[k] = v end
  if o.access_token == false then o.access_token = nil end
  return envd.client(o)
end

--- Where raw requests reach the sandbox's dshd: host:port of a TCP listener,
-- else the path of its unix socket (local sandboxes are reached only so).
function Shared:addr()
  return self.url and self.url:match("^http://(.*)$") or self.unix_socket
end

--- Where the host reaches path of running sandbox id: through its first
-- process's root (its files may live in a disk image the host never
-- mounts). For specs only: dsh itself never looks inside a sandbox.
function M.inside(id, path)
  local rt = state.read_runtime(id)
  local pid = rt and rt.init and rt.init:match("^(%d+)")
  assert(pid, "sandbox " .. id .. " is not running")
  return "/proc/" .. pid .. "/root" .. path
end

--- The content of path (under /home/user or /tmp) of stopped sandbox id, as
-- it is stored (read from its disk image with debugfs), or nil.
function M.stored(id, path)
  local dir = state.dir(id)
  local rel = path:match("^/home/user(/.*)$") and "/home" .. path:sub(11) or path
  if not require("dsh.sandbox.disk").has_image(dir) then return sys.read_file(dir .. rel) end
  local out
  helpers.run(function()
    local p = assert(proc.spawn { argv = { "debugfs", "-R", "cat \"" .. rel .. "\"", dir .. "/disk.img" },
      env = { PATH = "/usr/sbin:/usr/bin:/sbin:/bin" }, stdout = "pipe", stderr = "pipe" })
    out = p:read_all()
    local err = p:read_all("stderr")
    p:wait()
    p:close()
    if err:find("not found", 1, true) then out = nil end
  end)
  return out
end

--- Every readable mapping of host process pid (its heap, stacks, data and
-- the rest), as one string: what a debugger could read of it (specs run as
-- root). Mappings of files are left out.
function M.memory_of(pid)
  local parts = {}
  local mem = assert(io.open("/proc/" .. pid .. "/mem", "rb"))
  for line in (sys.read_file("/proc/" .. pid .. "/maps") or ""):gmatch("[^\n]+") do
    local a, b, perms, path = line:match("^(%x+)%-(%x+) (%S+) %S+ %S+ %S+%s*(.*)$")
    if a and perms:sub(1, 1) == "r" and (path == "" or path:match("^%[")) then
      local from, to = tonumber(a, 16), tonumber(b, 16)
      if to - from <= 256 * 1048576 and mem:seek("set", from) then
        parts[#parts + 1] = mem:read(to - from) or ""
      end
    end
  end
  mem:close()
  return table.concat(parts)
end

--- Host path of the running sandbox's home (/home/user inside).
function Shared:home()
  return M.inside(self.id, "/home/user")
end

function Shared:kill()
  helpers.run(function() sandbox.kill(self.id) end)
end

--- Wait until the sandbox's dshd lists no process (the test left nothing
-- behind); otherwise kill what is left (so one failure stays one) and fail
-- with what was listed.
function Shared:assert_idle()
  local list
  helpers.run(function()
    local c = self:client()
    helpers.eventually(function()
      list = assert(c:list())
      return #list == 0
    end, 5000)
    for _, p in ipairs(list) do c:send_signal(p.pid, "SIGKILL", { group = true }) end
    c:close()
  end)
  assert(#list == 0, "processes left in the sandbox: " .. json.encode(list))
end

--- A client for the current test, closed when it ends (also on failure):
-- registered with busted's finally(), found in the calling spec's environment.
function Shared:test_client(opts)
  local c = self:client(opts)
  getfenv(2).finally(function() c:close() end)
  return c
end

--- Children of a host pid, recursively (from /proc/<pid>/task/*/children).
local function descendants(pid, out)
  out = out or {}
  local ok, iter, dir = pcall(lfs.dir, "/proc/" .. pid .. "/task")
  if not ok then return out end
  for tid in iter, dir do
    if tid:match("^%d+$") then
      for c in (sys.read_file("/proc/" .. pid .. "/task/" .. tid .. "/children") or ""):gmatch("%d+") do
        out[#out + 1] = tonumber(c)
        descendants(c, out)
      end
    end
  end
  return out
end
M.descendants = descendants

--- Host pid of the dshd serving sandbox id (below its supervisor), or nil.
function M.dshd_pid(id)
  local sup = state.supervisor_pid(id)
  if not sup then return nil end
  for _, p in ipairs(descendants(sup)) do
    if (sys.read_file("/proc/" .. p .. "/cmdline") or ""):find("^/opt/dsh/bin/dshd") then return p end
  end
end

--- VmRSS of a host pid in KiB (nil when it is gone).
function M.rss_kib(pid)
  local s = sys.read_file("/proc/" .. pid .. "/status")
  return s and tonumber(s:match("VmRSS:%s*(%d+)"))
end

--- Sample the RSS of pid every period_ms in a task until :stop(); :stop()
-- returns the peak in KiB and the number of samples.
function M.rss_sampler(pid, period_ms)
  local peak, n, running = 0, 0, true
  local task = async.run(function()
    while running do
      local r = M.rss_kib(pid)
      if r then
        n = n + 1
        if r > peak then peak = r end
      end
      async.sleep(period_ms or 20)
    end
  end)
  return {
    stop = function()
      running = false
      task:await()
      return peak, n
    end,
  }
end

-- Process streams ------------------------------------------------------------------

--- Open a raw process stream (path "/process.Process/Start" or "/Connect")
-- and read its first message, which must be the start event. Returns the
-- dsh.envd stream and the start event's fields.
function M.open_stream(c, path, msg, opts)
  local s = assert(c:stream(path, msg, opts))
  local first, err = s:next()
  if not first then
    s:close()
    return nil, err
  end
  assert(type(first.event) == "table" and type(first.event.start) == "table",
    "first message is not a start event: " .. json.encode(first))
  return s, first.event.start
end

--- Every remaining message of a raw stream: the list, and the stream's error
-- (nil when it ended with a clean end-of-stream). Closes the stream.
function M.drain(s)
  local msgs = {}
  while true do
    local m, err = s:next()
    if not m then
      s:close()
      return msgs, err
    end
    msgs[#msgs + 1] = m
  end
end

-- dsh.envd streams hand data events out already decoded (in C), as
-- {__data=true, stream=, data=, offset=} (offset nil when the event carried
-- none; a large event may come in several pieces); other messages are the
-- decoded JSON objects.

--- The event kind of each process stream message ("start", "data", "end", "keepalive").
function M.kinds(msgs)
  local out = {}
  for i, m in ipairs(msgs) do out[i] = m.__data and "data" or next(m.event or {}) or "?" end
  return out
end

--- Output of the data events of msgs, per stream: {stdout=, stderr=, pty=},
-- and the list of data events {stream=, data=, offset=}.
function M.output(msgs)
  local parts, events = { stdout = {}, stderr = {}, pty = {} }, {}
  for _, m in ipairs(msgs) do
    if m.__data then
      local list = assert(parts[m.stream], "data event of an unknown stream")
      list[#list + 1] = m.data
      events[#events + 1] = { stream = m.stream, data = m.data, offset = m.offset }
    end
  end
  return { stdout = table.concat(parts.stdout), stderr = table.concat(parts.stderr), pty = table.concat(parts.pty) },
    events
end

--- The end event of msgs (the raw JSON object), or nil.
function M.end_event(msgs)
  local last = msgs[#msgs]
  return last and last.event and last.event["end"]
end

-- Bare daemons ------------------------------------------------------------------------

--- Start build/bin/dshd on this host (no sandbox) with extra args, listening
-- on 127.0.0.1:0. opts.token: handed over on fd 0 (--access-token-fd 0).
-- Returns {proc=, addr=, url=, dir=, client=fn, stop=fn}. Call inside a task.
function M.bare(args, opts)
  opts = opts or {}
  local dir = helpers.tmpdir()
  local argv = { helpers.bin("dshd"), "--listen", opts.listen or "127.0.0.1:0", "--ready-file", dir .. "/ready" }
  if opts.token then
    argv[#argv + 1] = "--access-token-fd"
    argv[#argv + 1] = "0"
  end
  for _, a in ipairs(args or {}) do argv[#argv + 1] = a end
  local p = assert(proc.spawn {
    argv = argv, cwd = dir, stdin = opts.token and "pipe" or "null", stdout = "null",
    stderr = opts.stderr or "null",
    env = { PATH = "/usr/local/bin:/usr/bin:/bin", HOME = dir, LANG = "C.UTF-8" },
  })
  if opts.token then
    assert(p:write(opts.token))
    p:close_stdin()
  end
  local addr = helpers.eventually(function()
    local s = helpers.read_file(dir .. "/ready")
    return s and s:sub(-1) == "\n" and (s:gsub("%s+$", ""))
  end, 5000)
  if not addr then
    p:close()
    helpers.rm_rf(dir)
    error("bare dshd did not become ready", 2)
  end
  local d = { proc = p, addr = addr, dir = dir }
  d.url = addr:sub(1, 1) == "/" and "http://localhost" or "http://" .. addr
  function d.client(o)
    local co = { url = d.url, unix_socket = addr:sub(1, 1) == "/" and addr or nil, access_token = opts.token }
    for k, v in pairs(o or {}) do co[k] = v end
    return envd.client(co)
  end
  --- SIGTERM, wait, clean up; returns the exit status and (with
  -- opts.stderr = "pipe") everything dshd wrote to stderr.
  function d.stop()
    if not d.proc then return end
    d.proc:terminate(2000)
    local log = opts.stderr == "pipe" and d.proc:read_all("stderr") or nil
    local st = d.proc:wait()
    d.proc:wait_quiescent()
    d.proc:close()
    d.proc = nil
    helpers.rm_rf(dir)
    return st, log
  end
  return d
end

-- Raw HTTP ----------------------------------------------------------------------------

--- Send bytes to addr (host:port or a unix socket path) over a fresh
-- connection with spec/fixtures/rawhttp.c and return everything the server
-- answered. opts.close: close right after sending (the client goes away
-- mid-request; returns ""). opts.timeout_ms: quiet time that ends reading.
function M.raw(addr, bytes, opts)
  opts = opts or {}
  local argv = { helpers.fixture("rawhttp"), addr, "--timeout-ms", tostring(opts.timeout_ms or 3000) }
  if opts.close then argv[#argv + 1] = "--close" end
  local p = assert(proc.spawn { argv = argv, stdin = "pipe", stderr = "pipe" })
  local writer = async.run(function()
    p:write(bytes)
    p:close_stdin()
  end)
  local out = p:read_all()
  local err = p:read_all("stderr")
  writer:await()
  local st = p:wait()
  p:close()
  assert(st.exit_code == 0, "fixture-rawhttp failed: " .. tostring(err))
  return out
end

local function dechunk(body)
  local out, pos = {}, 1
  while true do
    local line_end = body:find("\r\n", pos, true)
    if not line_end then return nil, "truncated chunked body" end
    local size = tonumber(body:sub(pos, line_end - 1):match("^%x+"), 16)
    if not size then return nil, "bad chunk size" end
    if size == 0 then return table.concat(out) end
    out[#out + 1] = body:sub(line_end + 2, line_end + 1 + size)
    pos = line_end + 2 + size + 2
  end
end

--- Parse the first HTTP response in raw: status, headers (lower-case names),
-- body (de-chunked; by Content-Length when given), rest (bytes after it).
function M.parse_response(raw)
  local head_end = raw:find("\r\n\r\n", 1, true)
  if not head_end then return nil end
  local head = raw:sub(1, head_end - 1)
  local status = tonumber(head:match("^HTTP/1%.%d (%d%d%d)"))
  local headers = {}
  for name, value in head:gmatch("\r\n([^:\r\n]+):%s*([^\r\n]*)") do headers[name:lower()] = value end
  local rest = raw:sub(head_end + 4)
  local body
  if (headers["transfer-encoding"] or ""):lower():find("chunked") then
    body = dechunk(rest)
    rest = ""
  elseif headers["content-length"] then
    local n = tonumber(headers["content-length"])
    body, rest = rest:sub(1, n), rest:sub(n + 1)
  else
    body, rest = rest, ""
  end
  return status, headers, body, rest
end

--- An HTTP/1.1 request as bytes. headers: list of "Name: value" strings.
function M.request(method, path, headers, body)
  local lines = { method .. " " .. path .. " HTTP/1.1", "Host: localhost" }
  for _, h in ipairs(headers or {}) do lines[#lines + 1] = h end
  if body and not table.concat(headers or {}, "\n"):lower():find("content%-length") and
     not table.concat(headers or {}, "\n"):lower():find("transfer%-encoding") then
    lines[#lines + 1] = "Content-Length: " .. #body
  end
  return table.concat(lines, "\r\n") .. "\r\n\r\n" .. (body or "")
end

--- A Connect envelope: flags byte, 32-bit big-endian length, payload.
function M.envelope(flags, payload)
  local n = #payload
  return string.char(flags, math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
    math.floor(n / 256) % 256, n % 256) .. payload
end

--- Envelopes of a stream body: list of {flags=, msg=<decoded JSON>}.
function M.envelopes(body)
  local out, pos = {}, 1
  while pos <= #body do
    local b = { body:byte(pos, pos + 4) }
    local n = ((b[2] * 256 + b[3]) * 256 + b[4]) * 256 + b[5]
    out[#out + 1] = { flags = b[1], msg = json.decode(body:sub(pos + 5, pos + 4 + n)) }
    pos = pos + 5 + n
  end
  return out
end

return M
