-- Terminals in the composed world (reference §6.2 steps A and 9-11): ctx.e2b,
-- ctx.fs, ctx.subprocess, ctx.bash and ctx.pty with pty-e2b on one real local
-- sandbox. A file written through fs is what the terminal lists, a file
-- written in the terminal is what fs reads, and commands started in the
-- terminal are in the same sandbox as Bash's.
local D = require "helpers.dshd"
local helpers = require "helpers"
local pty = require "dsh.pty"
local terminal = require "dsh.tools.terminal"

local AMBIENT = { NPM_TOKEN = "sentinel-secret", DSH_STALE = "sentinel-stale", KEEP = "visible" }

D.isolated_state()

describe("terminals in the composition", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("steps A, 9, 10, 11 with fs and Bash on one sandbox, and the tools on top", function()
    helpers.run(function()
      helpers.with_context({
        { require "dsh.providers.e2b", { envs = AMBIENT, timeoutMs = 180000, onTimeout = "kill" } },
        require "dsh.providers.fs_e2b",
        require "dsh.providers.subprocess_e2b",
        { require "dsh.providers.bash", { timeoutMs = 30000 } },
        pty.provider,
        { require "dsh.providers.pty_e2b", { pollIntervalMs = 25, idleSilenceMs = 1000, timeoutMs = 5000,
          disposeGraceMs = 1000 } },
      }, function(ctx)
        local agent = { id = "agent-composition" }
        -- A: the environment scrub
        local a = assert(ctx.pty:spawn(agent, { type = "shell" }))
        local r = assert(assert(ctx.pty:startSend(agent, a.id, {
          text = [[echo "NPM=<$NPM_TOKEN> DSH=<$DSH_STALE> KEEP=<$KEEP>"]], submit = true })):wait())
        assert.truthy(r.viewport:find("NPM=<> DSH=<> KEEP=<visible>", 1, true), r.viewport)
        assert.falsy(r.viewport:find("sentinel", 1, true))
        assert(ctx.pty:kill(agent, a.id))

        -- 9: a shell with a motd; PTY-你好 reaches stdin_read
        local s = assert(ctx.pty:spawn(agent, { type = "shell" }))
        assert.is_true(#s.motd > 0)
        r = assert(assert(ctx.pty:startSend(agent, s.id, { text = "printf 'PTY-你好\\n'", submit = true })):wait())
        assert.truthy(r.viewport:find("PTY-你好", 1, true))
        assert.equal("stdin_read", r.waitReason)
        assert.same({ kind = "running" }, r.sessionStatus)

        -- one world: fs writes, the terminal lists; the terminal writes, fs and Bash read
        assert(ctx.fs:writeText("from-fs.txt", "written-by-fs\n", { createIfAbsent = true }))
        r = assert(assert(ctx.pty:startSend(agent, s.id, { text = "ls; printf 'written-in-terminal\\n' > "
          .. "from-pty.txt", submit = true })):wait())
        assert.truthy(r.viewport:find("from-fs.txt", 1, true), r.viewport)
        assert.equal("written-in-terminal\n", assert(ctx.fs:readText("from-pty.txt")).text)
        local b = assert(ctx.bash:run { command = "cat from-pty.txt" })
        assert.equal("written-in-terminal\n", b.stdout.text)

        -- 10: SIGINT to `sleep 30` once it runs (pgrep sees its name); the shell stays
        local op = assert(ctx.pty:startSend(agent, s.id, { text = "bash -c 'exec -a dsh-int-job sleep 30'",
          submit = true }))
        assert.truthy(helpers.eventually(function()
          return assert(ctx.e2b:exec { "pgrep", "-f", "^dsh-int-job" }).exit_code == 0
        end, 30000, 20))
        local d = assert(ctx.pty:signal(agent, s.id, "SIGINT"))
        assert.is_true(d.delivered and d.targetPgid > 0)
        r = assert(op:wait())
        assert.truthy(r.waitReason == "stdin_read" or r.waitReason == "inferred_idle")
        assert.same({ kind = "running" }, r.sessionStatus)

        -- 11: a TERM-immune background job; the scrollback still holds step 9; kill leaves nothing
        r = assert(assert(ctx.pty:startSend(agent, s.id, {
          text = "(trap '' TERM; exec -a dsh-immune-job sleep 300) & echo job=$!", submit = true })):wait())
        local job = assert(tonumber(r.viewport:match("job=(%d+)")))
        assert.truthy(assert(ctx.pty:read(agent, s.id, { count = 50 })).text:find("PTY-你好", 1, true))
        -- the job's pid is printed when it forks; its name once it has exec'd
        local bash_sees = assert(ctx.bash:run { command = "for i in $(seq 1500); do [ \"$(ps -o args= -p " .. job
          .. ")\" = 'dsh-immune-job 300' ] && break; sleep 0.02; done; ps -o args= -p " .. job })
        assert.equal("dsh-immune-job 300\n", bash_sees.stdout.text) -- the same sandbox as Bash
        assert.is_true(ctx.pty:kill(agent, s.id))
        local gone = assert(ctx.bash:run { command = "kill -0 " .. job .. " 2>/dev/null; echo $?" })
        assert.equal("1\n", gone.stdout.text)

        -- the tools drive the same registry
        local opts = { agent = agent }
        local text = assert(terminal.tools.terminal_open.run(ctx, { type = "shell", name = "tools" }, opts))
        assert.truthy(text:find("^started terminal session pty%-%d+ %(tools%) %[type: shell%]\n"))
        local id = text:match("(pty%-%d+)")
        text = assert(terminal.tools.terminal_send.run(ctx, { session_id = id, text = "cat from-fs.txt" }, opts))
        assert.truthy(text:find("written-by-fs\ndsh> \n[wait: stdin_read]\n[session: running]", 1, true), text)
        assert.truthy(terminal.tools.terminal_list.run(ctx, {}, opts):find(id .. " (tools) [type: shell] running",
          1, true))
      end)
    end)
  end)
end)
