--- bench/load.lua: `make load`. Everything at once on one real local sandbox,
-- then many sandboxes in a row; throughput, latency percentiles and memory.
--
--   1 64 concurrent command streams of 16 MiB each (`cat` of pseudo-random
--     files made in the sandbox), each on its own connection, byte-exact:
--     the sha256 of what arrived (dsh.core.sha256) against sha256sum in the sandbox
--   2 32 PTY sessions (ctx.pty, pty-e2b) producing 2 MB of output each at once
--   3 16 LSP callers in parallel on two workspaces (clangd through ctx.lsp)
--   4 32 concurrent Code Mode runs making binding calls, in Lua, then in
--     JavaScript (when the sandbox has Node)
--   5 1 GiB uploaded and downloaded through /files, streamed, byte-exact
--     (sha256 on the host against sha256sum in the sandbox)
--   6 1000 sandboxes created and killed in sequence
-- Memory: peaks of the host process and of the sandbox's dshd during each
-- part (sampled every 10 ms by dsh-bench-baselines rss, outside this loop).
-- Afterwards nothing may be left (bench/leftovers.lua). Each part is bounded
-- in time (a part past its deadline fails, it does not hang the run).
--
--   luajit bench/load.lua [--scale F] [--sandboxes N]
-- --scale multiplies the sizes and counts of parts 1-5 (default 1: the figures
-- above); through bench/run, which sets LUA_PATH, DSH_BUILD_DIR and
-- DSH_STATE_DIR. Exits non-zero when a check failed or something was left.
local async = require "dsh.async"
local context = require "dsh.context"
local envd = require "dsh.envd"
local lsp = require "dsh.lsp"
local node = require "dsh.node"
local proc = require "dsh.core.proc"
local sandbox = require "dsh.sandbox"
local sha256 = require "dsh.core.sha256"
local state = require "dsh.sandbox.state"
local sys = require "dsh.core.sysutil"
local L = require "leftovers"
local T = require "report"

local opts = { scale = 1, sandboxes = 1000 }
do
  local i = 1
  while arg[i] do
    local k = arg[i]:match("^%-%-(.+)$")
    if not k or opts[k] == nil or not tonumber(arg[i + 1]) then
      io.stderr:write("usage: load.lua [--scale F] [--sandboxes N]\n")
      os.exit(2)
    end
    opts[k] = tonumber(arg[i + 1])
    i = i + 2
  end
end
local function scaled(n) return math.max(1, math.floor(n * opts.scale + 0.5)) end
local MIB = 1048576
local STREAMS, STREAM_BYTES, STREAM_FILES = scaled(64), 16 * MIB, 4
local PTYS, PTY_BYTES = scaled(32), 2000000
local LSP_CALLERS, LSP_SECONDS = scaled(16), 5
local CODE_RUNS, CODE_CALLS = scaled(32), 200
local FILE_BYTES = scaled(1024) * MIB
local SANDBOXES = opts.sandboxes
local BASELINES = (os.getenv("DSH_BUILD_DIR") or "build") .. "/bin/dsh-bench-baselines"
local SELF = tostring(sys.getpid())

local SERVERS = { clangd = { command = "clangd", args = { "--log=error" }, extensionToLanguage = { [".c"] = "c" } } }
local SOURCE = "static int square_area(int side) { return side * side; }\nint total(void) { return square_area(3); }\n"
local POS = lsp.position.from_index(SOURCE, (SOURCE:find("square_area(3)", 1, true)))

local function progress(fmt, ...) io.stderr:write("load: ", string.format(fmt, ...), "\n") end

local function need(cond, fmt, ...)
  if not cond then error(string.format(fmt, ...), 0) end
end

local function cpu_s(pid) -- CPU time from the scheduler, seconds
  local f = io.open("/proc/" .. pid .. "/schedstat")
  local v = f and tonumber(f:read("*l"):match("^(%d+)")) or 0
  if f then f:close() end
  return v / 1e9
end

local cpu = {} -- CPU seconds of the host and dshd during the last peaks()

--- Peak VmRSS (KiB) of each pid while fn runs, sampled by a process of its
--- own; the CPU time each used is left in `cpu`.
local function peaks(pids, fn)
  local samplers = {}
  for i, pid in ipairs(pids) do
    samplers[i] = assert(proc.spawn { argv = { BASELINES, "rss", tostring(pid), "10" }, stdin = "pipe",
      stderr = "null", env = { PATH = "/usr/bin:/bin" } })
  end
  local c0 = {}
  for i, pid in ipairs(pids) do c0[i] = cpu_s(pid) end
  local ok, err = pcall(fn)
  for i, pid in ipairs(pids) do cpu[i] = cpu_s(pid) - c0[i] end
  local out = {}
  for i, p in ipairs(samplers) do
    p:close_stdin()
    out[i] = tonumber(p:read_all():match("^(%d+)")) or 0
    p:wait()
    p:close()
  end
  if not ok then error(err, 0) end
  return out
end

local function mib(kib) return string.format("%.1f MiB", kib / 1024) end
--- Peak RSS and CPU seconds of the host and dshd, for the compare column.
local function mem(pk, c)
  c = c or cpu
  return string.format("peak RSS host %s, dshd %s; CPU host %.1f s, dshd %.1f s", mib(pk[1]), mib(pk[2]),
    c[1] or 0, c[2] or 0)
end
local function pcts(s, unit, fmt)
  fmt = fmt or "%.1f"
  return string.format(fmt .. " / " .. fmt .. " / " .. fmt .. " %s", s.p50, s.p90, s.p99, unit)
end

--- Run fn(i) for i = 1..n as concurrent tasks; raises the first failure.
local function all(n, fn)
  local tasks = {}
  for i = 1, n do tasks[i] = async.run(function() return { pcall(fn, i) } end) end
  local first
  for i = 1, n do
    local r = tasks[i]:await()
    if not r[1] and not first then first = r[2] end
  end
  if first then error(first, 0) end
end

local function row(t) T.row(t) end

-- 1: command streams ----------------------------------------------------------------

local function part_streams(ctx, sb, dshd)
  progress("1/6 %d concurrent streams of %d MiB", STREAMS, STREAM_BYTES / MIB)
  local want = {}
  for k = 1, STREAM_FILES do
    local r = assert(ctx.e2b:exec { "bash", "-c", string.format("head -c %d /dev/urandom > /tmp/load-%d && "
      .. "sha256sum /tmp/load-%d", STREAM_BYTES, k, k) })
    need(r.exit_code == 0, "making /tmp/load-%d failed: %s", k, tostring(r.stderr))
    want[k] = r.stdout:match("^(%x+)")
  end
  local meta = state.read_meta(sb.id)
  local secs, ttfb = {}, {}
  local t0 = T.now()
  local pk = peaks({ SELF, dshd }, function()
    all(STREAMS, function(i)
      local c = envd.client { unix_socket = state.socket(sb.id), access_token = meta.token, user = "user" }
      local k = (i - 1) % STREAM_FILES + 1
      local t = T.now()
      local p = assert(c:start { cmd = "cat", args = { "/tmp/load-" .. k } })
      local h, n, first = sha256.new(), 0, nil
      while true do
        local ev, err = p:next()
        if not ev then
          need(not err, "stream %d: %s", i, tostring(err))
          break
        end
        if ev.type == "data" and ev.stream == "stdout" then
          first = first or T.now()
          h:update(ev.data)
          n = n + #ev.data
        end
      end
      need(p.result and p.result.exit_code == 0, "stream %d: exit %s", i, tostring(p.result and p.result.exit_code))
      p:close()
      c:close()
      local got = h:hex()
      need(n == STREAM_BYTES and got == want[k], "stream %d: %d bytes, sha256 %s, expected %s", i, n, got, want[k])
      secs[i] = T.now() - t
      ttfb[i] = ((first or T.now()) - t) * 1e3
    end)
  end)
  local wall = T.now() - t0
  local rates = {}
  for i, s in ipairs(secs) do rates[i] = STREAM_BYTES / s / 1e6 end
  row { row = "1", name = string.format("%d streams x %d MiB, byte-exact (sha256)", STREAMS, STREAM_BYTES / MIB),
    value = string.format("%.2f GB/s in all", STREAMS * STREAM_BYTES / wall / 1e9),
    baseline = string.format("%.1f s wall", wall), compare = mem(pk) }
  row { name = "  per stream MB/s p50 / p90 / p99 (lower is slower)", value = pcts(T.stats(rates), "MB/s") }
  row { name = "  per stream completion p50 / p90 / p99", value = pcts(T.stats(secs), "s", "%.2f") }
  row { name = "  first byte p50 / p90 / p99", value = pcts(T.stats(ttfb), "ms") }
  assert(ctx.e2b:exec { "bash", "-c", "rm -f /tmp/load-*" })
end

-- 2: PTYs ---------------------------------------------------------------------------

local function part_ptys(ctx, dshd)
  progress("2/6 %d PTY sessions producing %d MB each at once", PTYS, PTY_BYTES / 1e6)
  local owner = { id = "load" }
  local sessions = {}
  all(PTYS, function(i) sessions[i] = assert(ctx.pty:spawn(owner, { type = "shell" })) end)
  local secs = {}
  local t0 = T.now()
  local pk = peaks({ SELF, dshd }, function()
    all(PTYS, function(i)
      local s = sessions[i]
      local fed0 = s._screen:info().fed
      local t = T.now()
      local op = assert(ctx.pty:startSend(owner, s.id, { text = "yes 'the quick brown fox jumps over the lazy dog "
        .. i .. "' | head -c " .. PTY_BYTES .. "; echo", submit = true }))
      local r = assert(op:wait())
      need(r.waitReason == "stdin_read", "pty %d: %s", i, tostring(r.waitReason))
      local fed = s._screen:info().fed - fed0
      need(fed >= PTY_BYTES, "pty %d: the session saw %d bytes", i, fed)
      secs[i] = T.now() - t
    end)
  end)
  local wall = T.now() - t0
  for i = 1, PTYS do assert(ctx.pty:kill(owner, sessions[i].id)) end
  row { row = "2", name = string.format("%d PTYs x %d MB of output at once", PTYS, PTY_BYTES / 1e6),
    value = string.format("%.1f MB/s in all", PTYS * PTY_BYTES / wall / 1e6),
    baseline = string.format("%.1f s wall", wall), compare = mem(pk) }
  row { name = "  per session completion p50 / p90 / p99", value = pcts(T.stats(secs), "s", "%.2f") }
end

-- 3: LSP ----------------------------------------------------------------------------

local function part_lsp(ctx, dshd)
  progress("3/6 %d LSP callers on two workspaces for %d s", LSP_CALLERS, LSP_SECONDS)
  local cwd = ctx.e2b.cwd
  local ws = { cwd .. "/ws-a", cwd .. "/ws-b" }
  for _, w in ipairs(ws) do
    assert(ctx.fs:makeDir(w))
    assert(ctx.fs:writeText(w .. "/area.c", SOURCE, { createIfAbsent = true }))
    local r = assert(ctx.lsp:query { operation = "hover", filePath = "area.c", position = POS, workspaceRoot = w })
    need(r.hover, "no hover in %s", w)
  end
  local lat, n = {}, 0
  local stop = T.now() + LSP_SECONDS
  local pk = peaks({ SELF, dshd }, function()
    all(LSP_CALLERS, function(i)
      local w = ws[(i - 1) % 2 + 1]
      local op = i % 2 == 0 and "hover" or "goToDefinition"
      while T.now() < stop do
        local t = T.now()
        local r, err = ctx.lsp:query { operation = op, filePath = "area.c", position = POS, workspaceRoot = w }
        need(r, "lsp caller %d: %s", i, tostring(err and err.message))
        need(op == "hover" and r.hover and r.hover.contents:find("square_area", 1, true)
          or op ~= "hover" and r.locations and r.locations[1], "lsp caller %d: wrong answer", i)
        lat[#lat + 1] = (T.now() - t) * 1e3
        n = n + 1
      end
    end)
  end)
  row { row = "3", name = string.format("%d LSP callers, 2 workspaces (hover, definition)", LSP_CALLERS),
    value = string.format("%.0f queries/s", n / LSP_SECONDS), compare = mem(pk) }
  row { name = "  query latency p50 / p90 / p99", value = pcts(T.stats(lat), "ms", "%.2f") }
end

-- 4: Code Mode ------------------------------------------------------------------------

local function part_code(ctx, dshd)
  for _, lang in ipairs { "lua", "javascript" } do
    if lang == "javascript" and not node.dir() then
      row { name = "  JavaScript runs", value = "skipped: no Node in the sandbox" }
      break
    end
    progress("4/6 %d concurrent %s runs, %d binding calls each", CODE_RUNS, lang, CODE_CALLS)
    local calls = 0
    local B = { { global = "tools", functions = { add = function(a, b)
      calls = calls + 1
      return a + b
    end } } }
    local program = lang == "lua"
      and ("local s = 0 for k = 1, " .. CODE_CALLS .. " do s = tools.add(s, 1) end return s")
      or ("let s = 0; for (let k = 0; k < " .. CODE_CALLS .. "; k++) s = await tools.add(s, 1); return s;")
    local lat = {}
    local t0 = T.now()
    local pk = peaks({ SELF, dshd }, function()
      all(CODE_RUNS, function(i)
        local t = T.now()
        local r = ctx.codeRuntime:run { language = lang, program = program, bindings = B }
        need(not r.error and r.value == CODE_CALLS, "%s run %d: %s", lang, i,
          r.error and (r.error.kind .. ": " .. r.error.message) or tostring(r.value))
        lat[i] = (T.now() - t) * 1e3
      end)
    end)
    local wall = T.now() - t0
    need(calls == CODE_RUNS * CODE_CALLS, "%d binding calls reached the host", calls)
    row { row = lang == "lua" and "4" or "", name = string.format("%d concurrent %s runs x %d binding calls", CODE_RUNS,
      lang == "lua" and "Lua" or "JavaScript", CODE_CALLS), value = string.format("%.0f calls/s", calls / wall),
      baseline = string.format("%.2f s wall", wall), compare = mem(pk) }
    row { name = "  run latency p50 / p90 / p99", value = pcts(T.stats(lat), "ms", "%.0f") }
  end
end

-- 5: files --------------------------------------------------------------------------

local function part_files(ctx, sb, dshd)
  progress("5/6 %d MiB up and down through /files", FILE_BYTES / MIB)
  local f = assert(io.open("/dev/urandom", "rb"))
  local blocks = {}
  for k = 1, 16 do blocks[k] = f:read(MIB) end
  f:close()
  local c = sb.envd
  local path = ctx.e2b.cwd .. "/load-1g.bin"
  local up_hash, sent = sha256.new(), 0
  local t = T.now()
  local up_ok, up_err
  local heap_peak = collectgarbage("count")
  local pk_up = peaks({ SELF, dshd }, function()
    up_ok, up_err = c:write_file(path, function()
      if sent >= FILE_BYTES then return nil end
      -- 16 random blocks in an order that never repeats a pair: no two MiB alike
      local k = (sent / MIB) % 16 + 1
      local b = blocks[k]:sub(1, 16) .. string.format("%016x", sent) .. blocks[k]:sub(33)
      sent = sent + #b
      up_hash:update(b)
      if sent % (16 * MIB) == 0 then heap_peak = math.max(heap_peak, collectgarbage("count")) end
      return b
    end)
  end)
  local up_s = T.now() - t
  local up_cpu = { cpu[1], cpu[2] }
  need(up_ok, "upload: %s", tostring(up_err and up_err.message))
  local want = up_hash:hex()
  local r = assert(ctx.e2b:exec { "sha256sum", path })
  need(r.stdout:match("^(%x+)") == want, "upload: sha256 in the sandbox %s, sent %s", tostring(r.stdout), want)
  local down_hash, got = sha256.new(), 0
  t = T.now()
  local pk_down = peaks({ SELF, dshd }, function()
    local rd = assert(c:open_file(path))
    while true do
      local chunk, err = rd:read()
      if not chunk then
        need(not err, "download: %s", tostring(err and err.message))
        break
      end
      down_hash:update(chunk)
      got = got + #chunk
      if got % (16 * MIB) < #chunk then heap_peak = math.max(heap_peak, collectgarbage("count")) end
    end
    rd:close()
  end)
  local down_s = T.now() - t
  local down = down_hash:hex()
  need(got == FILE_BYTES and down == want, "download: %d bytes, sha256 %s, expected %s", got, down, want)
  assert(ctx.e2b:exec { "rm", "-f", path })
  row { row = "5", name = string.format("upload %d MiB through /files, byte-exact", FILE_BYTES / MIB),
    value = string.format("%.0f MB/s", FILE_BYTES / up_s / 1e6), baseline = string.format("%.1f s", up_s),
    compare = mem(pk_up, up_cpu) }
  row { name = string.format("download %d MiB through /files, byte-exact", FILE_BYTES / MIB),
    value = string.format("%.0f MB/s", FILE_BYTES / down_s / 1e6), baseline = string.format("%.1f s", down_s),
    compare = mem(pk_down) }
  row { name = "  host Lua heap peak during both", value = mib(heap_peak) }
end

-- 6: sandboxes in sequence --------------------------------------------------------------

local function part_sandboxes()
  progress("6/6 %d sandboxes created and killed in sequence", SANDBOXES)
  local created, killed = {}, {}
  local fds0, rss0 = L.fds(), L.rss_kib("self")
  local t0 = T.now()
  local pk = peaks({ SELF }, function()
    for i = 1, SANDBOXES do
      local t = T.now()
      local s, err = sandbox.create { timeoutMs = 600000, onTimeout = "kill" }
      need(s, "sandbox %d: create: %s", i, tostring(err and err.message))
      created[i] = (T.now() - t) * 1e3
      L.track(s.id)
      t = T.now()
      local ok, kerr = s:kill()
      need(ok, "sandbox %d: kill: %s", i, tostring(kerr and kerr.message))
      killed[i] = (T.now() - t) * 1e3
      need(not sandbox.exists(s.id), "sandbox %d exists after kill", i)
      if i % 100 == 0 then progress("    %d sandboxes", i) end
    end
  end)
  local wall = T.now() - t0
  collectgarbage()
  row { row = "6", name = string.format("%d sandboxes created and killed in sequence", SANDBOXES),
    value = string.format("%.1f /s", SANDBOXES / wall), baseline = string.format("%.0f s wall", wall),
    compare = string.format("host %s peak", mib(pk[1])) }
  row { name = "  create p50 / p90 / p99", value = pcts(T.stats(created), "ms") }
  row { name = "  kill p50 / p90 / p99", value = pcts(T.stats(killed), "ms") }
  row { name = "  host fds, RSS before -> after", value = string.format("%d -> %d fds", fds0, L.fds()),
    baseline = string.format("%s -> %s", mib(rss0), mib(L.rss_kib("self"))) }
end

-- Main ------------------------------------------------------------------------------

local function main()
  local start = T.now()
  T.section("load (make load)", string.format("scale %g; one local sandbox for parts 1-5; latencies p50 / p90 / p99",
    opts.scale))
  local ctx = context.new()
  ctx:use(require "dsh.providers.e2b", { timeoutMs = 1800000, onTimeout = "kill", onDispose = "kill" })
  ctx:use(require "dsh.providers.fs_e2b")
  ctx:use(require "dsh.providers.subprocess_e2b")
  ctx:use(require("dsh.pty").provider)
  ctx:use(require "dsh.providers.pty_e2b", { pollIntervalMs = 25, idleSilenceMs = 2000, timeoutMs = 300000,
    disposeGraceMs = 1000, rows = 40, cols = 160 })
  ctx:use(lsp.provider)
  ctx:use(require "dsh.providers.lsp_e2b", { servers = SERVERS })
  ctx:use(require "dsh.providers.code_runtime_e2b", { computeMs = 30000, maxWallMs = 120000,
    maxOutputBytes = 1048576 })
  assert(ctx:start())
  local failures = {}
  local ok, err = xpcall(function()
    local sb = assert(ctx.e2b:getSandbox())
    L.track(sb.id)
    local dshd = L.dshd_pids(sb.id)[1] or SELF
    row { name = "  dshd RSS at the start", value = mib(L.rss_kib(dshd) or 0), baseline = "host " ..
      mib(L.rss_kib("self")) }
    for _, part in ipairs {
      function() part_streams(ctx, sb, dshd) end,
      function() part_ptys(ctx, dshd) end,
      function() part_lsp(ctx, dshd) end,
      function() part_code(ctx, dshd) end,
      function() part_files(ctx, sb, dshd) end,
    } do
      local pok, perr = xpcall(part, debug.traceback)
      if not pok then
        failures[#failures + 1] = tostring(perr)
        progress("FAILED: %s", tostring(perr))
      end
    end
    collectgarbage()
    row { name = "  dshd RSS after parts 1-5", value = mib(L.rss_kib(dshd) or 0), baseline = "host " ..
      mib(L.rss_kib("self")) }
  end, debug.traceback)
  if not ok then failures[#failures + 1] = tostring(err) end
  local dok, derr = ctx:dispose()
  if not dok then failures[#failures + 1] = "dispose: " .. tostring(derr and derr.message) end
  if SANDBOXES > 0 then
    local pok, perr = xpcall(part_sandboxes, debug.traceback)
    if not pok then failures[#failures + 1] = tostring(perr) end
  end
  local left = L.check(10000)
  T.print()
  print(string.format("load: %.0f s, %d sandboxes in all", T.now() - start, L.count()))
  for _, f in ipairs(failures) do print("  FAILED " .. f) end
  for _, l in ipairs(left) do print("  LEFT " .. l) end
  print((#failures == 0 and #left == 0) and "load: PASS (byte-exact, nothing left)" or "load: FAIL")
  io.stdout:flush()
  return #failures == 0 and #left == 0
end

local ok, res = xpcall(function() return async.run(main):await() end, debug.traceback)
if not ok then
  io.stderr:write("bench/load.lua: ", tostring(res), "\n")
  os.exit(1)
end
os.exit(res and 0 or 1)
