--- dsh.app.poc.pty: `make poc`'s terminal steps of the reference's live
-- composition (§6.2 A, 9, 10, 11) on the composed context's ctx.pty: the
-- environment scrub, multibyte output, SIGINT to the foreground job with the
-- shell surviving, and a TERM-immune job gone once the terminal is killed.
local async = require "dsh.async"
local C = require "dsh.app.poc.check"
local loop = require "dsh.core.loop"

local M = {}
local check, ok_or = C.check, C.ok_or

local AGENT = { id = "poc-agent" }

local function send(ctx, id, text)
  local op, err = ctx.pty:startSend(AGENT, id, { text = text, submit = true })
  ok_or(op, err, "startSend")
  local r, werr = op:wait()
  return ok_or(r, werr, "send")
end

--- The steps, {label, title, fn} each; state.ctx is the composed context.
function M.steps(state)
  return {
    { "A", "a terminal's environment is scrubbed", function()
      local ctx = state.ctx
      local s = ok_or(ctx.pty:spawn(AGENT, { type = "shell", name = "scrub" }))
      local r = send(ctx, s.id, [[echo "NPM=<$NPM_TOKEN> DSH=<$DSH_STALE> KEEP=<$KEEP>"]])
      ok_or(ctx.pty:kill(AGENT, s.id))
      check(r.viewport:find("NPM=<> DSH=<> KEEP=<visible>", 1, true), "the terminal showed %s", C.show(r.viewport))
      check(not r.viewport:find("sentinel", 1, true), "a sentinel reached the terminal")
      return "the viewport shows NPM=<> DSH=<> KEEP=<visible>, no sentinel"
    end },
    { "9", "a shell with a motd prints multibyte output and reads stdin", function()
      local ctx = state.ctx
      state.term = ok_or(ctx.pty:spawn(AGENT, { type = "shell", name = "poc" }))
      check(type(state.term.motd) == "string" and #state.term.motd > 0, "the shell had no motd")
      local r = send(ctx, state.term.id, "printf 'PTY-你好\\n'")
      check(r.viewport:find("PTY-你好", 1, true), "the viewport: %s", C.show(r.viewport))
      check(r.waitReason == "stdin_read", "the send ended %s", tostring(r.waitReason))
      check(r.sessionStatus.kind == "running", "the shell is %s", r.sessionStatus.kind)
      return string.format("%s (pid %d) printed PTY-你好; %s; running", state.term.id, state.term.pid, r.waitReason)
    end },
    { "10", "SIGINT reaches the foreground job; the shell survives", function()
      local ctx, id = state.ctx, state.term.id
      local op = ok_or(ctx.pty:startSend(AGENT, id, { text = "bash -c 'exec -a dsh-poc-job sleep 30'", submit = true }))
      -- once the job runs (a SIGINT that reached the shell's fork before it reset the shell's handlers is lost)
      local deadline = loop.now_ms() + 30000
      while C.exec(ctx, { "pgrep", "-f", "^dsh-poc-job" }).exit_code ~= 0 do
        check(loop.now_ms() < deadline, "the job did not start within 30 s")
        async.sleep(20)
      end
      local d = ok_or(ctx.pty:signal(AGENT, id, "SIGINT"))
      check(d.delivered == true and d.targetPgid > 0, "the signal was not delivered to a group")
      local r = ok_or(op:wait())
      check(r.waitReason == "stdin_read" or r.waitReason == "inferred_idle", "the send ended %s", r.waitReason)
      check(r.sessionStatus.kind == "running", "the shell is %s", r.sessionStatus.kind)
      return string.format("delivered to group %d (the shell is %d); %s; running", d.targetPgid, state.term.pid,
        r.waitReason)
    end },
    { "11", "a TERM-immune job is gone once the terminal is killed", function()
      local ctx, id = state.ctx, state.term.id
      local r = send(ctx, id, "(trap '' TERM; exec -a dsh-immune-job sleep 300) & echo job=$!")
      local job = tonumber(r.viewport:match("job=(%d+)"))
      check(job ~= nil, "no job pid in %s", C.show(r.viewport))
      local back = ok_or(ctx.pty:read(AGENT, id, { count = 50 }))
      check(back.text:find("PTY-你好", 1, true), "the scrollback lost step 9's output")
      -- the job's pid is printed when it forks; its name once it has exec'd (up to 30 s on a loaded machine)
      local seen = C.bash(ctx, "for i in $(seq 1500); do [ \"$(ps -o args= -p " .. job .. ")\" = 'dsh-immune-job 300' ]"
        .. " && break; sleep 0.02; done; ps -o args= -p " .. job)
      check(seen.stdout.text == "dsh-immune-job 300\n", "Bash sees %s", C.show(seen.stdout.text))
      check(ctx.pty:kill(AGENT, id) == true, "kill found the terminal ended")
      local gone = C.bash(ctx, "kill -0 " .. job .. " 2>/dev/null && echo alive || echo gone")
      check(gone.stdout.text == "gone\n", "the job %d is %s", job, gone.stdout.text)
      return string.format("Bash saw job %d in the same sandbox; after pty.kill it is gone", job)
    end },
  }
end

return M
