--- dsh.poc.pty: the terminal steps of `make poc`, run on the composed
-- context of dsh.poc (its sandbox, fs and Bash) before it is disposed.
local async = require "dsh.async"

local M = {}

local function check(cond, fmt, ...)
  if not cond then error({ poc = string.format(fmt, ...) }, 0) end
end

local function ok_or(v, err, what)
  if v == nil then error({ poc = (what and what .. ": " or "") .. tostring(err) }, 0) end
  return v
end

local function send(state, text)
  local op = ok_or(state.ctx.pty:startSend(state.agent, state.term.id, { text = text, submit = true }))
  return ok_or(op:wait())
end

--- The steps: {title, fn} each, fn returning what it showed.
function M.steps(state)
  return {
    { "a terminal on the same sandbox (ctx.pty, pty-e2b), ready at its prompt", function()
      local ctx = state.ctx
      ctx:use(require("dsh.pty").provider)
      ctx:use(require "dsh.providers.pty_e2b", { pollIntervalMs = 25, idleSilenceMs = 2000, timeoutMs = 10000,
        disposeGraceMs = 1000 })
      ok_or(ctx:start())
      state.agent = { id = "poc-agent" }
      state.term = ok_or(ctx.pty:spawn(state.agent, { type = "shell", name = "poc" }))
      local r = send(state, [[printf 'PTY-你好 NPM=<%s>\n' "$NPM_TOKEN"]])
      check(r.waitReason == "stdin_read" and r.viewport:find("PTY-你好 NPM=<>", 1, true),
        "the terminal gave %s: %q", r.waitReason, r.viewport)
      return string.format("%s ready (%s); printed PTY-你好, the secret scrubbed", state.term.id, r.waitReason)
    end },
    { "the terminal lists what fs wrote; fs and Bash read what it wrote", function()
      ok_or(state.ctx.fs:writeText("for-the-terminal.txt", "from fs\n", { createIfAbsent = true }))
      local r = send(state, "ls for-the-terminal.txt && echo from-the-terminal > from-pty.txt")
      check(r.viewport:find("for-the-terminal.txt", 1, true), "ls printed %q", r.viewport)
      local t = ok_or(state.ctx.fs:readText("from-pty.txt"))
      local b = ok_or(state.ctx.bash:run { command = "cat from-pty.txt" })
      check(t.text == "from-the-terminal\n" and b.stdout.text == t.text, "fs read %q, bash %q", t.text,
        b.stdout.text)
      return "ls found for-the-terminal.txt; fs and bash read \"from-the-terminal\""
    end },
    { "SIGINT reaches the foreground job; the shell survives", function()
      local op = ok_or(state.ctx.pty:startSend(state.agent, state.term.id, { text = "sleep 30", submit = true }))
      async.sleep(150)
      local d = ok_or(state.ctx.pty:signal(state.agent, state.term.id, "INT"))
      local r = ok_or(op:wait())
      check(r.sessionStatus.kind == "running", "the shell is %s", r.sessionStatus.kind)
      local after = send(state, "echo status=$?")
      check(after.viewport:find("status=130", 1, true), "after the interrupt: %q", after.viewport)
      return string.format("SIGINT to group %d (not the shell's %d); sleep ended 130, wait %s", d.targetPgid,
        state.term.pid, r.waitReason)
    end },
    { "the screen shows a full-screen program", function()
      local op = ok_or(state.ctx.pty:startSend(state.agent, state.term.id, {
        text = [[printf '\033[?1049h\033[H%s\n%s\n' "FULL SCREEN" "line two"; read x; printf '\033[?1049l']],
        submit = true }))
      local w = ok_or(state.ctx.pty:waitFor(state.agent, state.term.id, { pattern = "FULL SCREEN\nline two",
        plain = true, timeoutMs = 5000 }))
      check(w.matched and w.screen.altscreen and w.screen.lines[1] == "FULL SCREEN", "the screen: %s",
        table.concat(w.screen.lines, "|"))
      ok_or(state.ctx.pty:signal(state.agent, state.term.id, "INT"))
      ok_or(op:wait())
      return string.format("rows 1-2: %q, %q; cursor at row %d (alternate screen)", w.screen.lines[1],
        w.screen.lines[2], w.screen.cursor.row + 1)
    end },
    { "closing the terminal leaves nothing (a TERM-immune job included)", function()
      local r = send(state, "(trap '' TERM HUP; exec -a dsh-poc-job sleep 300) & echo job=$!")
      local job = tonumber(r.viewport:match("job=(%d+)"))
      check(job ~= nil, "no job pid in %q", r.viewport)
      ok_or(state.ctx.pty:kill(state.agent, state.term.id))
      local b = ok_or(state.ctx.bash:run {
        command = "kill -0 " .. job .. " 2>/dev/null && echo alive || echo gone" })
      check(b.stdout.text == "gone\n", "the job %d is %s", job, b.stdout.text)
      return "job " .. job .. " and the shell " .. state.term.pid .. " are gone"
    end },
  }
end

return M
