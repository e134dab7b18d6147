-- The sandbox killed (dsh.sandbox.kill, as from another process) under live
-- providers (issue 14, Faults): what was running ends at once with an error
-- that says the sandbox is gone and when, every later call of every service
-- too (SANDBOX_GONE, or the service's own code carrying the same story), and
-- dispose succeeds with nothing left.
local async = require "dsh.async"
local D = require "helpers.dshd"
local F = require "06-faults.support"
local helpers = require "helpers"
local loop = require "dsh.core.loop"
local sandbox = require "dsh.sandbox"

describe("the sandbox killed under live providers", function()
  D.use_state()

  it("ends what runs and fails every later call of every service, saying the sandbox is gone", function()
    helpers.run(function()
      local ctx = F.compose()
      local id = ctx.e2b:sandboxId()
      local gone = "sandbox " .. id .. " is gone: killed at " .. F.ISO .. "$"
      local agent = { id = "agent-fault" }
      -- live: a streaming process, a PTY running a loop, an LSP request the
      -- server never answers, a code run blocked in a binding
      local h = assert(ctx.subprocess:spawn { argv = { "bash", "-c", "while :; do echo line; sleep 0.01; done" },
        stdio = { stdout = { maxBytes = 1000000 } } })
      local s = assert(ctx.pty:spawn(agent, { type = "shell" }))
      local op = assert(ctx.pty:startSend(agent, s.id, { text = "while :; do date; sleep 0.05; done", submit = true }))
      assert(ctx.fs:writeText("a.fx", "hello silent\n"))
      assert(F.hover(ctx, "a.fx", 0, 1))
      local q = async.run(function() return F.hover(ctx, "a.fx", 0, 7) end)
      local entered, release = async.future(), async.future()
      local run = async.run(function()
        return ctx.codeRuntime:run { language = "lua", program = "return tools.block()",
          bindings = { { global = "tools", functions = { block = function()
            entered:resolve(true)
            release:await()
            return 1
          end } } } }
      end)
      entered:await()
      assert.is_truthy(helpers.eventually(function() return #h.stdout:readFrom(0).text > 100 end))
      local t0 = loop.now_ms()
      assert(sandbox.kill(id))

      local r, err = h.done:await()
      assert.same({ "SANDBOX_GONE" }, { err.code, r })
      assert.matches("^" .. gone, err.message)
      assert.is_true(h:waitForExit())
      r, err = op:wait()
      assert.same({ "PTY_TRANSPORT" }, { err.code, r })
      assert.matches("^pty%-e2b: " .. gone, err.message)
      r, err = q:await()
      assert.same({ "LSP_SERVER_FAILED" }, { err.code, r })
      assert.matches('^language server "fixture" failed: ' .. gone, err.message)
      r = run:await()
      release:resolve(true)
      assert.equal("worker-exit", r.error.kind)
      assert.matches("^E2B runtime stdout failed: " .. gone, r.error.message)
      local ms = loop.now_ms() - t0
      assert.is_true(ms < 2000, string.format("settled %.0f ms after the kill", ms))

      -- every later call
      r, err = ctx.fs:readText("a.fx")
      assert.same({ "SANDBOX_GONE" }, { err.code, r })
      assert.matches('^cannot read "/home/user/workspace/a%.fx": ' .. gone, err.message)
      r, err = ctx.fs:writeText("b.txt", "x")
      assert.same({ "SANDBOX_GONE" }, { err.code, r })
      r, err = ctx.bash:run { command = "true" }
      assert.same({ "SANDBOX_GONE" }, { err.code, r })
      assert.matches("^" .. gone, err.message)
      r, err = assert(ctx.subprocess:spawn { argv = { "true" } }).done:await()
      assert.same({ "SANDBOX_GONE" }, { err.code, r })
      r, err = ctx.pty:spawn(agent, { type = "shell" })
      assert.same({ "SANDBOX_GONE" }, { err.code, r })
      assert.matches("^" .. gone, err.message)
      r, err = ctx.pty:startSend(agent, s.id, { text = "x" })
      assert.same({ "PTY_EXITED", "pty-e2b: E2B PTY session has exited" }, { err.code, err.message, r })
      r, err = F.hover(ctx, "a.fx", 0, 1)
      assert.same({ "LSP_READER_FAILED" }, { err.code, r })
      assert.matches('^source "a%.fx" reader failed: ' .. gone, err.message)
      r = ctx.codeRuntime:run { language = "lua", program = "return 1" }
      assert.equal("worker-exit", r.error.kind)
      assert.matches("^E2B runtime spawn failed: " .. gone, r.error.message)
      r, err = ctx.e2b:exec { "true" }
      assert.same({ "SANDBOX_GONE" }, { err.code, r })
      r, err = ctx.e2b:getSandbox()
      assert.same({ "SANDBOX_GONE" }, { err.code, r })

      F.dispose(ctx, id) -- nothing left to kill: dispose succeeds
    end)
  end)
end)
