--- dsh.app.poc: the proof of concept — the reference's live composition (§6.2,
-- steps A and 1-17), step by step, on one world composed by one line:
-- `ctx:use(require "dsh.providers.overlay", {...})`.
--
-- `make poc` (or `bin/dsh poc`) runs it on an embedded local sandbox; `--cloud`
-- on an E2B cloud sandbox (E2B_API_KEY; E2B_API_URL and E2B_SANDBOX_URL
-- point it elsewhere, e.g. at a stand-in). The steps live with their parts
-- (dsh.app.poc.world: 1-5, dsh.app.poc.lsp: 6-8, dsh.app.poc.pty: A and 9-11,
-- dsh.app.poc.code_runtime: 12-16) and run in the reference's order, each titled
-- and timed; step 17 disposes the world and checks that the host cwd holds
-- none of the files and that the sandbox is gone. A failing step is named
-- and the run exits 1; the world is disposed either way.
local C = require "dsh.app.poc.check"
local context = require "dsh.context"
local loop = require "dsh.core.loop"

local M = {}

M.AMBIENT = { NPM_TOKEN = "sentinel-secret", DSH_STALE = "sentinel-stale", KEEP = "visible" }

--- The parts whose steps run, by the reference's labels.
M.PARTS = { "dsh.app.poc.world", "dsh.app.poc.lsp", "dsh.app.poc.pty", "dsh.app.poc.code_runtime" }
M.ORDER = { "A", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16" }

-- What the sandbox's files are called in the host's cwd too (none may exist there).
local FILES = { "from-fs.txt", "from-bash.txt", "multibyte # file.c", "swapped.c", "big.c" }

local function host_cwd()
  local p = io.popen("pwd")
  local dir = p:read("*l")
  p:close()
  return dir
end

--- The overlay config of the run (reference §6.2 B): the sandbox's cwd is the
-- host's cwd string, which names two unrelated directories.
function M.config(cloud, cwd, no_network)
  return {
    backend = cloud and "cloud" or "local",
    e2b = { cwd = cwd, envs = M.AMBIENT, timeoutMs = 180000, onTimeout = "kill", onDispose = "kill",
      network = not no_network },
    bash = { timeoutMs = 30000 },
    pty = { pollIntervalMs = 25, idleSilenceMs = 2000, timeoutMs = 5000, disposeGraceMs = 1000 },
    lsp = { servers = require("dsh.app.poc.lsp").SERVERS },
    codeRuntime = require("dsh.app.poc.code_runtime").CONFIG,
  }
end

-- Whether sandbox id is gone (asked of its control plane); nil, why if not.
local function sandbox_gone(state)
  local err
  if state.cloud then
    local cfg = require("dsh.providers.e2b.schema").validate { backend = "cloud" }
    local h
    h, err = require("dsh.providers.e2b.cloud_backend").connect(cfg, state.id)
    if h then h:close() return nil, "the control plane still connects to it" end
  else
    local sandbox = require "dsh.sandbox"
    if sandbox.exists(state.id) then return nil, "it still exists" end
    local sb
    sb, err = sandbox.connect(state.id)
    if sb then sb:close() return nil, "it still connects" end
  end
  if err.code ~= "not_found" then return nil, "connecting failed otherwise: " .. tostring(err) end
  return true
end

local function steps(state)
  local list = {
    { "", "compose the world: one ctx:use(overlay) on one sandbox", function()
      local ctx = context.new()
      state.ctx = ctx
      ctx:use(require "dsh.providers.overlay", M.config(state.cloud, state.cwd, state.no_network))
      C.ok_or(ctx:start())
      state.id = C.ok_or(ctx.e2b:sandboxId())
      return string.format("sandbox %s, cwd %s: e2b, fs, subprocess, bash, pty, lsp (%s), codeRuntime", state.id,
        ctx.e2b.cwd, table.concat(ctx.lsp:providers(), ", "))
    end },
  }
  local by_label = {}
  for _, part in ipairs(M.PARTS) do
    for _, step in ipairs(require(part).steps(state)) do by_label[step[1]] = step end
  end
  for _, label in ipairs(M.ORDER) do list[#list + 1] = assert(by_label[label], "no step " .. label) end
  list[#list + 1] = { "17", "dispose: nothing in the host cwd, the sandbox gone", function()
    local marker = ".dsh-poc-marker-" .. os.time()
    local f = assert(io.open(state.cwd .. "/" .. marker, "w"))
    f:write("host only\n")
    f:close()
    local r, err = state.ctx.bash:run { command = "test -e '" .. marker .. "' && echo visible || echo invisible" }
    os.remove(state.cwd .. "/" .. marker)
    C.ok_or(r, err, "bash")
    C.check(r.stdout.text == "invisible\n", "the host's file %s is visible in the sandbox", marker)
    local ctx = state.ctx
    state.ctx = nil
    C.ok_or(ctx:dispose())
    for _, name in ipairs(FILES) do
      local h = io.open(state.cwd .. "/" .. name)
      if h then h:close() end
      C.check(h == nil, "%s exists in the host cwd", name)
    end
    C.ok_or(sandbox_gone(state))
    return string.format("the host cwd holds none of the %d files (nor did the sandbox see the host's); "
      .. "sandbox %s not found", #FILES, state.id)
  end }
  return list
end

local function run(opts)
  local state = { cloud = opts.cloud, cwd = host_cwd(), no_network = opts.no_network }
  local list = steps(state)
  print(string.format("dsh poc: the reference's live composition on %s",
    state.cloud and "an E2B cloud sandbox" or "a local sandbox"))
  local total0 = loop.now_ms()
  local failed
  for i, step in ipairs(list) do
    local title = (step[1] ~= "" and step[1] .. ". " or "") .. step[2]
    local t0 = loop.now_ms()
    local ok, res = pcall(step[3])
    local ms = loop.now_ms() - t0
    if ok then
      print(string.format("  [%2d/%d] %-72s ok %8.1f ms", i, #list, title, ms))
      print("          " .. tostring(res))
    else
      local why = type(res) == "table" and res.poc or tostring(res)
      print(string.format("  [%2d/%d] %-72s FAILED %.1f ms", i, #list, title, ms))
      print("          " .. why)
      failed = { i = i, title = title }
      break
    end
    io.stdout:flush()
  end
  if state.ctx then state.ctx:dispose() end
  if failed then
    print(string.format("poc: step %d failed: %s", failed.i, failed.title))
    return 1
  end
  print(string.format("poc: all %d steps passed in %.1f ms", #list, loop.now_ms() - total0))
  return 0
end

--- bin/dsh poc [--cloud] [--no-network]; returns the exit status.
function M.main(args)
  local opts = {}
  for _, a in ipairs(args or {}) do
    if a == "--cloud" then
      opts.cloud = true
    elseif a == "--no-network" then
      opts.no_network = true -- the steps need none (a host user whose /dev/net/tun is root's)
    else
      io.stderr:write("usage: dsh poc [--cloud] [--no-network]\n")
      return 2
    end
  end
  if opts.cloud and (os.getenv("E2B_API_KEY") or "") == "" then
    io.stderr:write("dsh poc --cloud: set E2B_API_KEY\n")
    return 2
  end
  return run(opts)
end

return M
