-- ctx.bash at parity with the reference's Bash executor (bash-local; issue 9
-- §4), in three worlds: this host (subprocess-local), a local sandbox and a
-- cloud sandbox through the E2B stand-in (subprocess-e2b over a real dshd).
-- Real shells, real process groups; what is checked inside a sandbox is
-- checked with commands run there.
local async = require "dsh.async"
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local helpers = require "helpers"
local loop = require "dsh.core.loop"

local S -- the stand-in

-- The ambient environment every world gets: a secret the scrub drops, one to keep.
local AMBIENT = { NPM_TOKEN = "sentinel-secret", KEEP = "visible" }

local WORLDS = {
  {
    name = "this host (subprocess-local)",
    providers = function(cfg)
      return { { require "dsh.providers.subprocess_local", { ambientEnv = AMBIENT, cwd = "/tmp" } },
        { require "dsh.providers.bash", cfg } }
    end,
  },
  {
    name = "a local sandbox (subprocess-e2b)",
    providers = function(cfg)
      return { { require "dsh.providers.e2b", { envs = AMBIENT } }, require "dsh.providers.subprocess_e2b",
        { require "dsh.providers.bash", cfg } }
    end,
  },
  {
    name = "a cloud sandbox through the stand-in (subprocess-e2b)",
    providers = function(cfg)
      return { { require "dsh.providers.e2b", S:config { envs = AMBIENT } }, require "dsh.providers.subprocess_e2b",
        { require "dsh.providers.bash", cfg } }
    end,
  },
}

-- Run cmd through ctx.bash and return its stdout, asserting exit 0.
local function out(ctx, cmd)
  local r = assert(ctx.bash:run { command = cmd })
  assert(r.exitCode == 0, cmd .. ": " .. ctx.bash:render(r))
  return r.stdout.text
end

-- Is pid alive in the world of ctx? (asked there, with kill -0)
local function alive(ctx, pid)
  return out(ctx, "kill -0 " .. pid .. " 2>/dev/null && echo yes || echo no") == "yes\n"
end

-- Read p's output until it contains want; returns everything read.
local function read_until(bash, p, want)
  local all = ""
  assert(helpers.eventually(function()
    all = all .. assert(bash:readOutput(p)).text
    return all:find(want, 1, true)
  end, 10000), "never saw " .. want .. " in " .. all)
  return all
end

describe("ctx.bash", function()
  D.use_state()
  S = E.use_standin()

  for _, W in ipairs(WORLDS) do
    local function with_bash(cfg, fn)
      helpers.run(function() helpers.with_context(W.providers(cfg), fn) end)
    end

    describe("on " .. W.name, function()
      it("has the reference's defaults and the model-friendly environment; the call's env wins", function()
        with_bash({}, function(ctx)
          local b = ctx.bash
          assert.same({ 120000, 600000, 64000, 3000, 64 * 1024 * 1024 },
            { b.timeoutMs, b.maxTimeoutMs, b.maxOutputBytes, b.graceMs, b.maxSpillBytes })
          local cmd = [[printf '%s|%s|%s|%s|%s|%s|%s' "$NO_COLOR" "$TERM" "$PAGER" "$GIT_PAGER" ]]
            .. [["${MY_API_TOKEN-unset}" "${NPM_TOKEN-unset}" "${KEEP-unset}"]]
          assert.equal("1|dumb|cat|cat|unset|unset|visible", out(ctx, cmd))
          local r = assert(b:run { command = cmd, env = { TERM = "xterm", MY_API_TOKEN = "on-purpose" } })
          assert.equal("1|xterm|cat|cat|on-purpose|unset|visible", r.stdout.text)
        end)
      end)

      it("caps a per-call timeout at maxTimeoutMs instead of refusing it", function()
        with_bash({ timeoutMs = 1000, maxTimeoutMs = 2000 }, function(ctx)
          local r = assert(ctx.bash:run { command = "true", timeout = 99999 })
          assert.same({ 2000, false, 0 }, { r.timeoutMs, r.timedOut, r.exitCode })
          assert.equal(500, assert(ctx.bash:run { command = "true", timeout = 500 }).timeoutMs)
          assert.equal(1000, assert(ctx.bash:run { command = "true" }).timeoutMs)
        end)
        with_bash({ maxTimeoutMs = 300, graceMs = 200 }, function(ctx)
          assert.equal(300, ctx.bash.timeoutMs) -- the default timeout is capped as well
          local r = assert(ctx.bash:run { command = "echo before; exec sleep 30", timeout = 99999 })
          assert.same({ true, false, 300, "before\n" }, { r.timedOut, r.aborted, r.timeoutMs, r.stdout.text })
          assert.equal("before\n[timed out after 300 ms]", ctx.bash:render(r))
        end)
      end)

      it("runs in a per-call workdir (relative to its cwd), with stdin", function()
        with_bash({}, function(ctx)
          local base = out(ctx, "pwd"):gsub("\n$", "")
          out(ctx, "mkdir -p bash-spec-sub")
          local r = assert(ctx.bash:run { command = "pwd; cat; echo", workdir = "bash-spec-sub", stdin = "piped" })
          assert.equal(base .. "/bash-spec-sub\npiped\n", r.stdout.text)
          r = assert(ctx.bash:run { command = "pwd", workdir = "/" })
          assert.equal("/\n", r.stdout.text)
          out(ctx, "rmdir bash-spec-sub")
          local bad, err = ctx.bash:run { command = "true", workdir = "/nonexistent-dsh" }
          assert.is_nil(bad)
          assert.is_string(err.code)
          assert.matches("nonexistent%-dsh", err.message)
        end)
      end)

      it("reports its own timeout as timedOut, the caller's abort as aborted, a self-signal as neither", function()
        with_bash({ graceMs = 200 }, function(ctx)
          local b = ctx.bash
          local r = assert(b:run { command = "exec sleep 30", timeout = 200 })
          assert.same({ true, false }, { r.timedOut, r.aborted })
          local ctl = async.controller()
          local run = async.run(function()
            return b:run { command = "echo go; exec -a dsh-bash-abort sleep 30", signal = ctl.signal }
          end)
          assert.is_truthy(helpers.eventually(function() -- once it runs
            return out(ctx, "pgrep -f '^dsh-bash-abort' >/dev/null && echo yes || echo no") == "yes\n"
          end, 30000, 20))
          ctl:abort("the user pressed stop")
          r = assert(run:await())
          assert.same({ false, true, "SIGTERM" }, { r.timedOut, r.aborted, r.signal })
          assert.equal("go\n[aborted]", b:render(r))
          r = assert(b:run { command = "kill -TERM $$" })
          assert.same({ false, false, "SIGTERM" }, { r.timedOut, r.aborted, r.signal })
          local pre = async.controller()
          pre:abort("early")
          local none, err = b:run { command = "true", signal = pre.signal }
          assert.is_nil(none)
          assert.same({ "ABORTED", "aborted before spawn: early" }, { err.code, err.message })
        end)
      end)

      it("returns when the shell exits, leaving what it put in the background running, readable, killable",
        function()
          with_bash({ graceMs = 200 }, function(ctx)
            local b = ctx.bash
            local r = assert(b:run { command = "sleep 30 & echo $! > bash-spec-bg.pid; echo started" })
            assert.same({ 0, "started\n", "", false }, { r.exitCode, r.stdout.text, r.stderr.text, r.timedOut })
            assert.equal("bash-1", r.background)
            assert.equal("started\n[exit code 0]\n[still running in the background as bash-1]", b:render(r))
            local pid = out(ctx, "cat bash-spec-bg.pid"):gsub("\n$", "")
            assert.is_true(alive(ctx, pid))
            assert.same({ text = "", running = true, lossy = false }, b:readOutput("bash-1"))
            assert.is_true(b:kill("bash-1"))
            assert.is_false(alive(ctx, pid))
            assert.is_false(b:readOutput("bash-1").running)
            assert.is_false(b:kill("bash-1"))
            -- what the background part writes later is its output
            r = assert(b:run { command = "(sleep 0.3; echo late; echo later >&2) & echo now" })
            assert.same({ "now\n", "bash-2" }, { r.stdout.text, r.background })
            local all = read_until(b, r.background, "later")
            assert.equal("late\n[stderr]\nlater\n", all)
            assert.is_truthy(helpers.eventually(function() return not b:status("bash-2").running end))
            assert.equal(0, b:status("bash-2").exitCode)
            -- without a background part, nothing is left and no id is given
            r = assert(b:run { command = "echo plain" })
            assert.is_nil(r.background)
            -- no job of the shell's own runs: an end that comes late (here a
            -- detached process holds the output a moment) is waited for
            r = assert(b:run { command = "( (sleep 0.2; echo held) & ); echo now" })
            assert.same({ "now\nheld\n", nil }, { r.stdout.text, r.background })
            out(ctx, "rm -f bash-spec-bg.pid")
          end)
        end)

      it("starts background commands at once: consuming reads, [stderr], exit status, kill, a failed start",
        function()
          with_bash({ graceMs = 200 }, function(ctx)
            local b = ctx.bash
            local p = assert(b:start { command = "echo out; echo err >&2; read x; echo got $x; exit 5",
              stdin = "in\n", env = { X = "x" } })
            assert.equal("bash-1", p.id)
            local all = read_until(b, p, "got in")
            all = all .. assert(b:readOutput(p)).text
            -- stdout's new text, then stderr's under [stderr], in each read
            assert.is_truthy(all == "out\ngot in\n[stderr]\nerr\n" or all == "out\n[stderr]\nerr\ngot in\n", all)
            assert.is_truthy(helpers.eventually(function() return not b:status(p).running end))
            assert.same({ text = "", running = false, exitCode = 5, lossy = false }, b:readOutput(p))
            -- kill: the whole group, once
            local q = assert(b:start { command = "sleep 60 & echo $!; wait" })
            local child = read_until(b, q, "\n"):match("%d+")
            assert.is_true(alive(ctx, child))
            assert.is_true(b:kill(q))
            assert.is_false(alive(ctx, child))
            assert.is_false(b:kill(q))
            -- a start that fails is reported once, in the next delta
            local f = assert(b:start { command = "true", workdir = "/nonexistent-dsh" })
            local note = helpers.eventually(function()
              local rd = b:readOutput(f)
              if rd.text ~= "" then return rd end
            end)
            assert.matches("^%[stderr%]\nfailed to start: .*nonexistent%-dsh", note.text)
            assert.is_false(note.running)
            assert.same({ text = "", running = false, lossy = false }, b:readOutput(f))
            assert.equal(3, #b:list())
            local v, err = b:readOutput("bash-99")
            assert.is_nil(v)
            assert.equal("BASH_UNKNOWN_PROCESS", err.code)
            assert.has_error(function() b:readOutput(7) end,
              "dsh.bash: readOutput: expected a background process or its id, got number")
          end)
        end)

      it("kills and joins every background process when it disposes, and says DISPOSED afterwards", function()
        helpers.run(function()
          local ctx = helpers.start_context(W.providers { graceMs = 200 })
          local b = ctx.bash
          local trapping = assert(b:start { command = "trap '' TERM; echo armed; sleep 60 & wait" })
          local plain = assert(b:start { command = "exec sleep 60" })
          read_until(b, trapping, "armed")
          local t0 = loop.now_ms()
          assert(ctx:dispose())
          assert.is_true(loop.now_ms() - t0 < 8000)
          assert.same({ false, "SIGKILL" }, { b:status(trapping).running, b:status(trapping).signal })
          assert.same({ false, "SIGTERM" }, { b:status(plain).running, b:status(plain).signal })
          local r, err = b:run { command = "true" }
          assert.is_nil(r)
          assert.same({ "DISPOSED", "dsh.bash: ctx.bash is disposed" }, { err.code, err.message })
          r, err = b:start { command = "true" }
          assert.is_nil(r)
          assert.equal("DISPOSED", err.code)
        end)
      end)
    end)
  end
end)
