--- bench/code_runtime_traffic.lua: what large Code Mode traffic costs the
-- host, in a real local sandbox (code-runtime-e2b over subprocess-e2b on
-- dshd). Run by bench/run; each figure is measured in this run:
--
--   1 host peak memory per payload byte: a binding that echoes a 32 MiB
--     string (ASCII, then 2-byte UTF-8 `é`), a Lua and a JavaScript program;
--     the peak (VmHWM, reset through /proc/self/clear_refs before the run)
--     minus the resident size before it, over the bytes that crossed one way.
--     Baseline: the same call decoded and its reply encoded the way the host
--     did before the C bridge (dsh.code_runtime._wire in Lua, then
--     dsh.core.frame), measured the same way
--   2 the longest event-loop stall during the same runs: a task on the same
--     loop sleeps 5 ms in a loop; its longest gap beyond the 5 ms (what every
--     other context on this host waits). Baseline: that Lua decode and
--     encode, which ran in one piece
--   3 a 20 MiB log (one print of a 20 MiB string): time and longest stall
--
-- A benchmark, not a test: it prints figures and asserts only that the work
-- was done.
local async = require "dsh.async"
local context = require "dsh.context"
local loop = require "dsh.core.loop"
local T = require "report"

local MIB = 1048576
local ECHO_BYTES, LOG_BYTES = 32 * MIB, 20 * MIB

local function status_kib(field)
  local f = assert(io.open("/proc/self/status"))
  local s = f:read("*a")
  f:close()
  return tonumber(s:match(field .. ":%s*(%d+) kB"))
end

-- Resets VmHWM to the current resident size; false where the kernel refuses.
local function reset_peak()
  local f = io.open("/proc/self/clear_refs", "w")
  if not f then return false end
  local ok = f:write("5")
  f:close()
  return ok ~= nil
end

-- Runs fn() while a task on the same loop measures how late its 5 ms sleeps
-- wake. Returns fn's result, the peak growth in bytes, the longest stall and
-- the wall time (ms).
local function measure(fn)
  collectgarbage()
  collectgarbage()
  async.sleep(0) -- a fresh loop iteration: the gaps below start from its clock, not an old one
  local can_reset = reset_peak()
  local before = status_kib("VmRSS") * 1024
  local running, worst = true, 0
  local ticker = async.run(function()
    while running do
      local t0 = loop.now_ms()
      async.sleep(5)
      local late = loop.now_ms() - t0 - 5
      if late > worst then worst = late end
    end
  end)
  local t0 = T.now()
  local r = fn()
  local wall = (T.now() - t0) * 1000 -- the loop's clock stands still while fn works in one piece
  running = false
  ticker:await()
  local peak = status_kib("VmHWM") * 1024
  return r, can_reset and (peak - before) or nil, worst, wall
end

local function check(r, what)
  if r.error then error(what .. ": " .. r.error.kind .. ": " .. r.error.message, 0) end
  return r
end

local ECHO = { { global = "tools", functions = { echo = function(s) return s end } } }

-- The host's work for one echo call before the C bridge: the call frame's
-- JSON decoded and its lossless wire read in Lua, the reply encoded in Lua
-- and framed (all in one piece: the loop waited for it).
local function lua_wire_echo(payload)
  local wire = require "dsh.code_runtime._wire"
  local json = require "dsh.code_runtime._json"
  local frame = require "dsh.core.frame"
  local text = '{"type":"call","id":1,"global":"tools","name":"echo","args":' .. assert(wire.encode({ payload }))
    .. "}"
  payload = nil -- luacheck: ignore 311
  return measure(function()
    local m = json.decode_json(text, true)
    local args = assert(wire.from_tokens(m.args))
    local reply = '{"type":"reply","id":1,"ok":true,"value":' .. assert(wire.encode(args[1])) .. "}"
    return #assert(frame.encode(reply, 2 ^ 30))
  end)
end

local MIB32 = ECHO_BYTES
local PROGRAMS = {
  { lang = "lua", what = "ASCII", program = ("local s = string.rep('a', %d) return #tools.echo(s)"):format(MIB32) },
  { lang = "lua", what = "UTF-8 é",
    program = ("local s = string.rep('é', %d) return #tools.echo(s)"):format(MIB32 / 2) },
  { lang = "javascript", what = "ASCII",
    program = ("const s = 'a'.repeat(%d); return (await tools.echo(s)).length;"):format(MIB32) },
  { lang = "javascript", what = "UTF-8 é",
    program = ("const s = 'é'.repeat(%d); return (await tools.echo(s)).length;"):format(MIB32 / 2) },
}

local function bench(ctx, has_node)
  local cr = ctx.codeRuntime
  check(cr:run { program = "return 1" }, "warm-up")
  local base = {}
  for _, what in ipairs { "ASCII", "UTF-8 é" } do
    local _, grew, stall, wall = lua_wire_echo(what == "ASCII" and string.rep("a", ECHO_BYTES)
      or string.rep("é", ECHO_BYTES / 2))
    base[what] = { grew = grew, stall = math.max(stall, wall) }
  end
  for i, p in ipairs(PROGRAMS) do
    if p.lang == "lua" or has_node then
      local r, grew, stall, wall = measure(function()
        return check(cr:run { language = p.lang, program = p.program, bindings = ECHO }, p.lang .. " echo")
      end)
      local chars = p.what == "ASCII" and ECHO_BYTES or ECHO_BYTES / 2
      assert(r.value == (p.lang == "lua" and ECHO_BYTES or chars), "echo lost bytes")
      local b = base[p.what]
      T.row { row = i == 1 and "1" or "", name = string.format("%s: echo of 32 MiB (%s): host peak per payload byte",
        p.lang, p.what), value = grew and string.format("%.2f B/B", grew / ECHO_BYTES) or "n/a (clear_refs refused)",
        baseline = b.grew and string.format("Lua wire (before) %.2f B/B", b.grew / ECHO_BYTES) or nil,
        compare = grew and b.grew and string.format("%.1fx less", b.grew / grew) or nil,
        target = "a few bytes per byte", ok = grew and grew / ECHO_BYTES <= 4 or nil }
      T.row { row = i == 1 and "2" or "", name = string.format("  %s: echo of 32 MiB (%s): longest loop stall",
        p.lang, p.what), value = string.format("%.1f ms [run %.0f ms]", stall, wall),
        baseline = string.format("Lua wire (before) %.0f ms", b.stall),
        compare = string.format("%.0fx shorter", b.stall / math.max(stall, 0.1)),
        target = "bounded (not the payload's decode)" }
    end
  end
  local r, grew, stall, wall = measure(function()
    return check(cr:run { program = ("print(string.rep('x', %d)) return 1"):format(LOG_BYTES) }, "log")
  end)
  local total = 0
  for _, l in ipairs(r.logs) do total = total + #l end
  assert(total == LOG_BYTES, "log bytes lost: " .. total)
  T.row { row = "3", name = "a 20 MiB log: run time [longest loop stall]",
    value = string.format("%.0f ms [%.1f ms]", wall, stall),
    baseline = grew and string.format("peak +%.0f MiB", grew / MIB) or nil,
    compare = string.format("%.0f MB/s", LOG_BYTES / MIB * 1.048576 / (wall / 1000)) }
end

local CFG = { maxOutputBytes = 64 * MIB, maxFrameBytes = 64 * MIB }

local function main()
  local node = require "dsh.node"
  T.section("Code Mode traffic (host cost of large payloads)", "one run each, in a local sandbox")
  local ctx = context.new()
  ctx:use(require "dsh.providers.e2b", {})
  ctx:use(require "dsh.providers.subprocess_e2b")
  ctx:use(require "dsh.providers.code_runtime_e2b", CFG)
  assert(ctx:start())
  local ok, err = pcall(bench, ctx, node.dir() ~= nil)
  ctx:dispose()
  if not ok then error(err, 0) end
  T.print()
end

async.run(main):await()
