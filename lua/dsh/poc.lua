--- dsh.poc: the proof of concept — one sandbox, one world, step by step.
--
-- `make poc` (or `bin/dsh poc`) composes ctx.e2b, ctx.fs, ctx.subprocess and
-- ctx.bash on one embedded local sandbox (`--cloud`: an E2B cloud sandbox,
-- with E2B_API_KEY) and shows, with each step's time, that files written
-- through fs are what Bash sees and the other way round, that ambient secrets
-- are scrubbed, that collected output is truncated and spilled, that
-- terminate reaches quiescence, that Bash returns when its shell exits and
-- keeps what it left running, that the host workspace is invisible inside,
-- and that disposal kills the sandbox. Any failing step is named and the run
-- exits non-zero; the sandbox is disposed either way.
local async = require "dsh.async"
local context = require "dsh.context"
local loop = require "dsh.loop"

local M = {}

local SECRETS = { NPM_TOKEN = "sentinel-secret", DSH_STALE = "sentinel-stale", KEEP = "visible" }

local function check(cond, fmt, ...)
  if not cond then error({ poc = string.format(fmt, ...) }, 0) end
end

local function ok_or(v, err, what)
  if v == nil then error({ poc = (what and what .. ": " or "") .. tostring(err) }, 0) end
  return v
end

local function bash(ctx, command)
  return ok_or(ctx.bash:run { command = command }, nil, "bash " .. command)
end

local function show(s)
  return '"' .. s:gsub("\\", "\\\\"):gsub("\n", "\\n"):gsub('"', '\\"') .. '"'
end

local function host_cwd()
  local p = io.popen("pwd")
  local dir = p:read("*l")
  p:close()
  return dir
end

local function steps(state)
  return {
    { "create the sandbox and compose fs, subprocess and bash on it", function()
      local ctx = context.new()
      state.ctx = ctx
      ctx:use(require "dsh.providers.e2b", {
        backend = state.cloud and "cloud" or "local", envs = SECRETS, timeoutMs = 600000,
        onTimeout = "kill", onDispose = "kill",
      })
      ctx:use(require "dsh.providers.fs_e2b")
      ctx:use(require "dsh.providers.subprocess_e2b")
      ctx:use(require "dsh.providers.bash", { timeoutMs = 30000 })
      ok_or(ctx:start())
      state.id = ok_or(ctx.e2b:sandboxId())
      return "sandbox " .. state.id .. ", cwd " .. ctx.e2b.cwd
    end },
    { "a file written through ctx.fs is read by Bash", function()
      local w = ok_or(state.ctx.fs:writeText("from-fs.txt", "written-by-fs\n", { createIfAbsent = true }))
      check(w.operation == "create", "expected a create, got %s", tostring(w.operation))
      local r = bash(state.ctx, "cat from-fs.txt")
      check(r.exitCode == 0 and r.stdout.text == "written-by-fs\n",
        "bash saw %q (exit %s)", r.stdout.text, tostring(r.exitCode))
      return "bash printed " .. show(r.stdout.text)
    end },
    { "a file written by Bash is read through ctx.fs", function()
      local r = bash(state.ctx, "printf 'written-by-bash\\n' > from-bash.txt")
      check(r.exitCode == 0, "bash exited %s", tostring(r.exitCode))
      local t = ok_or(state.ctx.fs:readText("from-bash.txt"))
      check(t.text == "written-by-bash\n", "fs read %q", t.text)
      return "fs read " .. show(t.text)
    end },
    { "ambient secrets are scrubbed, explicit env is kept", function()
      local h = state.ctx.subprocess:spawn {
        argv = { "env" }, graceMs = 1000,
        env = { ["FOO-BAR"] = "a", DSH_EXPLICIT = "b", TOKEN_EXPLICIT = "c" },
        stdio = { stdin = "ignore", stdout = { maxBytes = 65536 }, stderr = { maxBytes = 4096 } },
      }
      local outcome = ok_or(h.done:await())
      check(outcome.exitCode == 0, "env exited %s", tostring(outcome.exitCode))
      local env = h.stdout:readFrom(0).text
      for _, want in ipairs { "FOO-BAR=a", "DSH_EXPLICIT=b", "TOKEN_EXPLICIT=c", "KEEP=visible" } do
        check(env:find("\n" .. want .. "\n", 1, true) or env:find("^" .. want:gsub("%-", "%%-") .. "\n"),
          "%s missing from the environment", want)
      end
      for _, gone in ipairs { "sentinel-secret", "sentinel-stale" } do
        check(not env:find(gone, 1, true), "ambient secret %s leaked into the environment", gone)
      end
      return "NPM_TOKEN and DSH_STALE dropped; FOO-BAR, DSH_EXPLICIT, TOKEN_EXPLICIT, KEEP present"
    end },
    { "collected output is truncated to its tail and spilled in full", function()
      local h = state.ctx.subprocess:spawn {
        argv = { "bash", "-c", "printf 0123456789; sleep 30" }, graceMs = 1000,
        stdio = { stdin = "ignore", stdout = { maxBytes = 4, spill = { maxBytes = 100 } }, stderr = "pipe" },
      }
      local r
      for _ = 1, 500 do
        r = h.stdout:readFrom(0)
        if r.nextOffset >= 10 then break end
        async.sleep(10)
      end
      check(r.nextOffset == 10 and r.text == "6789" and r.lossy, "readFrom(0) gave %q at %d (lossy %s)",
        r.text, r.nextOffset, tostring(r.lossy))
      h:terminate()
      local outcome = ok_or(h.done:await())
      check(outcome.signal == "SIGTERM", "expected SIGTERM, got %s", tostring(outcome.signal))
      check(h:waitForExit() == true, "the group did not exit")
      local spill = h.stdout:readFrom(0).spillPath
      check(spill ~= nil, "no spill file was kept")
      local full = ok_or(state.ctx.fs:readText(spill)).text
      check(full == "0123456789", "spill holds %q", full)
      return "tail \"6789\" (lossy), spill " .. spill .. " holds all 10 bytes"
    end },
    { "terminate reaches quiescence (a TERM-immune grandchild is killed)", function()
      local h = state.ctx.subprocess:spawn {
        argv = { "bash", "-c", "trap '' TERM; sleep 300 & echo started; wait" }, graceMs = 300,
        stdio = { stdin = "ignore", stdout = { maxBytes = 100 }, stderr = { maxBytes = 100 } },
      }
      for _ = 1, 500 do
        if h.stdout:readFrom(0).text:find("started") then break end
        async.sleep(10)
      end
      local t0 = loop.now_ms()
      h:terminate()
      local outcome = ok_or(h.done:await())
      check(h:waitForExit() == true, "the group did not reach quiescence")
      check(outcome.signal == "SIGKILL", "expected escalation to SIGKILL, got %s", tostring(outcome.signal))
      local gone = bash(state.ctx, "pgrep -x sleep || echo none")
      check(gone.stdout.text == "none\n", "still running: %s", gone.stdout.text)
      return string.format("TERM ignored, KILL after the 300 ms grace; group empty after %.0f ms", loop.now_ms() - t0)
    end },
    { "Bash returns when its shell exits; what it left running goes on", function()
      local b = state.ctx.bash
      local t0 = loop.now_ms()
      local r = bash(state.ctx, "(sleep 0.3; echo later) & echo now")
      local ms = loop.now_ms() - t0
      check(r.stdout.text == "now\n" and r.background ~= nil, "expected now and a background id, got %s",
        show(b:render(r)))
      local out = ""
      for _ = 1, 500 do
        out = out .. ok_or(b:readOutput(r.background)).text
        if out:find("later", 1, true) then break end
        async.sleep(10)
      end
      check(out == "later\n", "its later output was %s", show(out))
      local p = ok_or(b:start { command = "exec sleep 30" })
      check(b:kill(p) == true, "kill found %s ended", p.id)
      return string.format("returned in %.0f ms leaving %s, which printed %s later; %s started and killed",
        ms, r.background, show(out), p.id)
    end },
    { "the host workspace is invisible from inside", function()
      local host = host_cwd()
      local marker = host .. "/.dsh-poc-marker-" .. os.time()
      local f = assert(io.open(marker, "w"))
      f:write("host only\n")
      f:close()
      local r = bash(state.ctx, "test -e '" .. marker .. "' && echo visible || echo invisible; pwd")
      os.remove(marker)
      check(r.stdout.text:match("^invisible\n"), "the host file %s is visible inside", marker)
      local inside = r.stdout.text:match("\n(.-)\n$")
      return "host " .. host .. " not visible; the sandbox's cwd " .. tostring(inside) .. " is its own"
    end },
    { "disposal kills every process and then the sandbox", function()
      local ctx, id = state.ctx, state.id
      state.ctx = nil
      ok_or(ctx:dispose())
      if not state.cloud then
        local sandbox = require "dsh.sandbox"
        check(not sandbox.exists(id), "sandbox %s still exists", id)
        local sb, err = sandbox.connect(id)
        check(sb == nil and err.code == "not_found", "connect after dispose: %s", tostring(err))
      end
      return "sandbox " .. id .. " is gone"
    end },
  }
end

-- Steps of other parts (dsh.poc.<part>), run on the same composed context
-- after the steps above and before the last one (disposal).
M.PARTS = { "dsh.poc.pty", "dsh.poc.lsp", "dsh.poc.code_runtime" }

local function run(opts)
  local state = { cloud = opts.cloud }
  local list = steps(state)
  for _, part in ipairs(M.PARTS) do
    for _, step in ipairs(require(part).steps(state)) do table.insert(list, #list, step) end
  end
  print(string.format("dsh poc: one remote world on %s", state.cloud and "an E2B cloud sandbox" or "a local sandbox"))
  local total0 = loop.now_ms()
  local failed
  for i, step in ipairs(list) do
    local t0 = loop.now_ms()
    local ok, res = pcall(step[2])
    local ms = loop.now_ms() - t0
    if ok then
      print(string.format("  [%d/%d] %-66s ok %8.1f ms", i, #list, step[1], ms))
      print("        " .. tostring(res))
    else
      local why = type(res) == "table" and res.poc or tostring(res)
      print(string.format("  [%d/%d] %-66s FAILED %.1f ms", i, #list, step[1], ms))
      print("        " .. why)
      failed = i
      break
    end
    io.stdout:flush()
  end
  if state.ctx then state.ctx:dispose() end
  if failed then
    print(string.format("poc: step %d failed", failed))
    return 1
  end
  print(string.format("poc: all %d steps passed in %.1f ms", #list, loop.now_ms() - total0))
  return 0
end

--- bin/dsh poc [--cloud]; returns the exit status.
function M.main(args)
  local opts = {}
  for _, a in ipairs(args or {}) do
    if a == "--cloud" then
      opts.cloud = true
    else
      io.stderr:write("usage: dsh poc [--cloud]\n")
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
