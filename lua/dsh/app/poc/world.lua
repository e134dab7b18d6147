--- dsh.app.poc.world: `make poc`'s steps 1-5 of the reference's live composition
-- (§6.2 B): files written through ctx.fs are what Bash sees and the other way
-- round, explicit env is kept and ambient secrets scrubbed, a command whose
-- publication fails leaves no survivor, and collected output keeps its tail
-- while a spill over its bound is dropped.
local async = require "dsh.async"
local C = require "dsh.app.poc.check"
local errors = require "dsh.errors"

local M = {}
local check, ok_or, show = C.check, C.ok_or, C.show

local function ps(ctx)
  return C.exec(ctx, { "ps", "-eo", "args=" }).stdout
end

--- The steps, {label, title, fn} each; state.ctx is the composed context.
function M.steps(state)
  return {
    { "1", "a file written through ctx.fs is read by Bash", function()
      local w, err = state.ctx.fs:writeText("from-fs.txt", "written-by-fs\n", { createIfAbsent = true })
      ok_or(w, err, "writeText")
      check(w.operation == "create", "expected a create, got %s", tostring(w.operation))
      local r = C.bash(state.ctx, "cat from-fs.txt")
      check(r.exitCode == 0 and r.stdout.text == "written-by-fs\n",
        "bash saw %s (exit %s)", show(r.stdout.text), tostring(r.exitCode))
      return "bash printed " .. show(r.stdout.text) .. ", exit 0"
    end },
    { "2", "a file written by Bash is read through ctx.fs", function()
      local r = C.bash(state.ctx, "printf 'written-by-bash\\n' > from-bash.txt")
      check(r.exitCode == 0, "bash exited %s", tostring(r.exitCode))
      local t, err = state.ctx.fs:readText("from-bash.txt")
      ok_or(t, err, "readText")
      check(t.text == "written-by-bash\n", "fs read %s", show(t.text))
      return "fs read " .. show(t.text)
    end },
    { "3", "explicit env is kept, ambient secrets are scrubbed", function()
      local h = ok_or(state.ctx.subprocess:spawn {
        argv = { "env" }, graceMs = 1000,
        env = { ["FOO-BAR"] = "a", DSH_EXPLICIT = "b", TOKEN_EXPLICIT = "c" },
        stdio = { stdin = "ignore", stdout = { maxBytes = 65536 }, stderr = { maxBytes = 4096 } },
      })
      local outcome, err = h.done:await()
      ok_or(outcome, err, "env")
      check(outcome.exitCode == 0, "env exited %s", tostring(outcome.exitCode))
      local env = {}
      for line in h.stdout:readFrom(0).text:gmatch("[^\n]+") do
        local k, v = line:match("^([^=]+)=(.*)$")
        if k then env[k] = v end
      end
      for k, v in pairs { ["FOO-BAR"] = "a", DSH_EXPLICIT = "b", TOKEN_EXPLICIT = "c", KEEP = "visible" } do
        check(env[k] == v, "%s is %s, not %s", k, tostring(env[k]), v)
      end
      check(env.NPM_TOKEN == nil and env.DSH_STALE == nil, "an ambient secret reached the command")
      return "FOO-BAR, DSH_EXPLICIT, TOKEN_EXPLICIT and KEEP present; NPM_TOKEN and DSH_STALE dropped"
    end },
    { "4", "a command whose publication fails leaves no survivor", function()
      local sub = state.ctx.subprocess
      -- the fault the reference injects: the first read of the command's pid throws
      sub:injectFault("afterStart", function()
        sub:injectFault("afterStart", nil)
        async.sleep(300) -- the payload has forked its background child by now
        return nil, errors.new("POC_INJECTED", "injected publication failure")
      end)
      local h = ok_or(sub:spawn { argv = { "bash", "-c", "exec -a dsh-publication-survivor sleep 30 & wait" } })
      local okd, derr = h.done:await()
      sub:injectFault("afterStart", nil)
      check(okd == nil and derr and derr.code == "POC_INJECTED", "done gave %s", tostring(okd or derr))
      check(h:waitForExit() == true, "the group did not exit")
      check(not ps(state.ctx):find("dsh-publication-survivor", 1, true), "the background child survived")
      return "done failed with " .. derr.code .. " (" .. derr.message .. "); ps shows no dsh-publication-survivor"
    end },
    { "5", "collected output keeps its tail; a spill over its bound is dropped", function()
      local ctx = state.ctx
      local h = ok_or(ctx.subprocess:spawn {
        argv = { "bash", "-c", "printf 0123456789; sleep 30" }, graceMs = 1000,
        stdio = { stdin = "ignore", stdout = { maxBytes = 4, spill = { maxBytes = 6 } }, stderr = { maxBytes = 100 } },
      })
      for _ = 1, 500 do
        if h.stdout:readFrom(0).nextOffset >= 10 then break end
        async.sleep(10)
      end
      local spill = h.stateDir .. "/stdout.log"
      local size = tonumber(C.exec(ctx, { "stat", "-c", "%s", spill }).stdout)
      check(size == 6, "the remote stdout.log holds %s bytes, not 6", tostring(size))
      h:terminate()
      local outcome = h.done:await()
      check(outcome and outcome.signal == "SIGTERM" and outcome.exitCode == nil, "the outcome was %s",
        outcome and (tostring(outcome.exitCode) .. "/" .. tostring(outcome.signal)) or "a failure")
      check(h:waitForExit() == true, "the group did not exit")
      local r = h.stdout:readFrom(0)
      check(r.text == "6789" and r.nextOffset == 10 and r.lossy == true and r.spillPath == nil,
        "readFrom(0) gave %s at %d (lossy %s, spill %s)", show(r.text), r.nextOffset, tostring(r.lossy),
        tostring(r.spillPath))
      return 'stdout.log was 6 bytes; SIGTERM; readFrom(0) = tail "6789" at 10, lossy, no spill kept'
    end },
  }
end

return M
