--- The ctx.pty contract (reference §2.4, the pins of §6.5 and §6.8 on real
-- terminals), shared by every PTY backend.
--
--   require("helpers.pty_contract")("pty-local", factory)
--
-- factory.new(cfg) runs inside a task and returns an env for one test:
--   env.ctx          a started context with ctx.pty and the backend (config cfg merged
--                    over the contract's defaults)
--   env.sh(cmd)      run a shell command in the terminals' world, behind the seam's
--                    back -> exit code, stdout
--   env.secrets      ambient variables of that world the scrub must drop (name -> value)
--   env.visible      ambient variables that must stay (name -> value)
--   env.base         the directory a relative spawn cwd resolves against
--   env.dispose()    dispose the context
-- factory.prefix, factory.label: the backend's message prefix ("pty-e2b") and
-- its name for a terminal ("E2B PTY").
local async = require "dsh.async"
local loop = require "dsh.core.loop"
local helpers = require "helpers"

local DEFAULTS = { pollIntervalMs = 25, idleSilenceMs = 1000, timeoutMs = 10000, disposeGraceMs = 1000,
  rows = 24, cols = 200 }

-- A job named marker runs in env (pgrep sees the name it exec'd under): a
-- signal sent before could reach the shell's fork while it still had the
-- shell's handlers, and be lost.
local function job_running(env, marker)
  return helpers.eventually(function() return env.sh("pgrep -f '^" .. marker .. "'") == 0 end, 30000, 20)
end

-- A command line that runs `sleep secs` as a job named marker.
local function named_sleep(marker, secs)
  return "bash -c 'exec -a " .. marker .. " sleep " .. secs .. "'"
end

local function merge(a, b)
  local out = {}
  for k, v in pairs(a) do out[k] = v end
  for k, v in pairs(b or {}) do out[k] = v end
  return out
end

return function(name, factory)
  -- busted's describe/it/assert live in the calling spec's environment
  setfenv(1, getfenv(2))
  local prefix, label = factory.prefix, factory.label

  -- One context per test; disposed even when the test fails.
  local function with_env(cfg, fn)
    if fn == nil then cfg, fn = nil, cfg end
    helpers.run(function()
      local env = factory.new(merge(DEFAULTS, cfg))
      env.pty = env.ctx.pty
      env.owner = { id = "agent-" .. math.random(1e6) }
      env.alive = function(pid)
        return env.sh("s=$(cat /proc/" .. pid .. "/stat 2>/dev/null) || exit 1; "
          .. "case \"${s##*) }\" in Z*|X*) exit 1;; esac") == 0
      end
      env.spawn = function(spec) return assert(env.pty:spawn(env.owner, merge({ type = "shell" }, spec))) end
      env.send = function(s, text, submit)
        local op = assert(env.pty:startSend(env.owner, s.id, { text = text, submit = submit ~= false }))
        return assert(op:wait())
      end
      local ok, err = xpcall(fn, debug.traceback, env)
      env.dispose()
      if not ok then error(err, 0) end
    end)
  end

  describe(name .. " (pty contract)", function()
    before_each(helpers.snapshot)
    after_each(helpers.assert_clean)

    it("spawns a ready shell: motd, scrubbed and fixed environment, cwd, ids", function()
      with_env(function(env)
        assert.equal(0, (env.sh("mkdir -p '" .. env.base .. "/project'")))
        local s = env.spawn { cwd = "project", env = { EXPLICIT_TOKEN = "explicit" } }
        assert.matches("^pty%-%d+$", s.id)
        assert.matches("dsh> $", s.motd)
        local names = {}
        for k in pairs(env.secrets) do names[#names + 1] = k .. "=<$" .. k .. ">" end
        for k in pairs(env.visible) do names[#names + 1] = k .. "=<$" .. k .. ">" end
        local r = env.send(s, "echo \"" .. table.concat(names, " ") .. " X=<$EXPLICIT_TOKEN> "
          .. "T=<$TERM> P=<$PAGER> G=<$GIT_PAGER> S=<$DSH_SHELL> O=<$DSH_SESSION_ID> I=<$DSH_PTY_SESSION_ID>\"; pwd")
        assert.equal("stdin_read", r.waitReason)
        for k in pairs(env.secrets) do assert.truthy(r.viewport:find(k .. "=<>", 1, true), r.viewport) end
        for k, v in pairs(env.visible) do assert.truthy(r.viewport:find(k .. "=<" .. v .. ">", 1, true)) end
        for _, v in pairs(env.secrets) do assert.falsy(r.viewport:find(v, 1, true)) end
        assert.truthy(r.viewport:find("X=<explicit> T=<dumb> P=<cat> G=<cat> S=<1> O=<" .. env.owner.id
          .. "> I=<" .. s.id .. ">", 1, true), r.viewport)
        assert.truthy(r.viewport:find("\n" .. env.base .. "/project\n", 1, true), r.viewport)
        assert.same({ kind = "running" }, r.sessionStatus)
        assert.is_false(r.truncated)
      end)
    end)

    it("printf 'PTY-你好' reaches stdin_read; multibyte output split at every byte boundary", function()
      with_env(function(env)
        local s = env.spawn {}
        local r = env.send(s, "printf 'PTY-你好\\n'")
        assert.equal("stdin_read", r.waitReason)
        assert.truthy(r.viewport:find("\nPTY-你好\n", 1, true), r.viewport)
        -- one byte per write, with a pause: every boundary of 1-, 2-, 3- and 4-byte characters
        local word = "aé你🙂b"
        local hex = {}
        for i = 1, #word do hex[i] = string.format("%02x", word:byte(i)) end
        r = env.send(s, "for b in " .. table.concat(hex, " ") .. "; do printf \"\\\\x$b\"; sleep 0.03; done; echo")
        assert.equal("stdin_read", r.waitReason)
        assert.truthy(r.viewport:find("\n" .. word .. "\n", 1, true), r.viewport)
        assert.same({ kind = "running" }, r.sessionStatus)
        local page = assert(env.pty:read(env.owner, s.id, { count = 2 }))
        assert.equal(word .. "\ndsh> ", page.text)
        local screen = assert(env.pty:screen(env.owner, s.id))
        local found = false
        for _, l in ipairs(screen.lines) do found = found or l == word end
        assert.is_true(found, table.concat(screen.lines, "\n"))
      end)
    end)

    it("reads the scrollback newest first, cut to maxReadBytes (maxReadBytes 12)", function()
      with_env({ maxReadBytes = 12 }, function(env)
        local s = env.spawn {}
        local op = assert(env.pty:startSend(env.owner, s.id, { text = "printf '一二三\\n'", submit = true }))
        local r = assert(op:wait())
        assert.equal("stdin_read", r.waitReason)
        assert.is_true(r.truncated)
        assert.equal("二三\ndsh> ", r.viewport) -- the last 12 bytes, cut on a boundary
        assert.is_false(op:cancel())
        local page = assert(env.pty:read(env.owner, s.id, { count = 2 }))
        assert.truthy(page.text:find("dsh>", 1, true))
        assert.equal(0, page.lineBegin)
        assert.equal(2, page.lineEnd)
        local total = page.totalLines
        assert.same({ text = "", lineBegin = 99, lineEnd = 99, totalLines = total, lost = 0 },
          env.pty:read(env.owner, s.id, { offset = 99 }))
        -- a 3-byte character does not fit 1 byte: nothing, lineEnd stays
        assert.has_error(function() env.pty:read(env.owner, s.id, { offset = -1 }) end,
          "dsh.pty: read: offset must be a non-negative safe integer")
        assert.has_error(function() env.pty:read(env.owner, s.id, { count = 0 }) end,
          "dsh.pty: read: count must be a positive safe integer")
        assert.has_error(function() env.pty:read(env.owner, s.id, { count = 1.5 }) end,
          "dsh.pty: read: count must be a positive safe integer")
      end)
      with_env({ maxReadBytes = 1 }, function(env)
        local s = env.spawn {}
        env.send(s, "printf '你\\n'")
        local page = assert(env.pty:read(env.owner, s.id, { offset = 1, count = 1 }))
        assert.equal("", page.text)
        assert.equal(1, page.lineEnd)
      end)
    end)

    it("settles inferred_idle, timeout and session_exit", function()
      -- the config's silence and timeout far above what a loaded machine takes
      -- to print a prompt; the sends that test them give their own
      with_env({ idleSilenceMs = 5000, timeoutMs = 60000 }, function(env)
        local function send(s, text, opts)
          local input = { text = text, submit = true }
          for k, v in pairs(opts) do input[k] = v end
          return assert(assert(env.pty:startSend(env.owner, s.id, input)):wait())
        end
        local s = env.spawn {}
        local t0 = loop.now_ms()
        local r = send(s, "read x", { idleMs = 300 }) -- waits for input in silence
        assert.equal("inferred_idle", r.waitReason)
        assert.is_true(loop.now_ms() - t0 >= 300)
        r = env.send(s, "typed") -- read gets its line; the prompt returns
        assert.equal("stdin_read", r.waitReason)
        t0 = loop.now_ms()
        r = send(s, "while :; do echo tick; sleep 0.05; done", { timeoutMs = 800 })
        assert.equal("timeout", r.waitReason)
        assert.is_true(loop.now_ms() - t0 >= 800)
        assert.truthy(r.viewport:find("tick", 1, true))
        local op = assert(env.pty:startSend(env.owner, s.id, { text = "", submit = false }))
        assert.is_true(op:cancel()) -- SIGINT to the loop
        r = assert(op:wait())
        assert.equal("stdin_read", r.waitReason)
        r = env.send(s, "exit 143")
        assert.equal("session_exit", r.waitReason)
        assert.same({ kind = "exited", signal = "SIGTERM" }, r.sessionStatus)
        local _, err = env.pty:startSend(env.owner, s.id, { text = "true", submit = true })
        assert.equal("PTY_EXITED", err.code)
        assert.equal(prefix .. ": " .. label .. " session has exited", err.message)
        local s2 = env.spawn {}
        r = env.send(s2, "exit 7")
        assert.same({ kind = "exited", exitCode = 7 }, r.sessionStatus)
        assert.same({ kind = "exited", exitCode = 7 }, env.pty:status(env.owner, s2.id))
      end)
    end)

    it("signals the foreground group: SIGINT to sleep 30 while the shell survives; TSTP; KILL refused", function()
      with_env(function(env)
        local s = env.spawn {}
        local marker = "dsh-int-" .. math.random(1e9)
        local op = assert(env.pty:startSend(env.owner, s.id, { text = named_sleep(marker, 30), submit = true }))
        assert.truthy(job_running(env, marker))
        local d = assert(env.pty:signal(env.owner, s.id, "SIGINT"))
        assert.is_true(d.delivered)
        assert.is_true(d.targetPgid > 0 and d.targetPgid ~= s.pid)
        local r = assert(op:wait())
        assert.truthy(r.waitReason == "stdin_read" or r.waitReason == "inferred_idle", r.waitReason)
        assert.same({ kind = "running" }, r.sessionStatus)
        assert.is_true(env.alive(s.pid))
        assert.is_false(env.alive(d.targetPgid))
        r = env.send(s, "echo status=$?")
        assert.truthy(r.viewport:find("status=130", 1, true))
        -- at the prompt the shell is the foreground group: SIGKILL is refused
        local _, err = env.pty:signal(env.owner, s.id, "KILL")
        assert.equal("PTY_SIGNAL", err.code)
        assert.equal(prefix .. ": refusing to SIGKILL the " .. label .. " shell; use terminal_close", err.message)
        -- TSTP stops the job, the shell takes over; the job shows in `jobs`
        op = assert(env.pty:startSend(env.owner, s.id, { text = named_sleep(marker .. "-tstp", 31), submit = true }))
        assert.truthy(job_running(env, marker .. "-tstp"))
        local t = assert(env.pty:signal(env.owner, s.id, "TSTP"))
        r = assert(op:wait())
        assert.equal("stdin_read", r.waitReason)
        r = env.send(s, "jobs")
        assert.truthy(r.viewport:find("Stopped", 1, true), r.viewport)
        assert.has_error(function() env.pty:signal(env.owner, s.id, "QUIT") end,
          "dsh.pty: signal: expected SIGINT, SIGTERM, SIGKILL, SIGTSTP or SIGHUP, got QUIT")
        assert.is_true(env.alive(s.pid))
        assert.is_true(env.alive(t.targetPgid))
        assert.is_true(env.pty:kill(env.owner, s.id))
        assert.is_false(env.alive(t.targetPgid)) -- the stopped job went with the session
      end)
    end)

    it("cancels and aborts a send with SIGINT; refuses a second send and a pre-aborted one", function()
      with_env(function(env)
        local s = env.spawn {}
        local ctl = async.controller()
        local marker = "dsh-abort-" .. math.random(1e9)
        local op = assert(env.pty:startSend(env.owner, s.id, { text = named_sleep(marker, 30), submit = true },
          ctl.signal))
        local _, err = env.pty:startSend(env.owner, s.id, { text = "true", submit = true })
        assert.equal("SEND_ACTIVE", err.code)
        assert.truthy(job_running(env, marker))
        ctl:abort("stop")
        local r = assert(op:wait())
        assert.equal("stdin_read", r.waitReason)
        assert.is_false(op:cancel())
        ctl = async.controller()
        ctl:abort("early")
        _, err = env.pty:startSend(env.owner, s.id, { text = "true", submit = true }, ctl.signal)
        assert.equal("PTY_ABORTED", err.code)
        assert.equal(prefix .. ": " .. label .. " send aborted before write", err.message)
        op = assert(env.pty:startSend(env.owner, s.id, { text = "echo partial; " .. named_sleep(marker .. "-2", 30),
          submit = true }))
        assert.is_true(helpers.eventually(function()
          return op._buf:text():find("partial\n", 1, true) ~= nil
        end, 30000))
        assert.truthy(job_running(env, marker .. "-2"))
        assert.truthy(op:readOutput():find("partial", 1, true))
        assert.is_true(op:cancel())
        r = assert(op:wait())
        assert.falsy(r.viewport:find("partial", 1, true)) -- readOutput consumed it
      end)
    end)

    it("reports 0xFF from the shell as invalid UTF-8 and still cleans up", function()
      with_env(function(env)
        local s = env.spawn {}
        local op = assert(env.pty:startSend(env.owner, s.id, { text = "printf 'ok \\377\\n'", submit = true }))
        local r, err = op:wait()
        assert.is_nil(r)
        assert.equal("PTY_TRANSPORT", err.code)
        assert.equal(prefix .. ": PTY emitted invalid UTF-8", err.message)
        assert.same({ kind = "exited" }, env.pty:status(env.owner, s.id))
        local _, serr = env.pty:startSend(env.owner, s.id, { text = "true", submit = true })
        assert.equal("PTY_EXITED", serr.code)
        local pid = s.pid
        local ok, kerr = env.pty:kill(env.owner, s.id)
        assert.is_true(ok, tostring(kerr))
        assert.is_false(env.alive(pid))
        local _, nerr = env.pty:status(env.owner, s.id)
        assert.equal("NO_SESSION", nerr.code)
      end)
    end)

    it("fails a startup cleanly: pre-aborted, exited, never ready", function()
      with_env(function(env)
        local ctl = async.controller()
        ctl:abort("not now")
        local s, err = env.pty:spawn(env.owner, { type = "shell" }, ctl.signal)
        assert.is_nil(s)
        assert.equal("not now", err.reason)
        assert.same({}, env.pty:list(env.owner))
      end)
      with_env({ shell = { "/bin/sh", "-c", "exit 7" } }, function(env)
        local _, err = env.pty:spawn(env.owner, { type = "shell" })
        assert.equal("PTY_STARTUP", err.code)
        assert.equal(prefix .. ": " .. label .. " shell exited during startup", err.message)
      end)
      local marker = "dsh-silent-" .. math.random(1e9)
      local alive = "pgrep -f '" .. marker:sub(1, 1) .. "[" .. marker:sub(2, 2) .. "]" .. marker:sub(3) .. "'"
      with_env({ shell = { "/bin/bash", "-c", "exec -a " .. marker .. " sleep 30" }, timeoutMs = 400 }, function(env)
        local t0 = loop.now_ms()
        local _, err = env.pty:spawn(env.owner, { type = "shell" })
        assert.equal("PTY_STARTUP", err.code)
        assert.equal(prefix .. ": " .. label .. " shell did not reach readiness before startup timeout", err.message)
        assert.is_true(loop.now_ms() - t0 < 15000) -- its 400 ms, far from the default 30 s
        assert.equal(1, (env.sh(alive)))
      end)
      with_env({ shell = { "/bin/bash", "-c", "exec -a " .. marker .. " sleep 30" } }, function(env)
        local ctl = async.controller()
        local reason = require("dsh.errors").new("R", "reason R")
        local t = loop.timer(function() ctl:abort(reason) end)
        t:start(200)
        local _, err = env.pty:spawn(env.owner, { type = "shell" }, ctl.signal)
        t:close()
        assert.equal(reason, err) -- the caller's reason itself, at once
        assert.equal(1, (env.sh(alive)))
      end)
    end)

    it("kills a session with a TERM-immune background job; nothing is left", function()
      with_env(function(env)
        local s = env.spawn { name = "build" }
        local r = env.send(s, "(trap '' TERM HUP INT; exec sleep 300) & echo job=$!")
        local job = tonumber(r.viewport:match("job=(%d+)"))
        assert.is_truthy(job, r.viewport)
        assert.is_true(env.alive(job))
        local list = env.pty:list(env.owner)
        assert.equal(1, #list)
        assert.same({ id = s.id, name = "build", type = "shell", pid = s.pid, status = { kind = "running" },
          busy = false, rows = 24, cols = 200, cwd = s.cwd }, list[1])
        local k1 = async.run(function() return env.pty:kill(env.owner, s.id) end)
        local k2 = async.run(function() return env.pty:kill(env.owner, s.id) end)
        assert.is_true(k1:await())
        assert.is_false(k2:await()) -- a close was in flight; it waited for it
        assert.is_false(env.alive(job))
        assert.is_false(env.alive(s.pid))
        local _, err = env.pty:kill(env.owner, s.id)
        assert.equal("NO_SESSION", err.code)
        assert.same({}, env.pty:list(env.owner))
        -- the name is free again
        local again = env.spawn { name = "build" }
        assert.are_not.equal(s.id, again.id)
      end)
    end)

    it("closing TERMs every job and gives it disposeGraceMs before KILL, with no hangup first", function()
      with_env(function(env)
        local s = env.spawn {}
        local m1, m2 = env.base .. "/ladder-clean.log", env.base .. "/ladder-stubborn.log"
        -- one job cleans up on TERM (a little slowly) and exits; one notes the TERM and runs on
        local r = env.send(s, "(trap 'sleep 0.2; echo cleaned > " .. m1 .. "; exit 0' TERM; trap 'echo hup >> " .. m1
          .. "' HUP; while :; do sleep 0.05; done) & echo clean=$!")
        local clean = assert(tonumber(r.viewport:match("clean=(%d+)")), r.viewport)
        r = env.send(s, "(trap 'echo term >> " .. m2 .. "' TERM; trap 'echo hup >> " .. m2
          .. "' HUP; while :; do sleep 0.05; done) & echo stubborn=$!")
        local stubborn = assert(tonumber(r.viewport:match("stubborn=(%d+)")), r.viewport)
        local t0 = loop.now_ms()
        assert.is_true(env.pty:kill(env.owner, s.id))
        assert.is_true(loop.now_ms() - t0 >= 1000) -- the stubborn job had its whole grace (disposeGraceMs 1000)
        assert.is_false(env.alive(clean))
        assert.is_false(env.alive(stubborn))
        assert.is_false(env.alive(s.pid))
        assert.same({ 0, "cleaned\n" }, { env.sh("cat " .. m1) }) -- TERM, and time to finish its trap
        assert.same({ 0, "term\n" }, { env.sh("cat " .. m2) }) -- TERM, then KILL: never a hangup
      end)
    end)

    it("a send supersedes a detached one, in order; a signal never waits for a send", function()
      with_env(function(env)
        local s = env.spawn {}
        local function running(marker) return job_running(env, marker) end
        local marker = "dsh-fg-" .. math.random(1e9)
        local op1 = assert(env.pty:startSend(env.owner, s.id, { text = "bash -c 'exec -a " .. marker .. "-1 sleep 30'",
          submit = true }))
        assert.equal(op1, op1:detach())
        assert.is_true(env.pty:list(env.owner)[1].busy)
        assert.truthy(running(marker .. "-1"))
        -- Ctrl-C typed next: it supersedes the detached send and reaches the job
        local op2 = assert(env.pty:startSend(env.owner, s.id, { text = "\3", submit = false }))
        local r1 = assert(op1:wait())
        assert.equal("superseded", r1.waitReason)
        local r2 = assert(op2:wait())
        assert.equal("stdin_read", r2.waitReason)
        assert.truthy(env.send(s, "echo status=$?").viewport:find("status=130", 1, true))
        -- many detached sends typed at once arrive in order
        for i = 1, 5 do
          assert(env.pty:startSend(env.owner, s.id, { text = "echo line-" .. i, submit = true })):detach()
        end
        local r = env.send(s, "echo done")
        local text = env.pty:read(env.owner, s.id, { count = 40 }).text
        local last = 0
        for i in text:gmatch("\nline%-(%d)\n") do
          assert.equal(last + 1, tonumber(i), text)
          last = tonumber(i)
        end
        assert.equal(5, last, text)
        assert.truthy(r.viewport:find("\ndone\n", 1, true), r.viewport)
        -- a send someone waits for still holds the session, but a signal goes through at once
        local op = assert(env.pty:startSend(env.owner, s.id, { text = "bash -c 'exec -a " .. marker .. "-2 sleep 31'",
          submit = true }))
        local _, err = env.pty:startSend(env.owner, s.id, { text = "\3", submit = false })
        assert.equal("SEND_ACTIVE", err.code)
        assert.truthy(running(marker .. "-2"))
        local d = assert(env.pty:signal(env.owner, s.id, "INT"))
        assert.are_not.equal(s.pid, d.targetPgid)
        assert.equal("stdin_read", assert(op:wait()).waitReason)
      end)
    end)

    it("a send's own timeoutMs and idleMs, and waitFor: the printed text, not its echo, through silence", function()
      with_env({ idleSilenceMs = 1000, timeoutMs = 20000 }, function(env)
        local s = env.spawn {}
        local function send(input)
          input.submit = input.submit ~= false
          return assert(assert(env.pty:startSend(env.owner, s.id, input)):wait())
        end
        local function prompt() -- waits, typing nothing, until the shell shows its prompt again
          return send { text = "", submit = false }
        end
        local t0 = loop.now_ms()
        local r = send { text = "for i in $(seq 20); do echo tick; sleep 0.05; done", timeoutMs = 300 }
        assert.equal("timeout", r.waitReason)
        assert.is_true(loop.now_ms() - t0 >= 300)
        assert.equal("stdin_read", prompt().waitReason) -- once the loop is over
        t0 = loop.now_ms()
        r = send { text = "read x", idleMs = 200 }
        assert.equal("inferred_idle", r.waitReason)
        assert.is_true(loop.now_ms() - t0 >= 200)
        assert.equal("stdin_read", send({ text = "typed" }).waitReason)
        -- the typed line holds the text once: only the program's own printing of it counts
        r = send { text = "echo X-MARK; sleep 0.3", waitFor = "X-MARK" }
        assert.equal("match", r.waitReason)
        assert.truthy(r.viewport:find("echo X-MARK; sleep 0.3\nX-MARK\n", 1, true), r.viewport)
        assert.equal("stdin_read", prompt().waitReason)
        -- silence longer than idleSilenceMs does not end a send that waits for a text
        t0 = loop.now_ms()
        r = send { text = "sleep 1.5; echo LA''TE; sleep 0.3", waitFor = "LATE" }
        assert.equal("match", r.waitReason)
        assert.is_true(loop.now_ms() - t0 >= 1500)
        assert.equal("stdin_read", prompt().waitReason)
        -- the prompt coming back still ends it
        r = send { text = "true", waitFor = "NEVER" }
        assert.equal("stdin_read", r.waitReason, r.viewport)
        assert.has_error(function() env.pty:startSend(env.owner, s.id, { text = "x", timeoutMs = 0 }) end,
          "dsh.pty: startSend: input.timeoutMs must be a positive safe integer")
        assert.has_error(function() env.pty:startSend(env.owner, s.id, { text = "x", waitFor = "" }) end,
          "dsh.pty: startSend: input.waitFor must be a non-empty string")
      end)
    end)

    it("fences sessions to their owner; names are reserved while a spawn is in flight", function()
      with_env(function(env)
        local other = { id = "agent-other" }
        local a = env.spawn { name = "one" }
        local _, err = env.pty:startSend(other, a.id, { text = "true" })
        assert.equal("FOREIGN_SESSION", err.code)
        for _, call in ipairs {
          function() return env.pty:read(other, a.id) end,
          function() return env.pty:signal(other, a.id, "INT") end,
          function() return env.pty:kill(other, a.id) end,
          function() return env.pty:screen(other, a.id) end,
          function() return env.pty:status(other, a.id) end,
        } do
          local v, e = call()
          assert.is_nil(v)
          assert.equal("FOREIGN_SESSION", e.code)
        end
        assert.same({}, env.pty:list(other))
        _, err = env.pty:read(env.owner, "pty-999")
        assert.equal("NO_SESSION", err.code)
        _, err = env.pty:spawn(env.owner, { type = "nope" })
        assert.equal("NO_BACKEND", err.code)
        _, err = env.pty:spawn(env.owner, { type = "shell", name = "one" })
        assert.equal("DUPLICATE_NAME", err.code)
        local b = assert(env.pty:spawn(other, { type = "shell", name = "one" })) -- names are per owner
        assert.are_not.equal(a.id, b.id)
        -- reserved while in flight: two spawns of one name at once
        local f1 = async.run(function() return env.pty:spawn(env.owner, { type = "shell", name = "two" }) end)
        local f2 = async.run(function() return env.pty:spawn(env.owner, { type = "shell", name = "two" }) end)
        local s1, e1 = f1:await()
        local s2, e2 = f2:await()
        assert.is_truthy(s1, tostring(e1))
        assert.is_nil(s2)
        assert.equal("DUPLICATE_NAME", e2.code)
        -- closing an owner closes its sessions; it can spawn no more
        assert.is_true(env.pty:closeOwner(other))
        assert.is_false(env.alive(b.pid))
        _, err = env.pty:spawn(other, { type = "shell" })
        assert.equal("OWNER_NOT_LIVE", err.code)
        _, err = env.pty:read(other, b.id)
        assert.equal("NO_SESSION", err.code)
        assert.equal(2, #env.pty:list(env.owner))
      end)
    end)
  end)
end
