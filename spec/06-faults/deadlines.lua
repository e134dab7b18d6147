--- What the specs of a sandbox that stops answering share (spec/06-faults/08,
-- 09): the faults (dshd stopped by SIGSTOP or by the freezer, the path to it
-- trickling a byte a second or stalled), and one check per provider that
-- its call ends within its deadline with an error naming the sandbox. Not a
-- spec file (busted runs *_spec.lua only).
--
-- Deadlines here are the host's (dsh.envd._watch, docs/api.md): a call that
-- should answer at once ends once a probe goes unanswered (slow_ms 100 +
-- probe_timeout_ms 1500), a call with a timeout within that timeout and 2 s,
-- dispose within 5 s; the ceilings below are those bounds, or for calls
-- without a deadline of their own a bound a slow machine never reaches.
local assert = require "luassert"
local async = require "dsh.async"
local D = require "helpers.dshd"
local F = require "06-faults.support"
local envd = require "dsh.envd"
local helpers = require "helpers"
local lfs = require "lfs"
local loop = require "dsh.core.loop"
local state = require "dsh.sandbox.state"
local sys = require "dsh.core.sysutil"

local M = {}

M.UNANSWERED_MS = 3000 -- a call without a deadline of its own, once the daemon does not answer
M.GRACE_MS = 2000 -- a call with a timeout ends within it and this
M.FAST_MS = 500 -- a later call, once the sandbox was found unresponsive
M.DISPOSE_MS = 5000

local function put(path, text) -- cgroup files take plain writes
  local f = assert(io.open(path, "w"))
  assert(f:write(text))
  assert(f:close())
end

-- Faults: {name=, stop(), resume(), close()} for the sandbox of ctx -------------------

--- dshd stopped with SIGSTOP from outside (and SIGCONT to resume).
function M.sigstop(id)
  local pid = assert(D.dshd_pid(id), "no dshd runs for sandbox " .. id)
  return {
    name = "SIGSTOP",
    stop = function() assert(sys.kill(pid, 19)) end,
    resume = function() assert(sys.kill(pid, 18)) end,
    close = function() sys.kill(pid, 18) end,
  }
end

--- The sandbox's own freezer group (cgroup v1), or nil when it has none.
function M.freezer_group(id)
  local rt = state.read_runtime(id)
  local dir = rt and rt.cgroups and rt.cgroups.freezer
  if dir and sys.exists(dir .. "/freezer.state") then return dir end
  return nil
end

local function freezer_state(dir)
  return ((sys.read_file(dir .. "/freezer.state") or ""):match("^%u+"))
end

--- The whole sandbox (dshd with it) frozen by its cgroup freezer.
function M.freezer(id)
  local dir = assert(M.freezer_group(id), "sandbox " .. id .. " has no freezer group")
  local function set(want)
    put(dir .. "/freezer.state", want)
    assert(helpers.eventually(function() return freezer_state(dir) == want end, 5000), "freezer never " .. want)
  end
  return {
    name = "the freezer",
    stop = function() set("FROZEN") end,
    resume = function() set("THAWED") end,
    close = function() if sys.exists(dir) then put(dir .. "/freezer.state", "THAWED") end end,
  }
end

--- The path to dshd through the fault proxy, in mode ("trickle 1 1000": a byte
-- a second each way; "stall": nothing) while stopped. The context's client is
-- replaced by one through the proxy (ctx.e2b's guard asks its handle for the
-- client at every call), so do this before starting what the checks use.
function M.proxied(ctx, mode)
  local id = ctx.e2b:sandboxId()
  local px = F.proxy(state.socket(id))
  local c = envd.client { unix_socket = px.path, access_token = state.read_meta(id).token, user = "user",
    label = "sandbox " .. id }
  ctx.e2b._handle.envd = c
  return {
    name = mode,
    stop = function() px.set(mode) end,
    resume = function() px.set("pass") end,
    close = function()
      c:close()
      px.stop()
    end,
  }
end

--- Freeze the sandbox processes whose command line contains marker (and
-- their descendants) in a freezer group of their own below the sandbox's:
-- no signal ends them until thaw() (which also puts them back). dshd runs on.
function M.freeze_processes(id, marker)
  local dir = assert(M.freezer_group(id), "sandbox " .. id .. " has no freezer group")
  local dshd = assert(D.dshd_pid(id), "no dshd runs for sandbox " .. id)
  local pids, seen = {}, {}
  local function add(p)
    if not seen[p] then
      seen[p] = true
      pids[#pids + 1] = p
    end
  end
  for _, p in ipairs(D.descendants(dshd)) do
    if (sys.read_file("/proc/" .. p .. "/cmdline") or ""):find(marker, 1, true) then
      add(p)
      for _, c in ipairs(D.descendants(p)) do add(c) end
    end
  end
  assert(#pids > 0, "no sandbox process runs " .. marker)
  local sub = dir .. "/spec-frozen-" .. sys.random_hex(4)
  assert(lfs.mkdir(sub))
  for _, p in ipairs(pids) do put(sub .. "/cgroup.procs", tostring(p)) end
  put(sub .. "/freezer.state", "FROZEN")
  assert(helpers.eventually(function() return freezer_state(sub) == "FROZEN" end, 5000), "never frozen")
  local thawed = false
  return {
    pids = pids,
    thaw = function()
      if thawed then return end
      thawed = true
      put(sub .. "/freezer.state", "THAWED")
      -- what still runs goes back; what dies of its pending SIGKILL leaves by itself
      assert(helpers.eventually(function()
        for p in (sys.read_file(sub .. "/cgroup.procs") or ""):gmatch("%d+") do
          local f = io.open(dir .. "/cgroup.procs", "w")
          if f then
            f:write(p)
            f:close()
          end
        end
        return lfs.rmdir(sub)
      end, 5000), "the spec's freezer group " .. sub .. " stays busy")
    end,
  }
end

-- Checks -------------------------------------------------------------------------------

local function elapsed(t0)
  return loop.now_ms() - t0
end

local function under(ms, bound, what)
  assert(ms < bound, string.format("%s took %.0f ms (bound %d ms)", what, ms, bound))
end

-- "sandbox <id> is unresponsive: its daemon did not answer a health check
-- within 1500 ms" (and 100 ms more for each other call the probe waited behind)
local function unresponsive_pattern(id)
  return "sandbox " .. id .. " is unresponsive: its daemon did not answer a health check within (%d+) ms"
end

local function names_sandbox(err, id, what)
  assert(err, what .. ": no error")
  local msg = tostring(err.message or err)
  local ms = tonumber(msg:match(unresponsive_pattern(id)))
  assert(ms and ms >= envd.PROBE_TIMEOUT_MS, what .. ": the error does not say the sandbox is unresponsive: " .. msg)
end

-- Once the fault is undone the sandbox answers a health check, which ends
-- the unresponsive state at once (a later call would probe within RETRY_MS).
local function resume(ctx, fault)
  fault.resume()
  local c = ctx.e2b:getSandbox().envd
  assert(helpers.eventually(function() return c:health() end, 10000), "the sandbox does not answer again")
  assert.is_nil(c:unresponsive())
end

--- Everything the checks use, started while the sandbox answers: a fixture
-- file for the language server (warmed up), a PTY session, a long process.
function M.prepare(ctx)
  assert(ctx.fs:writeText("a.fx", "hello slow\n"))
  assert(F.hover(ctx, "a.fx", 0, 1))
  local agent = { id = "agent-deadlines" }
  local s = assert(ctx.pty:spawn(agent, { type = "shell" }))
  local h = assert(ctx.subprocess:spawn { argv = { "sleep", "300" } })
  assert(helpers.eventually(function() return h.pid > 0 end), "the long process never started")
  return { agent = agent, session = s, long = h }
end

--- Each provider's call while fault holds, resuming after each: fs,
-- subprocess, bash, pty, lsp and code runtime. w: from prepare().
function M.each_provider(ctx, fault, w)
  local id = ctx.e2b:sandboxId()
  local tmp = D.inside(id, "/tmp") -- the sandbox's files may live in its disk image

  -- fs: no deadline of its own; then at once for every later call, with the same code
  fault.stop()
  local t0 = loop.now_ms()
  local r, err = ctx.fs:readText("a.fx")
  under(elapsed(t0), M.UNANSWERED_MS, "fs readText (" .. fault.name .. ")")
  assert.is_nil(r)
  assert.equal("SANDBOX_UNRESPONSIVE", err.code)
  assert.matches('^cannot read "/home/user/workspace/a%.fx": ', err.message)
  names_sandbox(err, id, "fs")
  t0 = loop.now_ms()
  r, err = ctx.fs:stat("a.fx")
  under(elapsed(t0), M.FAST_MS, "a later fs stat")
  assert.same({ "SANDBOX_UNRESPONSIVE" }, { err.code, r })
  assert.matches(" %(found %d+ ms ago%); [A-Z]+ /[^ ]+ was not sent$", err.message)
  resume(ctx, fault)

  -- subprocess: terminate a running process; its outcome and its group's are given up
  fault.stop()
  t0 = loop.now_ms()
  w.long:terminate()
  local res
  res, err = w.long.done:await()
  under(elapsed(t0), M.UNANSWERED_MS, "subprocess done after terminate (" .. fault.name .. ")")
  assert.is_nil(res)
  assert.equal("SANDBOX_UNRESPONSIVE", err.code)
  names_sandbox(err, id, "subprocess")
  local gone, gerr = w.long:waitForExit()
  assert.same({ "SANDBOX_UNRESPONSIVE" }, { gerr and gerr.code, gone })
  resume(ctx, fault)

  -- bash: a command with a timeout ends within it and the grace
  os.remove(tmp .. "/bash-started")
  local started = loop.now_ms()
  local run = async.run(function()
    return ctx.bash:run { command = "touch /tmp/bash-started; sleep 300", timeout = 2000 }
  end)
  assert(helpers.eventually(function() return sys.exists(tmp .. "/bash-started") end), "bash never started")
  fault.stop()
  res, err = run:await()
  under(elapsed(started), 2000 + M.GRACE_MS, "bash run with timeout 2000 (" .. fault.name .. ")")
  assert.is_nil(res)
  assert.equal("SANDBOX_UNRESPONSIVE", err.code)
  names_sandbox(err, id, "bash")
  resume(ctx, fault)

  -- pty: a send ends within its timeout (at idle silence, the input still on its
  -- way); once the sandbox is found unresponsive the next one fails at once
  fault.stop()
  t0 = loop.now_ms()
  local op = assert(ctx.pty:startSend(w.agent, w.session.id, { text = "echo one", submit = true }))
  op:wait()
  under(elapsed(t0), 5000 + M.GRACE_MS, "pty send with timeout 5000 (" .. fault.name .. ")")
  local envd_c = ctx.e2b:getSandbox().envd
  assert(helpers.eventually(function() return envd_c:unresponsive() end, M.UNANSWERED_MS),
    "the pending input never found the sandbox unresponsive")
  t0 = loop.now_ms()
  op = assert(ctx.pty:startSend(w.agent, w.session.id, { text = "echo two", submit = true }))
  res, err = op:wait()
  under(elapsed(t0), M.FAST_MS, "a later pty send")
  assert.is_nil(res)
  assert.equal("SANDBOX_UNRESPONSIVE", err.code)
  names_sandbox(err, id, "pty")
  resume(ctx, fault)

  -- lsp: a query with a timeout ends within it and the grace
  fault.stop()
  t0 = loop.now_ms()
  res, err = ctx.lsp:query({ operation = "hover", filePath = "a.fx", position = { line = 0, character = 7 },
    workspaceRoot = ctx.e2b.cwd }, { timeoutMs = 2000 })
  under(elapsed(t0), 2000 + M.GRACE_MS, "lsp query with timeoutMs 2000 (" .. fault.name .. ")")
  assert.is_nil(res)
  assert.matches("^LSP_", err.code)
  names_sandbox(err, id, "lsp")
  resume(ctx, fault)

  -- code runtime: a run with maxWallMs ends within it and the grace, as a result
  fault.stop()
  t0 = loop.now_ms()
  res = ctx.codeRuntime:run { language = "lua", program = "return 6 * 7", maxWallMs = 2000 }
  under(elapsed(t0), 2000 + M.GRACE_MS, "code run with maxWallMs 2000 (" .. fault.name .. ")")
  assert.is_table(res.error, "the run did not fail")
  assert.equal("worker-exit", res.error.kind)
  names_sandbox(res.error, id, "code runtime")
  resume(ctx, fault)

  -- and every service works again
  r = assert(ctx.bash:run { command = "echo back" })
  assert.same({ 0, "back\n" }, { r.exitCode, r.stdout.text })
  assert.equal(42, ctx.codeRuntime:run { language = "lua", program = "return 6 * 7" }.value)
end

--- Dispose while fault holds: within DISPOSE_MS, reporting that the sandbox
-- did not answer and was killed through its supervisor; then the fault is
-- closed and nothing is left.
function M.dispose(ctx, fault)
  local id = ctx.e2b:sandboxId()
  fault.stop()
  local t0 = loop.now_ms()
  local ok, err = ctx:dispose()
  under(elapsed(t0), M.DISPOSE_MS, "dispose (" .. fault.name .. ")")
  assert.is_nil(ok)
  local report
  for _, e in ipairs(err.errors or { err }) do
    if e.code == "SANDBOX_UNRESPONSIVE" and e.message:find("killed through its supervisor", 1, true) then
      report = e
    end
  end
  assert(report, "dispose did not report the kill: " .. tostring(err))
  assert.matches("^sandbox " .. id .. "[ :]", report.message)
  assert.matches("; it was killed through its supervisor, which ended what the context had started there$",
    report.message)
  fault.close() -- the proxy names the sandbox's socket on its command line
  F.assert_nothing_left(id)
end

return M
