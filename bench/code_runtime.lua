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
local loop = require "dsh.loop"

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

local rows = {}
local function row(what, value, unit, note)
  rows[#rows + 1] = string.format("  %-58s %10.3f %-5s %s", what, value, unit, note or "")
end

local function bench(label, ctx, node_bin)
  local cr, sub = ctx.codeRuntime, ctx.subprocess
  check(cr:run { program = "return 1" }, "warm-up")
  local lua50 = time_runs(HELLO_RUNS, function() check(cr:run { program = "return 1" }, "lua hello") end)
  row(label .. ": Lua hello-world run (p50)", lua50, "ms")
  local luajit50 = time_runs(HELLO_RUNS, function() spawn_wait(sub, { "luajit", "-e", "" }) end)
  row(label .. ":   baseline: spawn `luajit -e ''` (p50)", luajit50, "ms",
    string.format("run = %.1fx the bare start", lua50 / luajit50))
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
    row(label .. ": TypeScript hello-world run (p50)", ts50, "ms",
      string.format("Lua run %.1fx faster (target >= 10x)", ts50 / lua50))
    row(label .. ": JavaScript hello-world run (p50)", js50, "ms", string.format("Lua run %.1fx faster", js50 / lua50))
    row(label .. ":   baseline: spawn bare `node -e 0` (p50)", node50, "ms",
      string.format("Node worker run = %.1fx the bare start", js50 / node50))
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
  row(label .. ": Lua binding call round trip (p50)", p50, "ms", string.format("p99 %.3f ms; target ~0.15 ms p50", p99))
  if node_bin then
    p50, p99 = round_trip("javascript", "for (let i = 0; i < " .. CALLS .. "; i++) await tools.ping();")
    row(label .. ": JavaScript binding call round trip (p50)", p50, "ms", string.format("p99 %.3f ms", p99))
  end
  local t0 = loop.now_ms()
  local _, _, n = round_trip("lua", "for i = 1, " .. BIG_CALLS .. " do tools.ping() end")
  assert(n == BIG_CALLS)
  local big = loop.now_ms() - t0
  row(label .. ": a Lua run making 10,000 binding calls", big, "ms", string.format("%.1f us per call", big / 10))

  -- log throughput
  local chunk = 65536
  local count = LOG_MB * 1048576 / chunk
  t0 = loop.now_ms()
  local r = check(cr:run { program = string.format(
    "local s = string.rep('x', %d) for i = 1, %d do print(s) end", chunk, count) }, "logs")
  local ms = loop.now_ms() - t0
  assert(#r.logs == count)
  row(label .. ": print() logs, " .. LOG_MB .. " MiB in 64 KiB logs", LOG_MB * 1.048576 / (ms / 1000), "MB/s")
  t0 = loop.now_ms()
  r = check(cr:run { program = string.format(
    "local s = string.rep('y', %d) for i = 1, %d do io.stdout:write(s) end io.stdout:flush()", chunk, count) },
    "raw")
  ms = loop.now_ms() - t0
  local total = 0
  for _, l in ipairs(r.logs) do total = total + #l end
  assert(total == LOG_MB * 1048576, "raw bytes lost: " .. total)
  row(label .. ": raw fd 1 writes, " .. LOG_MB .. " MiB", LOG_MB * 1.048576 / (ms / 1000), "MB/s")
end

local CFG = { maxOutputBytes = 2 ^ 30, maxFrameBytes = 2 ^ 30, luaLibraries = { "io" } }

local function main()
  local node = require "dsh.code_runtime.node"
  print("Code Mode (bench/code_runtime.lua)")
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
  for _, r in ipairs(rows) do print(r) end
end

async.run(main):await()
