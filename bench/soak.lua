--- bench/soak.lua: `make soak`. Cycles of create -> use every provider ->
-- dispose on real local sandboxes, at several concurrencies; afterwards
-- nothing may be left (bench/leftovers.lua), and the host's fds and RSS,
-- sampled every K cycles, are printed as a series with a fitted slope per
-- cycle, so that a slow leak shows. Exits non-zero when a cycle failed,
-- something was left, the host's fds grew or a dshd grew past its bound.
--
-- A cycle: compose a context (compose() below), write and read a file
-- through ctx.fs, run Bash leaving a background process, run a TUI in a PTY
-- (`top` in batch mode, then `less` full screen and quit with q), a hover from
-- clangd through ctx.lsp, a Code Mode run with bindings in Lua and one in
-- JavaScript (when the sandbox has Node), record the sandbox's dshd RSS,
-- dispose and check that the sandbox is gone.
--
--   luajit bench/soak.lua [--cycles N] [--concurrency 1,4,8] [--sample K]
--                         [--time-limit SECONDS] [--steps files,bash,pty,lsp,code]
-- (through bench/run, which sets LUA_PATH, DSH_BUILD_DIR and DSH_STATE_DIR).
-- N cycles in all, split evenly over the concurrencies in order; when the
-- time limit is reached no new cycle starts and the summary says so. --steps
-- runs only some of the uses (the providers are composed either way): to
-- find which one a slope comes from.
local async = require "dsh.async"
local context = require "dsh.context"
local lsp = require "dsh.lsp"
local node = require "dsh.node"
local sandbox = require "dsh.sandbox"
local L = require "leftovers"
local T = require "report"

local opts = { cycles = 200, concurrency = "1,4,8", sample = 10, ["time-limit"] = 1800,
  steps = "files,bash,pty,lsp,code" }
do
  local i = 1
  while arg[i] do
    local k = arg[i]:match("^%-%-(.+)$")
    if not k or opts[k] == nil or not arg[i + 1] then
      io.stderr:write("usage: soak.lua [--cycles N] [--concurrency 1,4,8] [--sample K] [--time-limit S] "
        .. "[--steps files,bash,pty,lsp,code]\n")
      os.exit(2)
    end
    opts[k] = arg[i + 1]
    i = i + 2
  end
end
local CYCLES, SAMPLE, LIMIT_S = tonumber(opts.cycles), tonumber(opts.sample), tonumber(opts["time-limit"])
local LEVELS = {}
for c in tostring(opts.concurrency):gmatch("%d+") do LEVELS[#LEVELS + 1] = tonumber(c) end
local STEPS = {}
for name in tostring(opts.steps):gmatch("[%w]+") do STEPS[name] = true end
local DSHD_RSS_BOUND_KIB = 32 * 1024

local SERVERS = { clangd = { command = "clangd", args = { "--log=error" }, extensionToLanguage = { [".c"] = "c" } } }
local CODE = { computeMs = 2000, maxWallMs = 20000, luaLibraries = { "io" } }
local PTY = { pollIntervalMs = 25, idleSilenceMs = 400, timeoutMs = 20000, disposeGraceMs = 1000, rows = 30,
  cols = 120 }

--- The world of one cycle on ctx: every provider on one local sandbox,
--- composed by the overlay.
local function compose(ctx, o)
  ctx:use(require "dsh.providers.overlay", {
    e2b = { timeoutMs = o.timeoutMs or 600000, onTimeout = "kill", onDispose = "kill" },
    bash = { timeoutMs = 30000 },
    pty = PTY,
    lsp = { servers = SERVERS },
    codeRuntime = CODE,
  })
  return ctx
end

local SOURCE = "static int square_area(int side) { return side * side; }\nint total(void) { return square_area(3); }\n"
local POS = lsp.position.from_index(SOURCE, (SOURCE:find("square_area(3)", 1, true)))
local HAS_NODE = node.dir() ~= nil

-- A failed check raises {soak = message}: reported without a traceback.
local function need(cond, fmt, ...)
  if not cond then error({ soak = string.format(fmt, ...) }, 0) end
end

local function ok_or(v, err, what)
  if v == nil then error({ soak = (what or "?") .. ": " .. tostring(err and (err.message or err)) }, 0) end
  return v
end

local function why(e)
  if type(e) == "table" and e.soak then return e.soak end
  return debug.traceback(tostring(e), 2)
end

local steps = {} -- step name -> list of ms

local function timed(name, fn)
  local kind = name:match("^(%w+)")
  if kind ~= "create" and kind ~= "dispose" and not STEPS[kind] then return end
  local t = T.now()
  fn()
  local list = steps[name] or {}
  steps[name] = list
  list[#list + 1] = (T.now() - t) * 1e3
end

local dshd_rss = {} -- KiB, one per cycle

local function cycle(i)
  local ctx = compose(context.new(), {})
  local id
  local ok, err = xpcall(function()
    timed("create (ctx:start)", function() ok_or(ctx:start()) end)
    id = ok_or(ctx.e2b:sandboxId(), nil, "sandboxId")
    L.track(id)
    timed("files: write+read 60 KB", function()
      local text = string.rep(string.format("cycle %06d 你好\n", i), 3000) -- 60000 bytes
      ok_or(ctx.fs:writeText("soak.txt", text, { createIfAbsent = true }), nil, "fs.writeText")
      local r = ok_or(ctx.fs:readText("soak.txt"), nil, "fs.readText")
      need(r.text == text, "fs read back %d bytes, wrote %d", #r.text, #text)
    end)
    timed("bash: with a background process", function()
      local r = ok_or(ctx.bash:run { command = "sleep 600 & echo $! > bg.pid; printf '%s' {1..1000} | wc -c" }, nil,
        "bash")
      need(r.exitCode == 0 and r.stdout.text == "2893\n", "bash: exit %s, %q", tostring(r.exitCode), r.stdout.text)
      r = ok_or(ctx.bash:run { command = "kill -0 $(cat bg.pid) && echo alive" }, nil, "bash")
      need(r.stdout.text == "alive\n", "the background process is not running: %q", r.stdout.text)
    end)
    timed("pty: top -b, less, q", function()
      local owner = { id = "soak" }
      local s = ok_or(ctx.pty:spawn(owner, { type = "shell" }), nil, "pty.spawn")
      local r = ok_or(ok_or(ctx.pty:startSend(owner, s.id, { text = "top -b -n 1 | head -n 12", submit = true }))
        :wait(), nil, "pty top")
      need(r.viewport:find("PID", 1, true), "top printed no process table: %s", r.viewport:sub(-200))
      ok_or(ok_or(ctx.pty:startSend(owner, s.id, {
        text = "seq 100000 200000 > seq.txt && TERM=xterm-256color less seq.txt", submit = true })):wait(), nil, "less")
      -- (sessions run with TERM=dumb, under which less will not go full screen)
      local w = ok_or(ctx.pty:waitFor(owner, s.id, { pattern = "100023", plain = true,
        timeoutMs = 10000 }), nil, "pty waitFor")
      need(w.matched, "less showed no text (%s): %s", tostring(w.reason),
        table.concat(w.screen.lines or {}, "\n"):gsub("%s+\n", "\n"):sub(-400))
      r = ok_or(ok_or(ctx.pty:startSend(owner, s.id, { text = "q" })):wait(), nil, "pty q")
      need(r.waitReason == "stdin_read", "less did not quit: %s", tostring(r.waitReason))
      ok_or(ctx.pty:kill(owner, s.id), nil, "pty.kill")
    end)
    timed("lsp: hover (clangd, new workspace)", function()
      ok_or(ctx.fs:writeText("area.c", SOURCE, { createIfAbsent = true }), nil, "fs.writeText area.c")
      local r = ok_or(ctx.lsp:query { operation = "hover", filePath = "area.c", position = POS,
        workspaceRoot = ctx.e2b.cwd }, nil, "lsp hover")
      need(r.hover and r.hover.contents:find("square_area", 1, true), "wrong hover")
    end)
    local calls = 0
    local B = { { global = "tools", functions = { add = function(a, b)
      calls = calls + 1
      return a + b
    end } } }
    timed("code: Lua run, 10 binding calls", function()
      local r = ctx.codeRuntime:run { program = "local s = 0 for k = 1, 10 do s = tools.add(s, k) end return s",
        bindings = B }
      need(not r.error and r.value == 55, "lua run: %s", r.error and r.error.message or tostring(r.value))
    end)
    if HAS_NODE then
      timed("code: JS run, 10 binding calls", function()
        local r = ctx.codeRuntime:run { language = "javascript", bindings = B,
          program = "let s = 0; for (let k = 1; k <= 10; k++) s = await tools.add(s, k); return s;" }
        need(not r.error and r.value == 55, "js run: %s", r.error and r.error.message or tostring(r.value))
      end)
    end
    need(not STEPS.code or calls == (HAS_NODE and 20 or 10), "%d binding calls reached the host", calls)
    local peak = 0
    for _, pid in ipairs(L.dshd_pids(id)) do peak = math.max(peak, L.rss_kib(pid) or 0) end
    dshd_rss[#dshd_rss + 1] = peak
  end, why)
  timed("dispose", function()
    local dok, derr = ctx:dispose()
    if ok and not dok then ok, err = false, "dispose: " .. tostring(derr and derr.message or derr) end
  end)
  if ok and id and sandbox.exists(id) then ok, err = false, "sandbox " .. id .. " exists after dispose" end
  return ok, err
end

-- The run ----------------------------------------------------------------------

local series = {} -- {cycle, fds, rss}
local failures = {}
local done, stopped_early = 0, false

-- Taken between rounds, when no cycle is running: what is left is held.
local function sample()
  collectgarbage()
  collectgarbage()
  series[#series + 1] = { cycle = done, fds = L.fds(), rss = L.rss_kib("self"), heap = collectgarbage("count") }
end

--- n cycles, conc at a time, in rounds of SAMPLE cycles with a sample after each.
local function phase(conc, n, deadline)
  local started = 0
  local t0 = T.now()
  local lat = {}
  while started < n and not stopped_early do
    local round = math.min(SAMPLE, n - started)
    local next_i, tasks = 0, {}
    for w = 1, math.min(conc, round) do
      tasks[w] = async.run(function()
        while next_i < round do
          if T.now() > deadline then
            stopped_early = true
            return
          end
          next_i = next_i + 1
          local t = T.now()
          local ok, err = cycle(done + 1)
          lat[#lat + 1] = (T.now() - t) * 1e3
          done = done + 1
          if not ok then
            failures[#failures + 1] = string.format("cycle %d (concurrency %d): %s", done, conc, tostring(err))
            io.stderr:write("soak: ", failures[#failures], "\n")
          end
        end
      end)
    end
    for _, t in ipairs(tasks) do t:await() end
    started = started + round
    sample()
  end
  return #lat, T.now() - t0, T.stats(lat)
end

local function main()
  local start = T.now()
  local deadline = start + LIMIT_S
  io.stderr:write(string.format("soak: %d cycles over concurrencies %s, samples every %d cycles, time limit %d s\n",
    CYCLES, table.concat(LEVELS, ","), SAMPLE, LIMIT_S))
  -- one untimed cycle first, so that the baseline holds what is loaded once
  local ok, err = cycle(0)
  if not ok then failures[#failures + 1] = "warm-up cycle: " .. tostring(err) end
  steps = {}
  dshd_rss = {}
  sample()
  local phases = {}
  for k, conc in ipairs(LEVELS) do
    local n = math.floor(CYCLES / #LEVELS) + (k <= CYCLES % #LEVELS and 1 or 0)
    io.stderr:write(string.format("soak: %d cycles at concurrency %d\n", n, conc))
    local got, secs, lat = phase(conc, n, deadline)
    phases[#phases + 1] = { conc = conc, n = got, secs = secs, lat = lat }
  end
  local left = L.check(10000)

  -- Summary
  print(string.format("\nsoak: %d cycles in %.0f s (%d sandboxes)%s, %d failed", done, T.now() - start, L.count(),
    stopped_early and ", stopped by the time limit" or "", #failures))
  for _, p in ipairs(phases) do
    print(string.format("  concurrency %d: %d cycles in %.1f s, %.2f cycles/s; a cycle p50 %.0f ms, p90 %.0f, p99 %.0f",
      p.conc, p.n, p.secs, p.n / math.max(p.secs, 1e-9), p.lat.p50, p.lat.p90, p.lat.p99))
  end
  print("  steps (ms, all concurrencies):     p50      p90      p99      max")
  local names = {}
  for name in pairs(steps) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local s = T.stats(steps[name])
    print(string.format("    %-34s %8.1f %8.1f %8.1f %8.1f", name, s.p50, s.p90, s.p99, s.max))
  end
  local d = T.stats(dshd_rss)
  print(string.format("  dshd RSS per sandbox, before dispose: p50 %.1f MiB, max %.1f MiB (bound %d MiB)",
    d.p50 / 1024, d.max / 1024, DSHD_RSS_BOUND_KIB / 1024))
  print("  host series, between rounds (after cycle: fds, RSS MiB, Lua heap MiB):")
  local xs, fds, rss, heap, cells = {}, {}, {}, {}, {}
  for _, s in ipairs(series) do
    xs[#xs + 1], fds[#fds + 1], rss[#rss + 1], heap[#heap + 1] = s.cycle, s.fds, s.rss, s.heap
    cells[#cells + 1] = string.format("%d: %d, %.1f, %.1f", s.cycle, s.fds, s.rss / 1024, s.heap / 1024)
  end
  for k = 1, #cells, 5 do print("    " .. table.concat(cells, " | ", k, math.min(k + 4, #cells))) end
  local fd_slope, rss_slope, heap_slope = L.slope(xs, fds), L.slope(xs, rss), L.slope(xs, heap)
  print(string.format("  fitted slope per cycle: fds %+.4f, RSS %+.1f KiB, Lua heap %+.1f KiB", fd_slope, rss_slope,
    heap_slope))
  -- the second half alone: growth that levels off (allocator arenas, JIT traces) is not a leak
  local h = math.floor(#xs / 2) + 1
  local function tail(list) return { unpack(list, h) } end
  print(string.format("  the same over the second half (cycles %d-%d): fds %+.4f, RSS %+.1f KiB, Lua heap %+.1f KiB",
    xs[h] or 0, xs[#xs] or 0, L.slope(tail(xs), tail(fds)), L.slope(tail(xs), tail(rss)),
    L.slope(tail(xs), tail(heap))))
  local first, last = series[1], series[#series]
  print(string.format("  host fds %d -> %d, RSS %.1f -> %.1f MiB", first.fds, last.fds, first.rss / 1024,
    last.rss / 1024))
  local verdict = {}
  if #failures > 0 then verdict[#verdict + 1] = #failures .. " cycles failed" end
  for _, f in ipairs(failures) do print("  FAILED " .. f:gsub("\n", "\n    ")) end
  if #left > 0 then verdict[#verdict + 1] = "left behind: " .. #left end
  for _, l in ipairs(left) do print("  LEFT " .. l) end
  if last.fds > first.fds then verdict[#verdict + 1] = "host fds grew" end
  if d.max > DSHD_RSS_BOUND_KIB then verdict[#verdict + 1] = "a dshd went past its RSS bound" end
  print(#verdict == 0 and "soak: PASS (nothing left: no process, no sandbox state, no child, no live object)"
    or ("soak: FAIL: " .. table.concat(verdict, "; ")))
  io.stdout:flush()
  return #verdict == 0
end

local ok, res = xpcall(function() return async.run(main):await() end, debug.traceback)
if not ok then
  io.stderr:write("bench/soak.lua: ", tostring(res), "\n")
  os.exit(1)
end
os.exit(res and 0 or 1)
