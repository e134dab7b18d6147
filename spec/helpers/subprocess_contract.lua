--- The ctx.subprocess contract (reference §2.3, the pins of §6.4 and §6.2
-- steps 3–5) plus the bash tool, shared by every subprocess provider.
--
--   require("helpers.subprocess_contract")("subprocess-local", factory)
--
-- factory.new() runs inside a task and returns an env for one test:
--   env.ctx                 a started context with ctx.subprocess and ctx.bash
--                           (bash config: maxOutputBytes 200, timeoutMs 20000)
--   env.sh(cmd)             run a shell command in that world, behind the seam's
--                           back -> exit code, stdout
--   env.secrets             ambient variables of that world the scrub must drop (name -> value)
--   env.visible             ambient variables that must stay (name -> value)
--   env.dispose()           dispose the context
-- factory.exact_signals     false when the backend infers exit signals (stock envd)
-- factory.prefix            the provider's message prefix
-- Items of §6.4 that pin the reference's internals (wrapper text, poll counts,
-- SDK calls) are pinned by what they guarantee.
local async = require "dsh.async"
local errors = require "dsh.errors"
local loop = require "dsh.core.loop"
local utf8 = require "dsh.core.utf8"
local helpers = require "helpers"
local tool = require "dsh.tools.bash"

local function q(s)
  return "'" .. s:gsub("'", [['\'']]) .. "'"
end

local function aborted_after(ms)
  local ctl = async.controller()
  local t = loop.timer(function() ctl:abort("probe") end)
  t:start(ms)
  return ctl.signal, function() t:close() end
end

local function outcome(h)
  return h.done:await()
end

return function(name, factory)
  -- busted's describe/it/assert live in the calling spec's environment
  setfenv(1, getfenv(2))
  local prefix = factory.prefix
  local exact = factory.exact_signals ~= false

  -- One context per test; disposed even when the test fails.
  local function with_env(fn)
    helpers.run(function()
      local env = factory.new()
      env.sub = env.ctx.subprocess
      env.alive = function(pgid) return env.sh("kill -0 -- -" .. pgid .. " 2>/dev/null") == 0 end
      env.cat = function(path)
        local code, out = env.sh("cat -- " .. q(path) .. " 2>/dev/null")
        if code ~= 0 then return nil end
        return out
      end
      env.exists = function(path) return env.sh("test -e " .. q(path)) == 0 end
      local ok, err = xpcall(fn, debug.traceback, env)
      env.dispose()
      if not ok then error(err, 0) end
    end)
  end

  local function spawn(env, o)
    o.graceMs = o.graceMs or 2000
    return assert(env.sub:spawn(o))
  end

  local function sh(env, script, o)
    o = o or {}
    o.argv = { "bash", "-c", script }
    return spawn(env, o)
  end

  describe(name .. " (subprocess contract)", function()
    before_each(helpers.snapshot)
    after_each(helpers.assert_clean)

    it("rejects misuse with the reference's messages, after the method's name (§6.4.30)", function()
      with_env(function(env)
        local sub = env.sub
        assert.has_error(function() sub:spawn { argv = { "" } } end,
          "dsh.subprocess: spawn: invalid argv: expected a non-empty program name at argv[0]")
        assert.has_error(function() sub:spawn { argv = {} } end,
          "dsh.subprocess: spawn: invalid argv: expected a non-empty program name at argv[0]")
        assert.has_error(function() sub:spawn { argv = "ls" } end,
          "dsh.subprocess: spawn: invalid argv: expected a table of strings, got string")
        for _, g in ipairs { 0, -1, 0 / 0, math.huge } do
          assert.has_error(function() sub:spawn { argv = { "true" }, graceMs = g } end,
            prefix .. ": spawn: graceMs must be a positive finite number")
        end
        assert.has_error(function() sub:spawn { argv = { "true" }, graceMs = 2147483648 } end,
          prefix .. ": spawn: graceMs must be at most 2147483647")
        local ctl = async.controller()
        ctl:abort("stop")
        local h, err = sub:spawn { argv = { "true" }, signal = ctl.signal }
        assert.is_nil(h)
        assert.equal("ABORTED", err.code)
        assert.equal("aborted before spawn: stop", err.message)
        local bare = async.controller()
        bare:abort()
        h, err = sub:spawn { argv = { "true" }, signal = bare.signal }
        assert.is_nil(h)
        assert.equal("aborted before spawn: aborted", err.message)
        local c = spawn(env, { argv = { "true" }, stdio = { stdout = { maxBytes = 4 } } })
        assert.has_error(function() c.stdout:readFrom(-1) end,
          "dsh.subprocess: readFrom: subprocess output offset must be a non-negative safe integer")
        assert.has_error(function() c.stdout:readFrom(1.5) end,
          "dsh.subprocess: readFrom: subprocess output offset must be a non-negative safe integer")
        assert.same({ exitCode = 0 }, outcome(c))
        assert.is_true(c:waitForExit())
        -- empty inherited output is fine (§6.4.7)
        local i = spawn(env, { argv = { "true" }, stdio = { stdout = "inherit", stderr = "inherit" } })
        assert.is_nil(i.stdout)
        assert.same({ exitCode = 0 }, outcome(i))
        assert.is_true(i:waitForExit())
      end)
    end)

    it("reports exit codes and exit signals", function()
      with_env(function(env)
        local h = sh(env, "echo out; echo err >&2; exit 7", { stdio = { stdout = "pipe", stderr = "pipe" } })
        assert.equal(-1, h.pid)
        assert.equal("out\n", h.stdout:read_all())
        assert.equal("err\n", h.stderr:read_all())
        assert.same({ exitCode = 7 }, outcome(h))
        assert.is_true(h.pid > 0)
        assert.is_true(h:waitForExit())
        local k = sh(env, "kill -TERM $$")
        if exact then
          assert.same({ signal = "SIGTERM" }, outcome(k))
        else
          -- stock envd: setsid --wait exits with the signal's number; only a
          -- requested terminate is reported as a signal
          assert.same({ exitCode = 15 }, outcome(k))
        end
        assert.is_true(k:waitForExit())
      end)
    end)

    it("publishes the process group id as pid", function()
      with_env(function(env)
        local h = sh(env, "ps -o pgid= -p $$", { stdio = { stdout = { maxBytes = 100 } } })
        assert.same({ exitCode = 0 }, outcome(h))
        assert.equal(h.pid, tonumber(h.stdout:readFrom(0).text:match("%d+")))
        assert.is_true(h:waitForExit())
      end)
    end)

    it("delivers stdin written before the start, in order, closed once (§6.4.3)", function()
      with_env(function(env)
        local h = spawn(env, { argv = { "cat" }, stdio = { stdin = "pipe", stdout = { maxBytes = 100 } } })
        assert.equal(-1, h.pid)
        local writes = {
          async.run(function() return h.stdin:write("hello ") end),
          async.run(function() return h.stdin:write("wörld") end),
          async.run(function() return h.stdin:close() end),
        }
        for _, f in ipairs(writes) do assert.is_true(f:await()) end
        assert.is_true(h.stdin:close())
        assert.same({ exitCode = 0 }, outcome(h))
        assert.same({ text = "hello wörld", nextOffset = 12, lossy = false }, h.stdout:readFrom(0))
        local b = spawn(env, { argv = { "cat" }, stdio = { stdin = { data = "batch\n" },
          stdout = { maxBytes = 100 } } })
        assert.same({ exitCode = 0 }, outcome(b))
        assert.equal("batch\n", b.stdout:readFrom(0).text)
        local i = spawn(env, { argv = { "cat" }, stdio = { stdout = { maxBytes = 100 } } })
        assert.same({ exitCode = 0 }, outcome(i))
        assert.equal("", i.stdout:readFrom(0).text)
        for _, x in ipairs { h, b, i } do assert.is_true(x:waitForExit()) end
      end)
    end)

    it("surfaces stdin failures on the writer (§6.4.4)", function()
      with_env(function(env)
        local bad = spawn(env, { argv = { "cat" }, cwd = "/no/such/dir", stdio = { stdin = "pipe" } })
        local ok, err = bad.stdin:write("x")
        assert.is_nil(ok)
        assert.is_truthy(err)
        assert.equal(err, bad.stdin.error)
        assert.is_nil(outcome(bad))
        local gone = spawn(env, { argv = { "true" }, stdio = { stdin = "pipe" } })
        assert.same({ exitCode = 0 }, outcome(gone))
        assert.is_true(gone:waitForExit())
        ok = gone.stdin:write(string.rep("x", 100000))
        assert.is_nil(ok)
        assert.is_truthy(gone.stdin.error)
      end)
    end)

    it("passes explicit env over the scrubbed ambient environment (§6.2.3)", function()
      with_env(function(env)
        local h = spawn(env, { argv = { "env" }, stdio = { stdout = { maxBytes = 100000 } },
          env = { ["FOO-BAR"] = "foo bar", DSH_EXPLICIT = "dsh", TOKEN_EXPLICIT = "tok\nen", EMPTY = "" } })
        assert.same({ exitCode = 0 }, outcome(h))
        local out = h.stdout:readFrom(0).text
        assert.is_truthy(out:find("\nFOO-BAR=foo bar\n", 1, true) or out:find("^FOO-BAR=foo bar\n"))
        assert.is_truthy(out:find("DSH_EXPLICIT=dsh\n", 1, true))
        assert.is_truthy(out:find("TOKEN_EXPLICIT=tok\nen\n", 1, true))
        assert.is_truthy(out:find("EMPTY=\n", 1, true))
        for k, v in pairs(env.secrets) do
          assert.is_falsy(out:find(k .. "=", 1, true), k .. " was not scrubbed")
          assert.is_falsy(out:find(v, 1, true), "the value of " .. k .. " leaked")
        end
        for k, v in pairs(env.visible) do assert.is_truthy(out:find(k .. "=" .. v .. "\n", 1, true), k) end
        assert.is_true(h:waitForExit())
      end)
    end)

    it("spills, cuts, terminates with SIGTERM and forgets a cut spill (§6.2.5)", function()
      with_env(function(env)
        local h = sh(env, "printf 0123456789; sleep 30", { stdio = { stdout = { maxBytes = 4,
          spill = { maxBytes = 6 } } } })
        assert.is_truthy(helpers.eventually(function() return h.stdout:readFrom(0).nextOffset == 10 end, 10000))
        local path = h.stateDir .. "/stdout.log"
        assert.equal(path, h.stdout.spillPath)
        -- spill.maxBytes bytes, as head -c writes them (on stock envd a tee's
        -- second reader writes the file: it may lag behind the stream)
        local spilled
        helpers.eventually(function()
          spilled = env.cat(path)
          return spilled == "012345"
        end, 30000, 20)
        assert.equal("012345", spilled)
        h:terminate()
        h:terminate()
        assert.same({ signal = "SIGTERM" }, outcome(h))
        local signal, stop = aborted_after(60000) -- a ceiling: the group is gone at once
        assert.is_true(h:waitForExit(signal))
        stop()
        assert.same({ text = "6789", nextOffset = 10, lossy = true }, h.stdout:readFrom(0))
        assert.is_false(env.exists(path))
        assert.is_false(env.exists(h.stateDir))
      end)
    end)

    it("keeps a needed, complete spill and names it (§6.4.5–6)", function()
      with_env(function(env)
        local h = sh(env, "printf abcdef; printf 12345 >&2; exit 7", { stdio = {
          stdout = { maxBytes = 4, spill = { maxBytes = 10 } }, stderr = { maxBytes = 3 } } })
        assert.same({ exitCode = 7 }, outcome(h))
        local r = h.stdout:readFrom(0)
        assert.same({ text = "cdef", nextOffset = 6, lossy = true, spillPath = h.stateDir .. "/stdout.log" },
          r)
        assert.equal("abcdef", env.cat(r.spillPath))
        assert.same({ text = "345", nextOffset = 5, lossy = true }, h.stderr:readFrom(0))
        assert.is_true(h:waitForExit())
        -- not needed (fits) and incomplete (over spill.maxBytes): both removed
        local s = sh(env, "printf ab; printf abcd >&2", { stdio = {
          stdout = { maxBytes = 4, spill = { maxBytes = 10 } }, stderr = { maxBytes = 2,
            spill = { maxBytes = 3 } } } })
        assert.same({ exitCode = 0 }, outcome(s))
        assert.same({ text = "ab", nextOffset = 2, lossy = false }, s.stdout:readFrom(0))
        assert.same({ text = "cd", nextOffset = 4, lossy = true }, s.stderr:readFrom(0))
        assert.is_false(env.exists(s.stateDir))
        assert.is_true(s:waitForExit())
      end)
    end)

    it("collects multibyte output split across reads code-point-safely", function()
      with_env(function(env)
        local h = sh(env, [[printf 'a\344\275'; sleep 0.3; printf '\240\345\245\275']], {
          stdio = { stdout = { maxBytes = 100 } } })
        assert.is_truthy(helpers.eventually(function() return h.stdout.total >= 3 end, 10000))
        assert.same({ text = "a", nextOffset = 1, lossy = false }, h.stdout:readFrom(0))
        assert.same({ exitCode = 0 }, outcome(h))
        assert.same({ text = "a你好", nextOffset = 7, lossy = false }, h.stdout:readFrom(0))
        assert.same({ text = "你好", nextOffset = 7, lossy = false }, h.stdout:readFrom(1))
        local t = sh(env, [[printf 'a\344\275\240\345\245\275']], { stdio = { stdout = { maxBytes = 4 } } })
        assert.same({ exitCode = 0 }, outcome(t))
        assert.same({ text = "好", nextOffset = 7, lossy = true }, t.stdout:readFrom(0))
        local p = sh(env, [[for i in 1 2 3; do printf '\344\275'; sleep 0.05; printf '\240'; done]])
        assert.equal("你你你", p.stdout:read_all())
        assert.same({ exitCode = 0 }, outcome(p))
        for _, x in ipairs { h, t, p } do assert.is_true(x:waitForExit()) end
      end)
    end)

    it("kills a TERM-immune grandchild after the grace, and only then reports the group gone", function()
      with_env(function(env)
        local h = sh(env, [[(trap '' TERM; exec sleep 30) >/dev/null 2>&1 & echo ready; exec sleep 30]],
          { graceMs = 1000, stdio = { stdout = { maxBytes = 100 } } })
        assert.is_truthy(helpers.eventually(function() return h.stdout:readFrom(0).text == "ready\n" end, 10000))
        local t0 = loop.now_ms()
        assert.is_true(h:terminate())
        assert.same({ signal = "SIGTERM" }, outcome(h))
        local signal, stop = aborted_after(300)
        assert.is_false(h:waitForExit(signal))
        stop()
        assert.is_true(env.alive(h.pid))
        assert.is_true(h:waitForExit())
        assert.is_true(loop.now_ms() - t0 >= 900, "the group went before the grace ended")
        assert.is_false(env.alive(h.pid))
      end)
    end)

    it("escalates to SIGKILL when the group traps TERM (§6.4.9, §6.4.25)", function()
      with_env(function(env)
        local h = sh(env, "trap '' TERM; echo ready; sleep 30", { graceMs = 200,
          stdio = { stdout = { maxBytes = 10 } } })
        assert.is_truthy(helpers.eventually(function() return h.stdout:readFrom(0).text == "ready\n" end, 10000))
        h:terminate()
        assert.same({ signal = "SIGKILL" }, outcome(h))
        assert.is_true(h:waitForExit())
        assert.is_false(env.alive(h.pid))
      end)
    end)

    it("keeps going when the consumer drops a pipe, and releases settled handles (§6.4.24, §6.4.27)",
      function()
      with_env(function(env)
        local h = sh(env, "echo first; sleep 0.2; seq 1 100000", { stdio = { stdout = "pipe",
          stderr = "pipe" } })
        assert.equal("first\n", h.stdout:read())
        h.stdout:close()
        assert.is_nil(h.stdout:read())
        assert.same({ exitCode = 0 }, outcome(h))
        assert.is_nil(h.stderr:read())
        assert.is_true(h:waitForExit())
        assert.is_truthy(helpers.eventually(function() return env.sub:live_count() == 0 end, 10000))
      end)
    end)

    it("reports the leader's exit while the group lives, and terminates it later (§6.4.11)", function()
      with_env(function(env)
        local h = sh(env, "sleep 30 >/dev/null 2>&1 & exit 0")
        assert.same({ exitCode = 0 }, outcome(h))
        local signal, stop = aborted_after(200)
        assert.is_false(h:waitForExit(signal))
        stop()
        local pre = async.controller()
        pre:abort()
        assert.is_false(h:waitForExit(pre.signal))
        h:terminate()
        assert.is_true(h:waitForExit())
        assert.is_false(env.alive(h.pid))
      end)
    end)

    it("terminates on abort, before the start, and twice (§6.4.8, §6.4.10)", function()
      with_env(function(env)
        local ctl = async.controller()
        local a = sh(env, "echo up; exec sleep 30", { signal = ctl.signal,
          stdio = { stdout = { maxBytes = 10 } } })
        assert.is_truthy(helpers.eventually(function() return a.stdout:readFrom(0).text == "up\n" end, 10000))
        ctl:abort("stop")
        assert.same({ signal = "SIGTERM" }, outcome(a))
        assert.is_true(a:waitForExit())
        local b = sh(env, "exec sleep 30")
        assert.equal(-1, b.pid)
        b:terminate()
        b:terminate()
        assert.same({ signal = "SIGTERM" }, outcome(b))
        assert.is_true(b:waitForExit())
      end)
    end)

    it("resolves done with nil, err when the start fails, and stays harmless (§6.4.15)", function()
      with_env(function(env)
        local h = spawn(env, { argv = { "true" }, cwd = "/no/such/dir" })
        local res, err = outcome(h) -- an expected failure: done does not raise
        assert.is_nil(res)
        assert.is_true(errors.is(err))
        assert.equal("string", type(err.code))
        assert.equal(-1, h.pid)
        assert.is_true(h:waitForExit())
        local signal, stop = aborted_after(5000)
        assert.is_true(h:waitForExit(signal))
        stop()
        assert.is_true(h:terminate())
      end)
    end)

    it("rolls a failed start back without survivors (§6.2.4)", function()
      with_env(function(env)
        local marker = "dsh-publication-survivor-" .. require("dsh.core.sysutil").random_hex(4)
        env.sub:injectFault("afterStart", function()
          -- fails once the payload has forked its child (so there is one to roll back)
          assert(helpers.eventually(function()
            local _, ps = env.sh("ps -eo args=")
            return ("\n" .. ps):find("\n" .. marker .. " 30", 1, true) -- the child, not the shell naming it
          end, 30000, 20), "the payload never started its child")
          return nil, errors.new("INJECTED", "injected publication failure")
        end)
        local h = sh(env, "exec -a " .. marker .. " sleep 30 & wait")
        local res, err = outcome(h)
        env.sub:injectFault("afterStart", nil)
        assert.is_nil(res)
        assert.equal("INJECTED", err.code)
        assert.equal(-1, h.pid)
        assert.is_true(h:waitForExit())
        local _, ps = env.sh("ps -eo args=")
        assert.is_falsy(ps:find(marker, 1, true), "a survivor: " .. marker)
      end)
    end)

    it("terminates and joins every live handle on dispose", function()
      with_env(function(env)
        local hs = {
          sh(env, "exec sleep 30"),
          sh(env, "trap '' TERM; echo ready; sleep 30 & wait", { graceMs = 300,
            stdio = { stdout = { maxBytes = 10 } } }),
          sh(env, "yes", { stdio = { stdout = "pipe" } }), -- nobody reads: held back
          sh(env, "sleep 30 >/dev/null 2>&1 & exit 0"),
        }
        assert.is_truthy(helpers.eventually(function()
          return hs[2].stdout:readFrom(0).text == "ready\n" and hs[1].pid > 0 and hs[3].pid > 0
            and hs[4].done:done()
        end, 10000))
        local t0 = loop.now_ms()
        assert.is_true(env.sub:dispose())
        assert.is_true(loop.now_ms() - t0 < 8000)
        assert.equal(0, env.sub:live_count())
        for _, h in ipairs(hs) do
          assert.is_true(h.done:done())
          assert.is_false(env.alive(h.pid))
        end
        assert.same({ signal = "SIGKILL" }, outcome(hs[2])) -- it trapped TERM (§6.4.26)
        local late, err = env.sub:spawn { argv = { "true" } }
        assert.is_nil(late)
        assert.equal("DISPOSED", err.code)
      end)
    end)

    it("resolves executables", function()
      with_env(function(env)
        local bash = assert(env.sub:resolveExecutable("bash"))
        assert.equal("/", bash:sub(1, 1))
        assert.equal("/bin/sh", env.sub:resolveExecutable("/bin/sh"))
        assert.is_nil((env.sub:resolveExecutable("")))
        assert.is_nil((env.sub:resolveExecutable("dsh-no-such-command")))
      end)
    end)

    it("runs a terminal: multibyte output, resize, foreground signals, scrubbed env, close", function()
      with_env(function(env)
        local t = assert(env.sub:spawnTerminal { argv = { "bash", "--norc", "--noprofile" },
          env = { PS1 = "$ ", EXPLICIT_TOKEN = "explicit" }, rows = 24, cols = 80, graceMs = 60000 })
        assert.is_true(t.pid > 0)
        local buf = ""
        local reader = async.run(function()
          while true do
            local s = t:read()
            if not s then return end
            buf = buf .. s
          end
        end)
        local function expect(pat)
          local ok = helpers.eventually(function() return buf:find(pat) ~= nil end, 10000)
          if not ok then print("terminal output so far: " .. string.format("%q", buf)) end
          return ok
        end
        local names = {}
        for k in pairs(env.secrets) do names[#names + 1] = k .. "=[$" .. k .. "]" end
        t:write("printf 'PTY-\\344\\275\\240\\345\\245\\275 %s\\n' $((6*7)); echo X=$EXPLICIT_TOKEN "
          .. table.concat(names, " ") .. " END\n")
        assert.is_true(expect("PTY%-你好 42"))
        assert.is_true(expect("X=explicit [^\n]*END"))
        local line = buf:match("X=explicit [^\n]*END")
        for k in pairs(env.secrets) do assert.is_truthy(line:find(k .. "=[]", 1, true), line) end
        t:resize(30, 100)
        buf = ""
        t:write("stty size\n")
        assert.is_true(expect("30 100"))
        assert.is_true(expect("%$ $"))
        buf = ""
        -- the job says when it runs (a SIGINT that reached the shell's fork
        -- before it reset the shell's handlers would be lost)
        t:write("sh -c 'echo job-$((6*7)); exec sleep 30'\n")
        assert.is_true(expect("job%-42"))
        local fg = assert(t:signal("SIGINT"))
        assert.is_true(fg ~= t.pid) -- the job's own group, under job control
        assert.is_true(expect("%$ $"))
        buf = ""
        t:write("echo after=$?\n")
        assert.is_true(expect("after=130"))
        local t0 = loop.now_ms()
        assert.is_true(t:close())
        -- however slow the machine, far from the grace (60 s): the hangup ended it
        assert.is_true(loop.now_ms() - t0 < 30000, "a hangup ends a shell without the grace")
        assert.is_truthy(t.done:await())
        assert.is_false(env.alive(t.pid))
        assert.is_true(t:close())
        reader:await()
      end)
    end)

    describe("the bash tool", function()
      it("renders output, stderr after stdout, and the status", function()
        with_env(function(env)
          local ctx = env.ctx
          assert.equal("out\nerr\n[exit code 3]", tool.run(ctx,
            { command = "echo out; echo err >&2; exit 3" }))
          assert.equal("(no output)\n[exit code 0]", tool.run(ctx, { command = "true",
            description = "nothing" }))
          assert.equal("no newline\n[exit code 0]", tool.run(ctx, { command = "printf 'no newline'" }))
          local code, pwd = env.sh("true")
          assert.equal(0, code)
          assert.equal(ctx.subprocess.cwd .. "\n[exit code 0]", tool.run(ctx, { command = "pwd" }))
          assert.is_truthy(pwd)
          if exact then
            assert.equal("(no output)\n[terminated by SIGTERM]", tool.run(ctx, { command = "kill -TERM $$" }))
          end
          local _, err = tool.run(ctx, { command = "" })
          assert.equal("INVALID_ARGUMENT", err.code)
          _, err = tool.run(ctx, { command = "true", timeout = 0 })
          assert.equal("INVALID_ARGUMENT", err.code)
          -- above the maximum is capped, not refused
          assert.equal("(no output)\n[exit code 0]", tool.run(ctx, { command = "true", timeout = 600001 }))
          _, err = tool.run(ctx, { command = "true", bogus = 1 })
          assert.equal("INVALID_ARGUMENT", err.code)
        end)
      end)

      it("times out and stops the whole group", function()
        with_env(function(env)
          local marker = "dsh-bash-timeout-" .. require("dsh.core.sysutil").random_hex(4)
          local t0 = loop.now_ms()
          local text = tool.run(env.ctx,
            { command = "echo started; (exec -a " .. marker .. " sleep 30) & exec -a "
            .. marker .. " sleep 30", timeout = 300 })
          assert.equal("started\n[timed out after 300 ms]", text)
          assert.is_true(loop.now_ms() - t0 < 5000)
          assert.is_truthy(helpers.eventually(function()
            local _, ps = env.sh("ps -eo args=")
            return not ps:find(marker, 1, true)
          end, 5000))
        end)
      end)

      it("keeps the tail, code-point-safely, and names the full output", function()
        with_env(function(env)
          local text = tool.run(env.ctx, { command = "seq 1 2000" })
          local n, path, shown = text:match(
            "^%[%.%.%. (%d+) bytes of output truncated; full output in ([^%]]+)%]\n(.*)%[exit code 0%]$")
          local want = {}
          for i = 1, 2000 do want[i] = i .. "\n" end
          want = table.concat(want)
          assert.equal(want, env.cat(path))
          -- what is shown is the tail, from the first whole line within the last 200 bytes
          assert.equal(8893, tonumber(n) + #shown)
          assert.is_true(#shown <= 200 and #shown > 190)
          assert.equal(want:sub(-#shown), shown)
          assert.equal("\n", want:sub(-#shown - 1, -#shown - 1))
          assert.equal("\n2000\n[exit code 0]", text:sub(-19))
          local mb = tool.run(env.ctx,
            { command = "for i in $(seq 1 100); do printf '你好'; done; echo; echo tail >&2" })
          local cut, mb_shown = mb:match("^%[%.%.%. (%d+) bytes of output truncated; full output in [^%]]+%]\n"
            .. "(.*)tail\n%[exit code 0%]$")
          assert.is_truthy(mb_shown, mb)
          assert.is_true(utf8.validate(mb_shown))
          assert.equal(601, tonumber(cut) + #mb_shown)
          assert.is_true(#mb_shown + 5 <= 200)
        end)
      end)
    end)
  end)
end
