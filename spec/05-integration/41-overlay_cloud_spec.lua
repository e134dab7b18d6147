-- The overlay with backend "cloud", against E2B's control plane (here its
-- stand-in, spec/fixtures/e2b-api.mjs: a real dshd behind E2B's API and
-- router): the same world as on a local sandbox; disposal with work in
-- flight in every provider ends it all before the sandbox is deleted, and
-- nothing of the sandbox is left; a paused sandbox reconnected by sandboxId
-- has its files and nothing else (docs/overlay.md).
local async = require "dsh.async"
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local helpers = require "helpers"
local O = require "helpers.overlay"

local AGENT = { id = "overlay-cloud-spec" }
local C_SOURCE, CLANGD, start = O.C_SOURCE, O.CLANGD, O.start

local function send(ctx, id, text) return O.send(ctx, AGENT, id, text) end

-- The sandbox's processes (args), but for its daemon and the ps that lists them.
local function processes(ctx)
  return O.processes(assert(ctx.e2b:exec { "ps", "-eo", "args=" }).stdout)
end

describe("the overlay on a cloud sandbox (the E2B stand-in)", function()
  D.use_state()
  local S = E.use_standin()

  it("composes one world; disposal ends every provider's work, then deletes the sandbox", function()
    helpers.run(function()
      local ctx = start { backend = "cloud", e2b = S:config { onTimeout = "kill" }, lsp = { servers = CLANGD } }
      local id = assert(ctx.e2b:sandboxId())
      local run
      local ok, err = xpcall(function()
        assert.equal("cloud", ctx.e2b.backend)
        assert(ctx.fs:writeText("world.c", C_SOURCE))
        assert.equal(C_SOURCE, assert(ctx.bash:run { command = "cat world.c" }).stdout.text)
        local d = assert(ctx.lsp:query { operation = "goToDefinition", filePath = "world.c",
          position = { line = 1, character = 25 }, workspaceRoot = ctx.e2b.cwd })
        assert.same({ line = 0, character = 11 }, d.locations[1].range.start)
        -- work in flight in every provider
        local h = assert(ctx.subprocess:spawn { argv = { "bash", "-c", "trap '' TERM; exec sleep 301" },
          graceMs = 300 })
        assert(ctx.bash:start { command = "sleep 302" })
        local s = assert(ctx.pty:spawn(AGENT, { type = "shell" }))
        send(ctx, s.id, "(trap '' TERM HUP; exec -a dsh-overlay-job sleep 303) &")
        run = async.run(function()
          return ctx.codeRuntime:run { program = "while true do bridge.nap() end", bindings = { { global = "bridge",
            functions = { nap = function() async.sleep(20) return true end } } } }
        end)
        assert.is_truthy(helpers.eventually(function()
          local ps = table.concat(processes(ctx), "\n")
          return h.pid > 0 and ps:find("sleep 302", 1, true) and ps:find("dsh-overlay-job", 1, true)
            and ps:find("clangd", 1, true) and ps:find("code-runtime-", 1, true)
        end))
      end, debug.traceback)
      local pids = S:pids(id)
      local dok, derr = ctx:dispose()
      assert(ok, err)
      assert.is_true(dok, tostring(derr))
      assert.same({ kind = "abort", message = "runtime disposed" }, run:await().error)
      assert.is_true(#pids >= 3)
      assert.same({}, E.survivors(pids, 0)) -- gone when dispose returned
      assert.is_nil(S:state(id))
    end)
  end)

  it("reconnects to a paused sandbox by sandboxId: its files, no terminal, no job, no process of before", function()
    helpers.run(function()
      local ctx = start { backend = "cloud", e2b = S:config { onDispose = "pause" } }
      local id = assert(ctx.e2b:sandboxId())
      assert(ctx.fs:writeText("kept.txt", "kept across the pause\n"))
      local job = assert(ctx.bash:start { command = "sleep 304" })
      local s = assert(ctx.pty:spawn(AGENT, { type = "shell" }))
      send(ctx, s.id, "echo before > from-pty.txt")
      assert(ctx:dispose())
      assert.equal("paused", S:state(id))

      local again = start { backend = "cloud", e2b = S:config { sandboxId = id, onDispose = "kill" },
        codeRuntime = false }
      local ok, err = xpcall(function()
        assert.is_false(again.e2b.created)
        assert.equal("kept across the pause\n", assert(again.fs:readText("kept.txt")).text)
        assert.equal("before\n", assert(again.fs:readText("from-pty.txt")).text)
        assert.same({}, again.pty:list(AGENT))
        local r, rerr = again.bash:readOutput(job.id)
        assert.is_nil(r)
        assert.equal("BASH_UNKNOWN_PROCESS", rerr.code)
        assert.same({}, processes(again))
      end, debug.traceback)
      assert(again:dispose())
      assert(ok, err)
      assert.is_nil(S:state(id))
    end)
  end)
end)
