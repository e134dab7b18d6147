--- bench/lsp.lua: language servers through ctx.lsp, each against a baseline
-- measured in the same run. Run by bench/run (which sets LUA_PATH,
-- DSH_BUILD_DIR, DSH_STATE_DIR and DSH_BENCH_TMP); prints one table.
--
--   1 hover, warm: lsp-e2b (clangd in a local sandbox, every query checking
--     the source in the sandbox) against the same clangd over direct stdio on
--     the host (a minimal client: dsh.core.proc pipes, the core's framing,
--     lua-cjson); lsp-local shown too. Target: within 0.3 ms at p50.
--   2 goToDefinition, warm: the same three.
--   3 a warm query's source check (resolve + read of an unchanged file, one
--     round trip into the sandbox), measured alone; queries overlap it with
--     the server's request
--   4 cold start to the first answer: a new workspace (clangd started,
--     initialized, the document opened, hover answered) against the same
--     sequence over direct stdio
--   5 queries per second on one workspace: sequential, and 8 callers at once
--     (one queue per workspace serialises them)
--   6 keeping the server in sync: a hover right after 100 files of the
--     workspace changed (written by one shell command in the sandbox; dshd's
--     watch tells the host, the query tells clangd in one
--     didChangeWatchedFiles and has it re-analyse the open document) against
--     the same hover on a fresh server (row 4's cold start)
--   7 a warm hover with 50 documents open (every one re-read, unchanged,
--     before the query: one round trip) against row 1's (one open document)
--
-- Everything is real: clangd from Debian, dshd in bubblewrap, require "dsh".
-- Baselines and measurements alternate in blocks so that other load on the
-- machine falls on both. A benchmark, not a test: it asserts only that the
-- answers are right.
local async = require "dsh.async"
local context = require "dsh.context"
local json = require "dsh.json"
local lsp = require "dsh.lsp"
local lspframe = require "dsh.core.lspframe"
local proc = require "dsh.core.proc"
local sys = require "dsh.core.sysutil"
local T = require "report"

local BLOCKS, BLOCK_RUNS, WARMUP = 5, 100, 30
local COLD_RUNS = 5
local QPS_SECONDS = 2
local CALLERS = 8

local now = T.now

local function stats(samples)
  local s = {}
  for i, v in ipairs(samples) do s[i] = v end
  table.sort(s)
  local n = #s
  local med = n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
  return { median = med, p90 = s[math.ceil(n * 0.9)], n = n }
end

local function progress(fmt, ...)
  io.stderr:write("bench: ", string.format(fmt, ...), "\n")
end

local SOURCE = table.concat({
  "#include <stddef.h>",
  "/* 注释: 计算面积 🙂 — CJK and emoji before the symbol */",
  'static const char *greeting = "你好, 世界 🌍🚀";',
  "static int square_area(int side) { return side * side; }",
  "int total_area(void) {",
  '  const char *tag = "🙂🙂"; int a = square_area(3);',
  "  return a + (int)(tag[0] == 0) + (int)(greeting[0] == 0);",
  "}",
  "",
}, "\n")
local POS = lsp.position.from_index(SOURCE, (SOURCE:find("square_area(3)", 1, true)))

-- The direct baseline: clangd on pipes, nothing in between ----------------------

local Direct = {}
Direct.__index = Direct

local function direct_start(dir)
  local p = assert(proc.spawn { argv = { "clangd", "--log=error" }, cwd = dir, stdin = "pipe", stdout = "pipe",
    stderr = "null", env = { PATH = os.getenv("PATH") or "/usr/bin:/bin", HOME = dir, LANG = "C.UTF-8" } })
  local d = setmetatable({ p = p, dec = lspframe.decoder(16000000), queue = {}, id = 0 }, Direct)
  return d
end

function Direct:send(msg)
  msg.jsonrpc = "2.0"
  assert(self.p:write(lspframe.encode(json.encode(msg))))
end

function Direct:next_message()
  while #self.queue == 0 do
    local chunk = assert(self.p:read(), "clangd closed its output")
    for _, b in ipairs(assert(self.dec:push(chunk))) do self.queue[#self.queue + 1] = json.decode(b) end
  end
  return table.remove(self.queue, 1)
end

function Direct:request(method, params)
  self.id = self.id + 1
  local id = self.id
  self:send { id = id, method = method, params = params }
  while true do
    local m = self:next_message()
    if m.id == id and m.method == nil then return m.result end
    if m.id ~= nil and m.method ~= nil then self:send { id = m.id, result = json.null } end
  end
end

function Direct:open(dir, path, text)
  local uri = lsp.uri.from_path(dir)
  self:request("initialize", { processId = json.null, rootUri = uri, capabilities = {
    general = { positionEncodings = { "utf-16" } } } })
  self:send { method = "initialized", params = {} }
  self:send { method = "textDocument/didOpen", params = { textDocument = {
    uri = lsp.uri.from_path(path), languageId = "c", version = 1, text = text } } }
end

function Direct:stop()
  self:request("shutdown", nil)
  self:send { method = "exit" }
  self.p:close_stdin()
  self.p:wait()
  self.p:wait_quiescent()
  self.p:close()
  self.dec:close()
end

-- The table ----------------------------------------------------------------------

local function row(t) T.row(t) end
local function ms(s) return string.format("%.3f ms [%.3f]", s.median, s.p90) end

-- Contexts -----------------------------------------------------------------------

local cleanups = {}

local SERVERS = { clangd = { command = "clangd", args = { "--log=error" }, extensionToLanguage = { [".c"] = "c" } } }

local function e2b_context()
  local ctx = context.new()
  ctx:use(require "dsh.providers.e2b", { timeoutMs = 600000, onTimeout = "kill", onDispose = "kill" })
  ctx:use(require "dsh.providers.subprocess_e2b")
  ctx:use(lsp.provider)
  ctx:use(require "dsh.providers.lsp_e2b", { servers = SERVERS })
  assert(ctx:start())
  cleanups[#cleanups + 1] = function() ctx:dispose() end
  return ctx
end

local function local_context()
  local ctx = context.new()
  ctx:use(require "dsh.providers.subprocess_local")
  ctx:use(lsp.provider)
  ctx:use(require "dsh.providers.lsp_local", { servers = SERVERS })
  assert(ctx:start())
  cleanups[#cleanups + 1] = function() ctx:dispose() end
  return ctx
end

local function query(ctx, ws, op)
  local r, err = ctx.lsp:query { operation = op, filePath = "area.c", position = POS, workspaceRoot = ws }
  assert(r, tostring(err))
  return r
end

local function check(op, r)
  if op == "hover" then
    assert(r.hover and r.hover.contents:find("square_area", 1, true), "wrong hover")
  else
    assert(r.locations[1] and r.locations[1].range.start.line == 3, "wrong definition")
  end
end

local function time_runs(runs, fn)
  local out = {}
  for i = 1, runs do
    local t = now()
    fn()
    out[i] = (now() - t) * 1e3
  end
  return out
end

local METHODS = { hover = "textDocument/hover", goToDefinition = "textDocument/definition" }

local warm_e2b_hover -- row 1's lsp-e2b figure, for row 7

-- A hover on the first identifier of a generated file (opens it).
local function query_file(ctx, ws, file)
  local r, err = ctx.lsp:query { operation = "hover", filePath = file, position = { line = 0, character = 5 },
    workspaceRoot = ws }
  assert(r, tostring(err))
  return { hover = { contents = "square_area" } } -- any answer will do: the file is open now
end

local function main()
  local tmp = os.getenv("DSH_BENCH_TMP") or "/tmp"
  local host_ws = tmp .. "/lsp-ws"
  assert(sys.mkdir_p(host_ws))
  assert(sys.write_file(host_ws .. "/area.c", SOURCE))
  local p = io.popen("realpath " .. host_ws)
  host_ws = p:read("*l")
  p:close()

  T.section("language servers (ctx.lsp)", string.format("clangd %s; medians [p90] of %d queries per line",
    (io.popen("clangd --version"):read("*l") or "?"):match("version (%S+)") or "?", BLOCKS * BLOCK_RUNS))
  progress("starting a local sandbox with clangd")
  local ectx = e2b_context()
  local ews = ectx.e2b.cwd
  local envd = assert(ectx.e2b:getSandbox()).envd
  assert(envd:write_file(ews .. "/area.c", SOURCE))
  local lctx = local_context()
  local direct = direct_start(host_ws)
  cleanups[#cleanups + 1] = function() direct:stop() end
  direct:open(host_ws, host_ws .. "/area.c", SOURCE)
  local doc = { textDocument = { uri = lsp.uri.from_path(host_ws .. "/area.c") }, position = POS }

  -- rows 1, 2: warm queries
  for r, op in ipairs { "hover", "goToDefinition" } do
    progress("row %d: %s, %d blocks of %d", r, op, BLOCKS, BLOCK_RUNS)
    for _ = 1, WARMUP do
      direct:request(METHODS[op], doc)
      check(op, query(lctx, host_ws, op))
      check(op, query(ectx, ews, op))
    end
    local d, l, e = {}, {}, {}
    for _ = 1, BLOCKS do
      for _, v in ipairs(time_runs(BLOCK_RUNS, function() direct:request(METHODS[op], doc) end)) do d[#d + 1] = v end
      for _, v in ipairs(time_runs(BLOCK_RUNS, function() query(lctx, host_ws, op) end)) do l[#l + 1] = v end
      for _, v in ipairs(time_runs(BLOCK_RUNS, function() query(ectx, ews, op) end)) do e[#e + 1] = v end
    end
    local sd, sl, se = stats(d), stats(l), stats(e)
    if op == "hover" then warm_e2b_hover = se end
    local diff = se.median - sd.median
    row { row = tostring(r), name = op .. " through lsp-e2b (clangd in the sandbox)", value = ms(se),
      baseline = "direct stdio " .. ms(sd), compare = string.format("%+.3f ms", diff),
      target = "<= +0.300 ms", ok = diff <= 0.3 }
    row { name = op .. " through lsp-local (clangd on the host)", value = ms(sl),
      compare = string.format("%+.3f ms", sl.median - sd.median) }
  end

  -- row 3: the source check alone (resolve + read of an unchanged file)
  progress("row 3: the source check")
  local prov = ectx.lsp._by_id.clangd
  local inst = prov._pool[ews]
  local token = inst:token(ews .. "/area.c")
  local reader = prov._o.reader
  local check_ms = time_runs(BLOCKS * BLOCK_RUNS, function()
    local res, rds = reader:check({ ews, ews .. "/area.c" }, { { ews .. "/area.c", 4000000, token } })
    assert(res and rds[1].kind == "same")
  end)
  row { row = "3", name = "source check of a warm query, alone", value = ms(stats(check_ms)),
    compare = "1 sandbox round trip", target = "overlaps the request" }

  -- row 4: cold start to the first answer
  progress("row 4: cold start, %d runs each", COLD_RUNS)
  local cd, ce = {}, {}
  for i = 1, COLD_RUNS do
    local t = now()
    local dd = direct_start(host_ws)
    dd:open(host_ws, host_ws .. "/area.c", SOURCE)
    local res = dd:request("textDocument/hover", doc)
    cd[i] = (now() - t) * 1e3
    assert(res and res.contents, "no cold hover")
    dd:stop()
    local ws = ews .. "/cold" .. i
    assert(envd:make_dir(ws))
    assert(envd:write_file(ws .. "/area.c", SOURCE))
    t = now()
    check("hover", query(ectx, ws, "hover"))
    ce[i] = (now() - t) * 1e3
  end
  local scd, sce = stats(cd), stats(ce)
  row { row = "4", name = "cold start to first hover (new workspace)", value = string.format("%.1f ms", sce.median),
    baseline = string.format("direct stdio %.1f ms", scd.median),
    compare = string.format("%+.1f ms", sce.median - scd.median) }

  -- row 5: queries per second on one workspace
  progress("row 5: queries per second")
  local function qps(ctx, ws, callers)
    local n, stop = 0, now() + QPS_SECONDS
    local tasks = {}
    for c = 1, callers do
      tasks[c] = async.run(function()
        while now() < stop do
          query(ctx, ws, "goToDefinition")
          n = n + 1
        end
      end)
    end
    for _, t in ipairs(tasks) do t:await() end
    return n / QPS_SECONDS
  end
  local dq
  do
    local n, stop = 0, now() + QPS_SECONDS
    while now() < stop do
      direct:request("textDocument/definition", doc)
      n = n + 1
    end
    dq = n / QPS_SECONDS
  end
  local q1, q8 = qps(ectx, ews, 1), qps(ectx, ews, CALLERS)
  row { row = "5", name = "goToDefinition per second, one workspace", value = string.format("%.0f /s", q1),
    baseline = string.format("direct stdio %.0f /s", dq), compare = string.format("x%.2f", q1 / dq) }
  row { name = string.format("the same, %d callers at once", CALLERS), value = string.format("%.0f /s", q8),
    compare = string.format("x%.2f", q8 / dq) }

  -- row 6: a query after 100 files changed, against a fresh server
  progress("row 6: a query after 100 files changed, %d runs", COLD_RUNS)
  local synced = {}
  for i = 1, COLD_RUNS do
    local r = assert(ectx.e2b:exec({ "bash", "-c", "for n in $(seq 1 100); do printf 'int v%d_" .. i
      .. " = %d;\\n' $n $n > gen_$n.c; done" }, { cwd = ews }))
    assert(r.exit_code == 0, r.stderr)
    local t = now()
    check("hover", query(ectx, ews, "hover"))
    synced[i] = (now() - t) * 1e3
  end
  local sent = 0
  for _, it in ipairs(ectx.lsp:status().clangd.instances) do
    if it.root == ews then sent = it.changesSent end
  end
  assert(sent >= 100 * COLD_RUNS, "clangd was told of " .. sent .. " changes")
  local ss = stats(synced)
  row { row = "6", name = "hover after 100 files changed (lsp-e2b)", value = string.format("%.1f ms", ss.median),
    baseline = string.format("fresh server %.1f ms", sce.median),
    compare = string.format("x%.2f", ss.median / sce.median), target = "< fresh server", ok = ss.median < sce.median }

  -- row 7: a warm query with 50 documents open
  progress("row 7: a warm hover with 50 documents open")
  for n = 1, 49 do check("hover", query_file(ectx, ews, "gen_" .. n .. ".c")) end
  for _ = 1, WARMUP do check("hover", query(ectx, ews, "hover")) end
  local open50 = {}
  for _ = 1, BLOCKS do
    for _, v in ipairs(time_runs(BLOCK_RUNS, function() query(ectx, ews, "hover") end)) do open50[#open50 + 1] = v end
  end
  local so = stats(open50)
  row { row = "7", name = "warm hover with 50 documents open (lsp-e2b)", value = ms(so),
    baseline = "one open " .. ms(warm_e2b_hover),
    compare = string.format("%+.3f ms", so.median - warm_e2b_hover.median) }

  T.print()
end

local ok, err = xpcall(function() async.run(main):await() end, debug.traceback)
async.run(function()
  for i = #cleanups, 1, -1 do pcall(cleanups[i]) end
end):await()
if not ok then
  io.stderr:write("bench/lsp.lua: ", tostring(err), "\n")
  os.exit(1)
end
