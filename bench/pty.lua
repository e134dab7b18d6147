--- bench/pty.lua: terminals (ctx.pty), each figure against a baseline
-- measured in the same run. Run by bench/run (LUA_PATH, DSH_BUILD_DIR,
-- DSH_STATE_DIR set); prints one table.
--
--   1 the sanitizer (dsh.core.termtext, C) in GB/s against memcpy of the same
--     chunks and against the same state machine written in Lua, on plain
--     lines and on coloured `ls`-like output; the scrollback buffer's appends
--   2 keystroke to echo through pty-e2b (a shell in a local sandbox, its
--     line editor echoing) and through pty-local, against openpty + cat in C
--   3 sustained terminal output in MB/s through a session (UTF-8 check,
--     sanitizer, scrollback and screen), pty-local and pty-e2b, against the
--     same producer on a raw PTY read by dsh.core.proc
--
-- Real parts only: real shells, a real dshd in a real sandbox. A benchmark,
-- not a test: it asserts only that the work was done.
local ffi = require "ffi"
local async = require "dsh.async"
local context = require "dsh.context"
local proc = require "dsh.core.proc"
local termtext = require "dsh.core.termtext"
local T = require "report"

local BUILD = os.getenv("DSH_BUILD_DIR") or "build"
local BASELINES = BUILD .. "/bin/dsh-bench-baselines"
local SAN_BYTES, CHUNK, SAN_REPS = 32 * 1048576, 65536, 5
local ECHO_BLOCKS, ECHO_RUNS, WARMUP = 5, 100, 20
local STREAM_BYTES, STREAM_REPS = 48 * 1000000, 3

local now = T.now

local function stats(samples)
  local s = {}
  for i, v in ipairs(samples) do s[i] = v end
  table.sort(s)
  local n = #s
  return { median = n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2, p90 = s[math.ceil(n * 0.9)],
    min = s[1], max = s[n] }
end

local function progress(fmt, ...) io.stderr:write("bench: ", string.format(fmt, ...), "\n") end

local function line(t) T.row(t) end
local function ms(s) return string.format("%.3f ms [%.3f]", s.median, s.p90) end
local function rate(s, unit, scale) return string.format("%.2f %s [%.2f-%.2f]", s.median / scale, unit,
  s.min / scale, s.max / scale) end

-- 1: the sanitizer ----------------------------------------------------------------

-- The same state machine in Lua (text spans found with string.find), for the
-- comparison that decided where the hot loop lives.
local function lua_sanitizer()
  local st = { mode = "text", cr = false }
  return function(s)
    local out, i, n = {}, 1, #s
    while i <= n do
      local m = st.mode
      if m == "text" then
        if st.cr then
          st.cr = false
          out[#out + 1] = "\n"
          if s:byte(i) == 10 then i = i + 1 end
        end
        local j = s:find("[\27\r\7]", i)
        if not j then
          out[#out + 1] = s:sub(i)
          break
        end
        if j > i then out[#out + 1] = s:sub(i, j - 1) end
        local c = s:byte(j)
        if c == 13 then st.cr = true elseif c == 27 then st.mode = "esc" end
        i = j + 1
      elseif m == "esc" then
        local c = s:byte(i)
        st.mode = c == 91 and "csi" or c == 93 and "osc" or "text"
        i = i + 1
      elseif m == "csi" then
        local j = s:find("[\64-\126]", i)
        if not j then break end
        st.mode, i = "text", j + 1
      else
        local j = s:find("[\7\27]", i)
        if not j then break end
        st.mode, i = "text", j + 1 + (s:byte(j) == 27 and 1 or 0)
      end
    end
    return table.concat(out)
  end
end

local function corpus(kind)
  local parts, n = {}, 0
  local i = 0
  while n < CHUNK do
    i = i + 1
    local l = kind == "plain" and string.format("line %d of plain terminal output, 你好 and some more text\r\n", i)
      or string.format("\27[0m\27[01;34mdirectory-%d\27[0m  \27[01;32mscript-%d.sh\27[0m  file-%d.txt\r\n", i, i, i)
    parts[#parts + 1] = l
    n = n + #l
  end
  return table.concat(parts):sub(1, CHUNK - 8):gsub("[^\n]*$", "")
end

local function gbps(fn, chunk)
  local reps = math.floor(SAN_BYTES / #chunk)
  local samples = {}
  for r = 1, SAN_REPS do
    local t = now()
    for _ = 1, reps do fn(chunk) end
    samples[r] = reps * #chunk / (now() - t)
  end
  return stats(samples)
end

-- Over a 32 MiB buffer (not in cache), chunk by chunk: fn(ptr, n) per chunk.
local function gbps_big(big, fn)
  local samples = {}
  for r = 1, SAN_REPS do
    local t = now()
    for off = 0, SAN_BYTES - CHUNK, CHUNK do fn(big + off, CHUNK) end
    samples[r] = SAN_BYTES / (now() - t)
  end
  return stats(samples)
end

local function row1()
  progress("1/3 sanitizer: %d x %d MiB per line", SAN_REPS, SAN_BYTES / 1048576)
  local F = require "dsh.core._ffi"
  local dst = ffi.new("uint8_t[?]", CHUNK + 1)
  local n_p, fl_p = ffi.new("size_t[1]"), ffi.new("uint32_t[1]")
  local big = ffi.new("uint8_t[?]", SAN_BYTES)
  for _, kind in ipairs { "plain", "coloured" } do
    local chunk = corpus(kind)
    for off = 0, SAN_BYTES - #chunk, #chunk do ffi.copy(big + off, chunk, #chunk) end
    local copy = gbps_big(big, function(p, n) ffi.copy(dst, p, n) end)
    local ts_p = ffi.new("dsh_tsan_t *[1]")
    assert(F.C.dsh_tsan_new(4096, ts_p) == F.C.DSH_OK)
    local core = gbps_big(big, function(p, n) F.C.dsh_tsan_feed(ts_p[0], p, n, dst, CHUNK + 1, n_p, fl_p) end)
    F.C.dsh_tsan_free(ts_p[0])
    local san = termtext.sanitizer(4096)
    local c = gbps(function(s) return san:feed(s) end, chunk)
    local lua = gbps(lua_sanitizer(), chunk)
    line { row = kind == "plain" and "1" or "", name = "sanitizer core loop (C), " .. kind .. " lines",
      value = rate(core, "GB/s", 1e9), baseline = "memcpy " .. rate(copy, "GB/s", 1e9),
      compare = string.format("%.2fx of memcpy", core.median / copy.median) }
    line { name = "  through dsh.core.termtext (a Lua string out)", value = rate(c, "GB/s", 1e9) }
    line { name = "  the same state machine in Lua", value = rate(lua, "GB/s", 1e9),
      compare = string.format("C is %.1fx faster", c.median / lua.median) }
  end
  local text = corpus("plain"):gsub("\r", "")
  local buf = termtext.buffer(4194304, 10000)
  local b = gbps(function(s) buf:append(s) end, text)
  line { name = "scrollback appends (4 MiB, 10000 lines, full)", value = rate(b, "GB/s", 1e9) }
end

-- Sessions ------------------------------------------------------------------------

local function compose()
  local ctx = context.new()
  ctx:use(require "dsh.providers.e2b", { timeoutMs = 600000, onTimeout = "kill" })
  ctx:use(require "dsh.providers.subprocess_e2b")
  ctx:use(require("dsh.pty").provider)
  local cfg = { pollIntervalMs = 25, idleSilenceMs = 2000, timeoutMs = 120000, disposeGraceMs = 1000, rows = 40,
    cols = 160 }
  ctx:use(require "dsh.providers.pty_e2b", cfg)
  local lcfg = { backendType = "local" }
  for k, v in pairs(cfg) do lcfg[k] = v end
  ctx:use(require "dsh.providers.pty_local", lcfg)
  assert(ctx:start())
  return ctx
end

-- One keystroke into the shell's line editor, timed until its echo is in the session.
local function keystroke(s, key)
  local f = async.future()
  s._waiters[f] = true
  local t = now()
  assert(s._drv:write(key))
  f:await()
  return (now() - t) * 1e3
end

local function echo_samples(s)
  local out = {}
  for i = -WARMUP, ECHO_RUNS / ECHO_BLOCKS do
    local v = keystroke(s, "x")
    keystroke(s, "\127") -- erase it: the line editor echoes "\b \b"
    if i >= 1 then out[#out + 1] = v end
  end
  return out
end

local function run_baseline(...)
  local p = assert(proc.spawn { argv = { BASELINES, ... }, env = { PATH = "/usr/bin:/bin" } })
  local out = p:read_all()
  p:wait()
  p:close()
  local list = {}
  for v in out:gmatch("[%d.]+") do list[#list + 1] = tonumber(v) end
  return list
end

local function row2(ctx, owner, e2b_s, local_s)
  progress("2/3 keystroke echo (%d blocks of %d, alternating)", ECHO_BLOCKS, ECHO_RUNS / ECHO_BLOCKS)
  local direct, e, l = {}, {}, {}
  for _ = 1, ECHO_BLOCKS do
    for _, v in ipairs(run_baseline("pty", tostring(ECHO_RUNS / ECHO_BLOCKS))) do direct[#direct + 1] = v end
    for _, v in ipairs(echo_samples(e2b_s)) do e[#e + 1] = v end
    for _, v in ipairs(echo_samples(local_s)) do l[#l + 1] = v end
  end
  local ds, es, ls = stats(direct), stats(e), stats(l)
  line { row = "2", name = "keystroke echo through pty-e2b (sandbox shell)", value = ms(es),
    baseline = "openpty + cat " .. ms(ds), compare = string.format("%+.3f ms", es.median - ds.median),
    target = "< 0.300 ms", ok = es.median < 0.3 }
  line { name = "  through pty-local (host shell)", value = ms(ls), compare = string.format("%+.3f ms",
    ls.median - ds.median) }
  assert(ctx and owner)
end

local PRODUCER = "yes $'the quick brown fox \\e[32mjumps\\e[0m over the lazy dog 0123456789 \\xe4\\xbd\\xa0' | head -c "
  .. STREAM_BYTES

local function raw_pty()
  local t = now()
  local p = assert(proc.spawn { argv = { "/bin/bash", "-c", PRODUCER }, env = { PATH = "/usr/bin:/bin" },
    pty = { rows = 40, cols = 160 } })
  local n = 0
  while true do
    local s = p:read()
    if not s then break end
    n = n + #s
  end
  p:wait()
  p:close()
  assert(n >= STREAM_BYTES, "the raw PTY delivered " .. n .. " bytes")
  return n / (now() - t)
end

local function through(pty, owner, s)
  local fed0 = s._screen:info().fed
  local t = now()
  local op = assert(pty:startSend(owner, s.id, { text = PRODUCER .. "; echo", submit = true }))
  local r = assert(op:wait())
  assert(r.waitReason == "stdin_read", r.waitReason .. ": " .. r.viewport:sub(-300))
  local fed = s._screen:info().fed - fed0
  assert(fed >= STREAM_BYTES, "the session saw " .. fed .. " bytes")
  return fed / (now() - t)
end

local function row3(pty, owner, e2b_s, local_s)
  progress("3/3 %d MB of terminal output, %d times each (alternating)", STREAM_BYTES / 1e6, STREAM_REPS)
  local raw, e, l = {}, {}, {}
  for i = 1, STREAM_REPS do
    raw[i] = raw_pty()
    l[i] = through(pty, owner, local_s)
    e[i] = through(pty, owner, e2b_s)
  end
  local rs, es, ls = stats(raw), stats(e), stats(l)
  line { row = "3", name = "terminal output through pty-local (all stages)", value = rate(ls, "MB/s", 1e6),
    baseline = "raw PTY " .. rate(rs, "MB/s", 1e6), compare = string.format("%.2fx of raw", ls.median / rs.median) }
  line { name = "  through pty-e2b (sandbox, dshd, HTTP)", value = rate(es, "MB/s", 1e6),
    compare = string.format("%.2fx of raw", es.median / rs.median) }
end

local function main()
  T.section("terminals (ctx.pty)", string.format("medians [p90] of %d keystrokes, [min-max] of %d x %d MiB "
    .. "(sanitizer) and %d x %d MB (output)", ECHO_RUNS, SAN_REPS, SAN_BYTES / 1048576, STREAM_REPS,
    STREAM_BYTES / 1e6))
  row1()
  local ctx = compose()
  local ok, err = xpcall(function()
    local owner = { id = "bench" }
    local e2b_s = assert(ctx.pty:spawn(owner, { type = "shell" }))
    local local_s = assert(ctx.pty:spawn(owner, { type = "local" }))
    row2(ctx, owner, e2b_s, local_s)
    row3(ctx.pty, owner, e2b_s, local_s)
  end, debug.traceback)
  ctx:dispose()
  if not ok then error(err, 0) end
  T.print()
end

async.run(main):await()
