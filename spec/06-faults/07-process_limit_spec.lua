-- The sandbox's process limit reached (issue 14, Faults; maxProcesses = 32):
-- every service that must start a process fails with resource_exhausted
-- saying the process limit is reached (dshd's Start), or its own code
-- carrying that message; dshd keeps answering what needs no process; once
-- processes end, spawning works again; and killing the sandbox at its limit
-- leaves nothing.
local D = require "helpers.dshd"
local F = require "06-faults.support"
local helpers = require "helpers"
local sandbox = require "dsh.sandbox"

local LIMIT = "^failed to start process: spawn: clone: Resource temporarily unavailable "
  .. "%(the process limit is reached%)$"

-- Start `sleep 60`s until a start fails; returns the live handles and the failure.
local function exhaust(ctx)
  local live = {}
  for _ = 1, 64 do
    local h = assert(ctx.subprocess:spawn { argv = { "sleep", "60" } })
    assert(helpers.eventually(function() return h.pid > 0 or h.done:done() end), "the start did not settle")
    if h.done:done() then
      local r, err = h.done:await()
      assert.is_nil(r)
      return live, err
    end
    live[#live + 1] = h
  end
  error("no start failed under maxProcesses = 32")
end

describe("the sandbox's process limit reached", function()
  D.use_state()

  it("fails every start clearly; dshd stays usable; spawning works again once processes end", function()
    helpers.run(function()
      local ctx = F.compose { maxProcesses = 32, network = false }
      local live, err = exhaust(ctx)
      assert.is_true(#live >= 16, #live .. " processes started")
      assert.equal("resource_exhausted", err.code)
      assert.matches(LIMIT, err.message)
      local r
      r, err = ctx.bash:run { command = "echo hi" }
      assert.same({ "resource_exhausted" }, { err.code, r })
      assert.matches(LIMIT, err.message)
      r, err = ctx.pty:spawn({ id = "agent-fault" }, { type = "shell" })
      assert.same({ "resource_exhausted" }, { err.code, r })
      assert.matches(LIMIT, err.message)
      r = ctx.codeRuntime:run { language = "lua", program = "return 1" }
      assert.equal("worker-exit", r.error.kind)
      assert.matches("^E2B runtime spawn failed: " .. LIMIT:sub(2), r.error.message)
      r, err = ctx.fs:readText("missing.txt") -- the fs seam resolves paths with a helper process
      assert.same({ "FS_IO_ERROR" }, { err.code, r })
      assert.matches('^cannot read "/home/user/workspace/missing%.txt": ' .. LIMIT:sub(2), err.message)
      -- dshd answers what needs no process
      local envd = assert(ctx.e2b:getSandbox()).envd
      assert.equal("dir", assert(envd:stat("/home/user")).type)
      assert.is_true(#assert(envd:list()) >= #live)
      -- processes end: starts work again
      for _, h in ipairs(live) do h:terminate() end
      for _, h in ipairs(live) do assert.equal("SIGTERM", assert(h.done:await()).signal) end
      r = assert(ctx.bash:run { command = "echo again" })
      assert.same({ 0, "again\n" }, { r.exitCode, r.stdout.text })
      assert.same({ logs = {}, value = 2 }, ctx.codeRuntime:run { language = "lua", program = "return 1 + 1" })
      F.dispose(ctx)
    end)
  end)

  it("killed at its limit, the sandbox leaves nothing; what ran ends SANDBOX_GONE", function()
    helpers.run(function()
      local ctx = F.compose { maxProcesses = 32, network = false }
      local id = ctx.e2b:sandboxId()
      local live = exhaust(ctx)
      assert(sandbox.kill(id))
      for _, h in ipairs(live) do
        local r, err = h.done:await()
        assert.same({ "SANDBOX_GONE" }, { err.code, r })
      end
      F.dispose(ctx, id)
    end)
  end)
end)
