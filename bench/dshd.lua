--- bench/dshd.lua: dshd's performance budgets (DESIGN.md), each against a
-- baseline measured in the same run. Run by bench/run (which sets LUA_PATH,
-- DSH_BUILD_DIR, DSH_STATE_DIR and DSH_BENCH_TMP); prints one table.
--
--   1 /bin/true round trip through dshd from the Lua envd client, against
--     posix_spawn + waitpid (bench/baselines.c); also from a minimal C client
--     (dshd's share), dsh.core.proc from Lua, with a user switch, against a dshd
--     inside a local sandbox, and the floor any RPC pays here (GET /health
--     against a TCP ping-pong); local sandbox create and kill, with and
--     without network, against bubblewrap starting /bin/true
--   2 the same round trip through the official E2B JS SDK (bench/node), which
--     runs `/bin/bash -l -c CMD`, against dsh's client running the same
--   3 1 GiB of stdout through dshd to the Lua client, against the same
--     producer writing into a pipe read by C; zeros and pseudo-random bytes
--   4 PTY keystroke echo through dshd against openpty + cat in C
--   5 dshd's resident memory: idle, after warm-up, streaming, 50 streams,
--     and after those processes' records expire (dshd A runs with
--     --exited-ttl-ms EXITED_TTL_MS so that the bench need not wait 60 s)
--
-- Everything is real: build/bin/dshd, require "dsh.envd", real processes.
-- Baselines and measurements alternate in blocks, so that load from other
-- work on the machine falls on both. Everything started is stopped at the
-- end, also on failure. A benchmark, not a test: it prints figures next to
-- the targets and asserts only that the work was done (exit codes, bytes).
local ffi = require "ffi"
local async = require "dsh.async"
local envd = require "dsh.envd"
local json = require "dsh.json"
local proc = require "dsh.core.proc"
local sys = require "dsh.core.sysutil"
local T = require "report"

local BUILD = os.getenv("DSH_BUILD_DIR") or "build"
local HERE = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$")) or "bench"
local BASELINES = BUILD .. "/bin/dsh-bench-baselines"
local DSHD = BUILD .. "/bin/dshd"

local BLOCKS, BLOCK_RUNS, WARMUP = 5, 200, 20 -- row 1: 1000 round trips per line
local FLOOR_RUNS = 1000                       -- row 1: GET /health, TCP ping-pong
local SANDBOX_RUNS = 500                      -- row 1, sandbox line
local CREATE_RUNS = 15                        -- row 1, sandbox create/kill lines (each)
local SDK_RUNS = 300                          -- row 2 (each line)
local GIB = 1073741824
local STREAM_REPS = 5                         -- row 3 (each line)
local PTY_RUNS = 500                          -- row 4
local CONCURRENT, CONCURRENT_BYTES = 50, 32 * 1048576 -- row 5
local RSS_PERIOD_MS = 10
local EXITED_TTL_MS = 3000                    -- row 5: dshd A's --exited-ttl-ms

-- Clock, CPU time, statistics ------------------------------------------------

ffi.cdef [[
int getpid(void);
]]
local SELF = tostring(ffi.C.getpid()) -- the host process (this LuaJIT)
local now = T.now

--- CPU time of a pid ("self" for us) in seconds, from the scheduler (ns).
local function cpu_s(pid)
  local s = sys.read_file("/proc/" .. pid .. "/schedstat")
  return s and tonumber(s:match("^(%d+)")) / 1e9 or 0
end

local function stats(samples)
  local s = {}
  for i, v in ipairs(samples) do s[i] = v end
  table.sort(s)
  local n = #s
  local med = n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
  return { median = med, p90 = s[math.ceil(n * 0.9)], n = n, min = s[1], max = s[n] }
end

local function append(into, list)
  for _, v in ipairs(list) do into[#into + 1] = v end
  return into
end

local function progress(fmt, ...)
  io.stderr:write("bench: ", string.format(fmt, ...), "\n")
end

-- Processes -------------------------------------------------------------------

local ENV = { PATH = os.getenv("PATH") or "/usr/local/bin:/usr/bin:/bin", HOME = os.getenv("HOME") or "/",
  LANG = "C.UTF-8" }

--- Run argv to completion; returns its stdout (raises on a non-zero exit).
local function run(argv, env, cwd)
  local p = assert(proc.spawn { argv = argv, env = env or ENV, cwd = cwd, stderr = "pipe" })
  local errs = async.run(function() return p:read_all("stderr") end)
  local out = p:read_all()
  local err = errs:await()
  local st = p:wait()
  p:close()
  if st.exit_code ~= 0 then
    error(table.concat(argv, " ") .. " failed (" .. tostring(st.exit_code or st.signal) .. "): " .. tostring(err), 2)
  end
  return out
end

--- The samples (milliseconds) a baselines mode prints on one line.
local function samples_of(out)
  local list = {}
  for v in out:gmatch("[%d.]+") do list[#list + 1] = tonumber(v) end
  return list
end
local function baseline_samples(...)
  return samples_of(run { BASELINES, ... })
end

local function rss_kib(pid)
  local s = sys.read_file("/proc/" .. pid .. "/status")
  return s and tonumber(s:match("VmRSS:%s*(%d+)"))
end

--- A sampler of pid's VmRSS every RSS_PERIOD_MS, in its own process (the
-- Lua loop may be too busy reading to sample on time). :stop() -> peak KiB.
local function rss_sampler(pid)
  local p = assert(proc.spawn { argv = { BASELINES, "rss", tostring(pid), tostring(RSS_PERIOD_MS) },
    env = ENV, stdin = "pipe", stderr = "null" })
  return {
    stop = function()
      p:close_stdin()
      local out = p:read_all()
      p:wait()
      p:close()
      return tonumber(out:match("^(%d+)")) or 0
    end,
  }
end

-- dshd ------------------------------------------------------------------------

local cleanups = {} -- run in reverse order at the end, also after a failure

local function start_dshd(dir, extra)
  sys.mkdir_p(dir)
  local argv = { DSHD, "--listen", "127.0.0.1:0", "--ready-file", dir .. "/ready" }
  for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
  local p = assert(proc.spawn { argv = argv, cwd = dir, stdout = "null", stderr = "null", env = ENV })
  local d = { proc = p, pid = p.pid }
  function d.stop()
    if d.client then d.client:close() end
    d.client = nil
    if not d.proc then return end
    d.proc:terminate(2000)
    d.proc:wait()
    d.proc:wait_quiescent()
    d.proc:close()
    d.proc = nil
  end
  cleanups[#cleanups + 1] = d.stop
  for _ = 1, 1000 do
    local s = sys.read_file(dir .. "/ready")
    if s and s:sub(-1) == "\n" then
      d.addr = s:gsub("%s+$", "")
      d.url = "http://" .. d.addr
      d.client = envd.client { url = d.url }
      return d
    end
    async.sleep(5)
  end
  error("dshd did not become ready: " .. table.concat(argv, " "))
end

--- Start cmd through the client and read its stream to the end (so the
-- connection is reused). Asserts exit code 0.
local function envd_run(c, cmd, args)
  local p = assert(c:start { cmd = cmd, args = args })
  while true do
    local ev, err = p:next()
    if not ev then
      assert(not err, tostring(err))
      break
    end
  end
  assert(p.result.exit_code == 0, "exit code " .. tostring(p.result.exit_code))
  p:close()
end

--- Milliseconds of each of runs calls of fn, after warmup untimed ones.
local function time_runs(runs, warmup, fn)
  for _ = 1, warmup do fn() end
  local ms = {}
  for i = 1, runs do
    local t = now()
    fn()
    ms[i] = (now() - t) * 1e3
  end
  return ms
end

--- Stream `bytes` of cmd's stdout to the client; returns GB/s.
local function envd_stream(c, cmd, args, bytes)
  local t = now()
  local p = assert(c:start { cmd = cmd, args = args })
  local n = 0
  while true do
    local ev, err = p:next()
    if not ev then
      assert(not err, tostring(err))
      break
    end
    if ev.type == "data" then n = n + #ev.data end
  end
  local secs = now() - t
  p:close()
  assert(n == bytes, "streamed " .. n .. " bytes, expected " .. bytes)
  return bytes / secs / 1e9
end

-- The table -----------------------------------------------------------------------

local function line(t) T.row(t) end

local function ms(s) return string.format("%.3f ms [%.3f]", s.median, s.p90) end
local function ms_short(s) return string.format("%.3f ms", s.median) end
local function gbs(s) return string.format("%.2f GB/s [%.2f-%.2f]", s.median, s.min, s.max) end
local function mib(kib) return string.format("%.1f MiB", kib / 1024) end

local function has_user(name)
  return (sys.read_file("/etc/passwd") or ""):find("\n" .. name .. ":", 1, true) ~= nil
end

-- Rows ---------------------------------------------------------------------------

local function row1(A, B)
  progress("1/5 /bin/true round trips (%d blocks of %d, alternating)", BLOCKS, BLOCK_RUNS)
  local spawn, rt, rt_b, rt_c, luaproc = {}, {}, {}, {}, {}
  for _ = 1, BLOCKS do
    append(spawn, baseline_samples("spawn", tostring(BLOCK_RUNS)))
    append(rt, time_runs(BLOCK_RUNS, 5, function() envd_run(A.client, "/bin/true") end))
    append(rt_c, baseline_samples("start", A.addr, tostring(BLOCK_RUNS)))
    append(luaproc, time_runs(BLOCK_RUNS, 5, function()
      local p = assert(proc.spawn { argv = { "/bin/true" }, stdout = "null", stderr = "null" })
      p:wait()
      p:close()
    end))
    if B then append(rt_b, time_runs(BLOCK_RUNS, 5, function() envd_run(B.client, "/bin/true") end)) end
  end
  spawn, rt, rt_c, luaproc = stats(spawn), stats(rt), stats(rt_c), stats(luaproc)
  local function over(s) return string.format("%+.3f ms", s.median - spawn.median) end
  line { row = "1", name = "/bin/true round trip, Lua client -> dshd", value = ms(rt),
    baseline = "posix_spawn+waitpid " .. ms(spawn), compare = over(rt), target = "<= +0.200 ms",
    ok = rt.median - spawn.median <= 0.2 }
  line { name = "  same, minimal C client (dshd's share)", value = ms(rt_c), baseline = "posix_spawn+waitpid",
    compare = over(rt_c) }
  line { name = "  dsh.core.proc spawn+wait from Lua (no dshd)", value = ms(luaproc), baseline = "posix_spawn+waitpid",
    compare = over(luaproc) }
  if B then
    rt_b = stats(rt_b)
    line { name = "  same, commands as " .. B.user .. " (user switch)", value = ms(rt_b),
      baseline = "posix_spawn+waitpid", compare = over(rt_b) }
  end

  progress("1/5 ... the floor of any RPC here (%d GET /health, %d TCP ping-pongs)", FLOOR_RUNS, FLOOR_RUNS)
  local pingpong = stats(baseline_samples("pingpong", tostring(FLOOR_RUNS)))
  local health = stats(time_runs(FLOOR_RUNS, WARMUP, function() assert(A.client:health()) end))
  line { name = "  floor: GET /health, Lua client -> dshd", value = ms(health),
    baseline = "TCP ping-pong in C " .. ms(pingpong), compare = string.format("%+.3f ms",
      health.median - pingpong.median) }

  progress("1/5 ... and through a dshd in a local sandbox (%d runs)", SANDBOX_RUNS)
  local sandbox = require "dsh.sandbox"
  local sb, serr = sandbox.create { timeoutMs = 600000 }
  if sb then
    cleanups[#cleanups + 1] = function() sb:kill() end
    local sbrt = stats(time_runs(SANDBOX_RUNS, WARMUP, function() envd_run(sb.envd, "/bin/true") end))
    line { name = "  same, dshd in a local sandbox (bwrap)", value = ms(sbrt), baseline = "posix_spawn+waitpid",
      compare = over(sbrt) }
    sb:kill()
    cleanups[#cleanups] = nil
  else
    line { name = "  same, dshd in a local sandbox (bwrap)", value = "skipped: " .. tostring(serr) }
    return rt
  end

  progress("1/5 ... local sandbox create and kill (%d of each kind, alternating)", CREATE_RUNS)
  local bare, created, killed = {}, { [true] = {}, [false] = {} }, { [true] = {}, [false] = {} }
  local bwrap = sys.which("bwrap") or "/usr/bin/bwrap"
  for _ = 1, CREATE_RUNS do
    local t0 = now()
    local p = assert(proc.spawn { argv = { bwrap, "--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink",
      "usr/lib64", "/lib64", "--symlink", "usr/lib", "/lib", "--", "/usr/bin/true" }, env = ENV, stdout = "null" })
    assert(p:wait().exit_code == 0, "bwrap /usr/bin/true failed")
    p:close()
    bare[#bare + 1] = (now() - t0) * 1000
    for _, net in ipairs { true, false } do
      t0 = now()
      local s = assert(sandbox.create { timeoutMs = 600000, network = net })
      created[net][#created[net] + 1] = (now() - t0) * 1000
      t0 = now()
      assert(s:kill())
      killed[net][#killed[net] + 1] = (now() - t0) * 1000
    end
  end
  bare = stats(bare)
  local function vs(st) return string.format("%+.1f ms", st.median - bare.median) end
  for _, net in ipairs { true, false } do
    local c, k = stats(created[net]), stats(killed[net])
    local what = net and "network = true" or "network = false"
    line { name = "  local sandbox create, " .. what, value = ms(c), baseline = "bwrap /bin/true " .. ms(bare),
      compare = vs(c) }
    line { name = "  local sandbox kill, " .. what, value = ms(k), baseline = "bwrap /bin/true", compare = vs(k) }
  end
  return rt
end

local function row2(B, rt)
  progress("2/5 E2B JS SDK commands.run against dsh's client (%d runs each)", SDK_RUNS)
  local name = "E2B JS SDK run('/bin/true') (bash -l -c)"
  local skip = os.getenv("DSH_BENCH_NODE_SKIP")
  if skip then
    line { row = "2", name = name, value = "skipped: " .. skip }
    return
  end
  local bash_args = { "-l", "-c", "/bin/true" }
  local half = math.floor(SDK_RUNS / 2)
  local dsh = time_runs(half, WARMUP, function() envd_run(B.client, "/bin/bash", bash_args) end)
  local env = { PATH = ENV.PATH, HOME = ENV.HOME, E2B_SANDBOX_URL = B.url }
  local ok, out = pcall(run, { "node", HERE .. "/node/roundtrip.mjs", tostring(SDK_RUNS), tostring(WARMUP),
    "/bin/true" }, env, HERE .. "/node")
  local res = ok and json.decode(out:match("[^\n]*")) or nil
  if type(res) ~= "table" or type(res.ms) ~= "table" or #res.ms == 0 then
    local why = ok and "no timings in its output" or tostring(out):gsub("%s+", " "):sub(1, 160)
    line { row = "2", name = name, value = "skipped: the SDK run failed: " .. why }
    return
  end
  local sdk = stats(res.ms)
  dsh = stats(append(dsh, time_runs(SDK_RUNS - half, 0, function() envd_run(B.client, "/bin/bash", bash_args) end)))
  -- the command itself, spawned directly with the environment dshd B gives it
  local home = B.user == "nobody" and "/nonexistent" or ENV.HOME
  local raw = stats(samples_of(run({ BASELINES, "spawn", tostring(SDK_RUNS), "/bin/bash", "-l", "-c", "/bin/true" },
    { PATH = ENV.PATH, HOME = home, USER = B.user, LOGNAME = B.user }, "/tmp")))
  line { row = "2", name = name, value = ms(sdk), baseline = "dsh client, same bash -l -c " .. ms_short(dsh),
    compare = string.format("dsh %.2fx faster", sdk.median / dsh.median), target = "dsh >= 2x faster",
    ok = sdk.median / dsh.median >= 2 }
  -- dsh's share can come out at or below zero (bash -l alone is the noisier
  -- figure): floored at 0.05 ms so that the ratio stays meaningful
  local added = (sdk.median - raw.median) / math.max(dsh.median - raw.median, 0.05)
  line { name = "  time added to the command, SDK vs dsh", value = string.format("%+.3f ms", sdk.median - raw.median),
    baseline = string.format("dsh %+.3f ms (bash -l alone %.2f)", dsh.median - raw.median, raw.median),
    compare = string.format("dsh adds %.1fx less", added), target = "dsh >= 2x less", ok = added >= 2 }
  line { name = "  dsh client, plain /bin/true (row 1)", value = ms(rt), baseline = "the SDK's bash -l -c run",
    compare = string.format("dsh %.2fx faster", sdk.median / rt.median) }
end

local function row3(A)
  progress("3/5 1 GiB of stdout, %d times each (zeros, pseudo-random), alternating with the pipe", STREAM_REPS)
  local peak, host_peak = 0, 0
  local kinds = {
    { name = "stdout 1 GiB, head -c 1G /dev/zero", kind = "zero", cmd = "head",
      args = function(n) return { "-c", tostring(n), "/dev/zero" } end, row = "3" },
    { name = "  same, pseudo-random bytes (bench gen)", kind = "random", cmd = BASELINES,
      args = function(n) return { "gen", tostring(n) } end },
  }
  for _, k in ipairs(kinds) do
    envd_stream(A.client, k.cmd, k.args(64 * 1048576), 64 * 1048576) -- warm-up
    local base, rates, dshd_cpu, lua_cpu = {}, {}, 0, 0
    local sampler, host = rss_sampler(A.pid), rss_sampler(SELF)
    for i = 1, STREAM_REPS do
      local bytes, secs = run({ BASELINES, "pipe", tostring(GIB), k.kind }):match("(%d+) ([%d.]+)")
      base[i] = tonumber(bytes) / tonumber(secs) / 1e9
      local d0, l0 = cpu_s(A.pid), cpu_s("self")
      rates[i] = envd_stream(A.client, k.cmd, k.args(GIB), GIB)
      dshd_cpu, lua_cpu = dshd_cpu + cpu_s(A.pid) - d0, lua_cpu + cpu_s("self") - l0
    end
    peak = math.max(peak, sampler.stop())
    host_peak = math.max(host_peak, host.stop())
    local s, b = stats(rates), stats(base)
    line { row = k.row, name = k.name, value = gbs(s), baseline = "pipe, same producer " .. gbs(b),
      compare = string.format("%.2fx of pipe", s.median / b.median), target = "> 1 GB/s", ok = s.median > 1 }
    line { name = string.format("    CPU per GiB: dshd %.2f s, Lua client %.2f s", dshd_cpu / STREAM_REPS,
      lua_cpu / STREAM_REPS) }
  end
  return peak, host_peak
end

local function row4(A)
  progress("4/5 PTY keystroke echo (%d blocks of %d keystrokes, alternating)", BLOCKS, PTY_RUNS / BLOCKS)
  local c = A.client
  local p = assert(c:start { cmd = "/bin/cat", pty = { rows = 24, cols = 80 } })
  local function read_bytes(n)
    local got = 0
    while got < n do
      local ev = assert(p:next())
      assert(ev.type == "data", "pty stream ended early")
      got = got + #ev.data
    end
  end
  local direct, echo, rpc = {}, {}, {}
  for b = 1, BLOCKS do
    append(direct, baseline_samples("pty", tostring(PTY_RUNS / BLOCKS)))
    for i = b == 1 and -WARMUP or 1, PTY_RUNS / BLOCKS do
      local t = now()
      assert(c:send_pty(p.pid, "x"))
      local t_rpc = now()
      read_bytes(1)
      if i >= 1 then
        echo[#echo + 1] = (now() - t) * 1e3
        rpc[#rpc + 1] = (t_rpc - t) * 1e3
      end
      assert(c:send_pty(p.pid, "\127")) -- erase it: the terminal echoes "\b \b"
      read_bytes(3)
    end
  end
  assert(c:send_pty(p.pid, "\4"))
  while p:next() do end
  p:close()
  local es, rs, ds = stats(echo), stats(rpc), stats(direct)
  line { row = "4", name = "PTY keystroke echo through dshd (cat)", value = ms(es),
    baseline = "openpty + cat " .. ms(ds), compare = string.format("%+.3f ms", es.median - ds.median),
    target = "< 0.300 ms", ok = es.median < 0.3 }
  line { name = "  of which the SendInput call returns", value = ms(rs) }
end

local function row5(A, rss_start, rss_warm, stream_peak, host)
  progress("5/5 dshd RSS with %d concurrent streams of %d MiB", CONCURRENT, CONCURRENT_BYTES / 1048576)
  local sampler, host_sampler = rss_sampler(A.pid), rss_sampler(SELF)
  local t = now()
  local tasks = {}
  for i = 1, CONCURRENT do
    tasks[i] = async.run(function()
      local ci = envd.client { url = A.url }
      envd_stream(ci, "head", { "-c", tostring(CONCURRENT_BYTES), "/dev/zero" }, CONCURRENT_BYTES)
      ci:close()
    end)
  end
  for i = 1, CONCURRENT do tasks[i]:await() end
  local agg = CONCURRENT * CONCURRENT_BYTES / (now() - t) / 1e9
  local conc_peak, host_conc = sampler.stop(), host_sampler.stop()
  async.sleep(1500) -- past dshd's next sweep, which trims the heap once no stream is open
  local rss_after = rss_kib(A.pid)
  async.sleep(EXITED_TTL_MS) -- every record has expired
  local rss_expired = rss_kib(A.pid)
  line { row = "5", name = "dshd RSS idle, after startup", value = mib(rss_start), target = "< 8 MiB",
    ok = rss_start < 8 * 1024 }
  line { name = "  idle, after a warm-up of " .. WARMUP .. " commands", value = mib(rss_warm), target = "< 8 MiB",
    ok = rss_warm < 8 * 1024 }
  line { name = "  peak while streaming 1 GiB (row 3)", value = mib(stream_peak),
    compare = string.format("%+.1f MiB", (stream_peak - rss_warm) / 1024), target = "bounded" }
  line { name = string.format("  peak, %d processes streaming at once", CONCURRENT), value = mib(conc_peak),
    compare = string.format("%+.2f MiB each", (conc_peak - rss_warm) / 1024 / CONCURRENT), target = "bounded" }
  line { name = string.format("    (%d x %d MiB, %.2f GB/s in all)", CONCURRENT, CONCURRENT_BYTES / 1048576, agg) }
  line { name = "  1.5 s after them (their records kept)", value = mib(rss_after),
    compare = string.format("%+.1f MiB", (rss_after - rss_warm) / 1024) }
  line { name = string.format("  after the records expired (--exited-ttl-ms %d)", EXITED_TTL_MS),
    value = mib(rss_expired), compare = string.format("%+.1f MiB", (rss_expired - rss_warm) / 1024),
    target = "near idle (+2 MiB)", ok = rss_expired - rss_warm < 2 * 1024 }
  local host_end = rss_kib(SELF)
  line { name = "host (LuaJIT) RSS idle, after warm-up", value = mib(host.warm) }
  line { name = "  host peak while streaming 1 GiB (row 3)", value = mib(host.stream),
    compare = string.format("%+.1f MiB", (host.stream - host.warm) / 1024), target = "bounded" }
  line { name = string.format("  host peak, %d streams at once", CONCURRENT), value = mib(host_conc),
    compare = string.format("%+.1f MiB", (host_conc - host.warm) / 1024), target = "bounded" }
  line { name = "  host after all of them", value = mib(host_end),
    compare = string.format("%+.1f MiB", (host_end - host.warm) / 1024) }
end

-- Main ---------------------------------------------------------------------------

local function main()
  local tmp = os.getenv("DSH_BENCH_TMP")
  if not tmp then -- run without bench/run: a directory of our own, removed at the end
    tmp = (os.getenv("TMPDIR") or "/tmp") .. "/dsh-bench-" .. sys.random_hex(4)
    cleanups[#cleanups + 1] = function() sys.rm_rf(tmp) end
  end
  -- A: bare, as it comes (root here: no user switch, like the C baseline).
  local A = start_dshd(tmp .. "/dshd-a", { "--exited-ttl-ms", tostring(EXITED_TTL_MS) })
  -- B: runs commands as an unprivileged user. As root, `bash -l` would read
  -- root's ~/.profile, which on a developer machine measures the dotfiles.
  local B
  if has_user("nobody") then
    B = start_dshd(tmp .. "/dshd-b", { "--user", "nobody", "--workdir", "/tmp" })
    B.user = "nobody"
  else
    B = A
    B.user = "dshd's own user"
  end
  T.section("dshd: commands, streams, PTY, memory", string.format("bare dshd %s; medians [p90] of %d round trips "
    .. "per line (sandbox %d, SDK %d), [min-max] of %d x 1 GiB, %d keystrokes", A.addr, BLOCKS * BLOCK_RUNS,
    SANDBOX_RUNS, SDK_RUNS, STREAM_REPS, PTY_RUNS))
  async.sleep(100)
  local rss_start = rss_kib(A.pid)
  for _ = 1, WARMUP do envd_run(A.client, "/bin/true") end
  local rss_warm = rss_kib(A.pid)

  local rt = row1(A, B ~= A and B or nil)
  row2(B, rt)
  local host = { warm = rss_kib(SELF) }
  local stream_peak
  stream_peak, host.stream = row3(A)
  row4(A)
  row5(A, rss_start, rss_warm, stream_peak, host)

  T.print()
end

local ok, err = xpcall(function() async.run(main):await() end, debug.traceback)
async.run(function()
  for i = #cleanups, 1, -1 do pcall(cleanups[i]) end
end):await()
if not ok then
  io.stderr:write("bench/dshd.lua: ", tostring(err), "\n")
  os.exit(1)
end
