--- bench/code_runtime.lua: Code Mode's budgets (DESIGN.md), each against a
-- baseline measured in the same run, in a real local sandbox (code-runtime-e2b
-- over subprocess-e2b on dshd) and on the host (code-runtime-local). Run by
-- bench/run; prints one table.
--
--   1 hello-world run latency, a fresh worker each time: a Lua run, a
--     TypeScript run (types stripped) and a JavaScript run, against starting
--     a bare `node -e 0` and `luajit -e ''` through the same ctx.subprocess
--     (target: a Lua run at least 10x faster than a Node worker run)
--   2 one binding call round trip, host-measured between consecutive calls
--     of a program calling in a loop (target: about 0.15 ms p50)
--   3 a run making 10,000 binding calls
--   4 log throughput: print() logs and raw fd 1 writes, MB/s end to end
--
-- A benchmark, not a test: it prints figures next to the targets and asserts
-- only that the work was done.
local async = require "dsh.async"
local context = require "dsh.context"
local json = require "dsh.json"
local loop = require "dsh.core.loop"
local proc = require "dsh.core.proc"
local T = require "report"

local HERE = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$")) or "bench"

local HELLO_RUNS, NODE_RUNS, CALLS, BIG_CALLS = 60, 20, 2000, 10000
local LOG_MB = 64

local function pct(list, p)
  table.sort(list)
  return list[math.max(1, math.ceil(#list * p))]
end

local function time_runs(n, fn)
  local samples = {}
  for i = 1, n do
    local t0 = loop.now_ms()
    fn(i)
    samples[#samples + 1] = loop.now_ms() - t0
  end
  return pct(samples, 0.5), pct(samples, 0.9)
end

local function check(r, what)
  if r.error then error(what .. ": " .. r.error.kind .. ": " .. r.error.message, 0) end
  return r
end

local function spawn_wait(sub, argv)
  local h = assert(sub:spawn { argv = argv, stdio = { stdout = { maxBytes = 1024 }, stderr = { maxBytes = 1024 } } })
  local ok, res = pcall(h.done.await, h.done)
  assert(ok and res and res.exitCode == 0, "baseline " .. argv[1] .. " failed")
  h:waitForExit()
end

--- The Node worker baselines (bench/node/worker.mjs) on the host: a fresh
-- worker to its first message, and a postMessage round trip. nil when node
-- is missing or fails.
local function worker_baseline(node_bin)
  if not node_bin then return nil end
  local p = proc.spawn { argv = { node_bin, HERE .. "/node/worker.mjs", tostring(NODE_RUNS), tostring(CALLS) },
    env = { PATH = os.getenv("PATH") or "/usr/bin:/bin" }, stderr = "null" }
  if not p then return nil end
  local out = p:read_all()
  local st = p:wait()
  p:close()
  local ok, res = pcall(json.decode, out:match("[^\n]*") or "")
  if st.exit_code ~= 0 or not ok or type(res) ~= "table" then return nil end
  return { start = T.stats(res.start), call = T.stats(res.call) }
end
local W -- the worker baselines, measured once per run

local function f3(v) return string.format("%.3f ms", v) end

local function bench(label, ctx, node_bin)
  local cr, sub = ctx.codeRuntime, ctx.subprocess
  check(cr:run { program = "return 1" }, "warm-up")
  local lua50 = time_runs(HELLO_RUNS, function() check(cr:run { program = "return 1" }, "lua hello") end)
  local luajit50 = time_runs(HELLO_RUNS, function() spawn_wait(sub, { "luajit", "-e", "" }) end)
  T.row { row = label == "sandbox" and "1" or "", name = label .. ": Lua hello-world run (p50)", value = f3(lua50),
    baseline = "spawn `luajit -e ''` " .. f3(luajit50), compare = string.format("%.1fx the bare start",
      lua50 / luajit50) }
  if node_bin then
    local ts = check(cr:run { language = "typescript", program = "const x: number = 1; return x;" }, "ts")
    assert(ts.value == 1)
    local ts50 = time_runs(NODE_RUNS, function()
      check(cr:run { language = "typescript", program = "const x: number = 1; return x;" }, "ts hello")
    end)
    local js50 = time_runs(NODE_RUNS, function()
      check(cr:run { language = "javascript", program = "return 1;" }, "js hello")
    end)
    local node50 = time_runs(NODE_RUNS, function() spawn_wait(sub, { node_bin, "-e", "0" }) end)
    T.row { name = "  " .. label .. ": TypeScript hello-world run (p50)", value = f3(ts50),
      baseline = "the Lua run " .. f3(lua50),
      compare = string.format("Lua %.1fx faster", ts50 / lua50), target = "Lua >= 10x faster",
      ok = ts50 / lua50 >= 10 }
    T.row { name = "  " .. label .. ": JavaScript hello-world run (p50)", value = f3(js50),
      baseline = "spawn `node -e 0` " .. f3(node50),
      compare = string.format("%.2fx the bare start", js50 / node50) }
    if W then
      T.row { name = "  " .. label .. ": the same JavaScript run", value = f3(js50),
        baseline = "fresh Node worker (host) " .. f3(W.start.median),
        compare = string.format("%+.3f ms", js50 - W.start.median), target = "a few ms" }
    end
  end

  -- binding round trips, measured on the host between consecutive calls
  local function round_trip(language, program)
    local last, gaps = nil, {}
    local B = { { global = "tools", functions = { ping = function()
      local now = loop.now_ms()
      if last then gaps[#gaps + 1] = now - last end
      last = now
      return 1
    end } } }
    check(cr:run { language = language, program = program, bindings = B }, language .. " calls")
    return pct(gaps, 0.5), pct(gaps, 0.99), #gaps + 1
  end
  local p50, p99 = round_trip("lua", "for i = 1, " .. CALLS .. " do tools.ping() end")
  local wcall = W and ("Node worker postMessage " .. string.format("%.3f ms", W.call.median)) or nil
  T.row { name = "  " .. label .. ": Lua binding call round trip [p99]",
    value = string.format("%.3f ms [%.3f]", p50, p99), baseline = wcall,
    compare = W and string.format("%+.3f ms", p50 - W.call.median), target = "~0.15 ms p50 (<= 0.2)", ok = p50 <= 0.2 }
  if node_bin then
    local j50, j99 = round_trip("javascript", "for (let i = 0; i < " .. CALLS .. "; i++) await tools.ping();")
    T.row { name = "  " .. label .. ": JavaScript binding call round trip [p99]",
      value = string.format("%.3f ms [%.3f]", j50, j99), baseline = wcall,
      compare = W and string.format("%+.3f ms", j50 - W.call.median) }
  end
  local t0 = loop.now_ms()
  local _, _, n = round_trip("lua", "for i = 1, " .. BIG_CALLS .. " do tools.ping() end")
  assert(n == BIG_CALLS)
  local big = loop.now_ms() - t0
  T.row { name = "  " .. label .. ": a Lua run making 10,000 binding calls", value = string.format("%.1f ms", big),
    compare = string.format("%.1f us per call", big / 10) }

  -- log throughput
  local chunk = 65536
  local count = LOG_MB * 1048576 / chunk
  t0 = loop.now_ms()
  local r = check(cr:run { program = string.format(
    "local s = string.rep('x', %d) for i = 1, %d do print(s) end", chunk, count) }, "logs")
  local ms = loop.now_ms() - t0
  assert(#r.logs == count)
  T.row { name = "  " .. label .. ": print() logs, " .. LOG_MB .. " MiB in 64 KiB logs",
    value = string.format("%.0f MB/s", LOG_MB * 1.048576 / (ms / 1000)) }
  t0 = loop.now_ms()
  r = check(cr:run { program = string.format(
    "local s = string.rep('y', %d) for i = 1, %d do io.stdout:write(s) end io.stdout:flush()", chunk, count) },
    "raw")
  ms = loop.now_ms() - t0
  local total = 0
  for _, l in ipairs(r.logs) do total = total + #l end
  assert(total == LOG_MB * 1048576, "raw bytes lost: " .. total)
  T.row { name = "  " .. label .. ": raw fd 1 writes, " .. LOG_MB .. " MiB", value = string.format("%.0f MB/s",
    LOG_MB * 1.048576 / (ms / 1000)) }
end

local CFG = { maxOutputBytes = 2 ^ 30, maxFrameBytes = 2 ^ 30, luaLibraries = { "io" } }

local function main()
  local node = require "dsh.node"
  W = worker_baseline(node.bin())
  T.section("Code Mode (ctx.codeRuntime)", string.format("p50 of %d Lua and %d Node runs, %d binding calls; "
    .. "in a local sandbox, then on the host", HELLO_RUNS, NODE_RUNS, CALLS))
  -- a real local sandbox
  local ctx = context.new()
  ctx:use(require "dsh.providers.e2b", {})
  ctx:use(require "dsh.providers.subprocess_e2b")
  ctx:use(require "dsh.providers.code_runtime_e2b", CFG)
  assert(ctx:start())
  local ok, err = pcall(bench, "sandbox", ctx, node.dir() and (node.SANDBOX_DIR .. "/bin/node"))
  ctx:dispose()
  if not ok then error(err, 0) end
  -- this machine
  ctx = context.new()
  ctx:use(require "dsh.providers.subprocess_local")
  ctx:use(require "dsh.providers.code_runtime_local", CFG)
  assert(ctx:start())
  ok, err = pcall(bench, "host", ctx, node.bin())
  ctx:dispose()
  if not ok then error(err, 0) end
  T.print()
end

async.run(main):await()
