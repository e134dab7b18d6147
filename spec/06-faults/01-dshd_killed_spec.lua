-- dshd SIGKILLed under each service (issue 14, Faults): mid-stream, mid-PTY,
-- mid-LSP request and mid-code-run, on a real local sandbox. Each ends within
-- 2 s with a clear error (code and message); nothing hangs; the next call
-- resumes the sandbox (dshd's death stops it like a pause, issue 9); dispose
-- succeeds and nothing is left (no host process, no state, no fd, no group).
local async = require "dsh.async"
local D = require "helpers.dshd"
local F = require "06-faults.support"
local helpers = require "helpers"
local loop = require "dsh.core.loop"

local LOST = "^subprocess%-e2b: lost the connection to process %d+ and could not reconnect: process %d+ is gone: "
  .. "the sandbox stopped when dshd ended %(exit 137%) at " .. F.ISO .. " and was resumed at " .. F.ISO
  .. "; processes do not survive a pause$"

-- Run fn(ctx) on a fresh composition; dispose it and check nothing is left.
local function with_ctx(fn)
  helpers.run(function()
    local ctx = F.compose()
    local ok, err = xpcall(fn, debug.traceback, ctx)
    if not ok then
      ctx:dispose()
      error(err, 0)
    end
    F.dispose(ctx)
  end)
end

local function settles_within_2s(t0)
  local ms = loop.now_ms() - t0
  assert.is_true(ms < 2000, string.format("settled %.0f ms after dshd died", ms))
end

describe("dshd SIGKILLed", function()
  D.use_state()

  it("mid-stream: the streaming process and a running Bash command end SUBPROCESS_LOST saying why", function()
    with_ctx(function(ctx)
      local id = ctx.e2b:sandboxId()
      local h = assert(ctx.subprocess:spawn { argv = { "bash", "-c", "while :; do echo line; sleep 0.01; done" },
        stdio = { stdout = { maxBytes = 1000000 } } })
      local run = async.run(function()
        return ctx.bash:run { command = "while :; do echo more; sleep 0.01; done" }
      end)
      assert.is_truthy(helpers.eventually(function() return #h.stdout:readFrom(0).text > 100 end))
      async.sleep(100)
      local t0 = F.kill_dshd(id)
      local r, err = h.done:await()
      settles_within_2s(t0)
      assert.is_nil(r)
      assert.equal("SUBPROCESS_LOST", err.code)
      assert.matches(LOST, err.message)
      assert.matches("^line\n", h.stdout:readFrom(0).text) -- what came before stays readable
      r, err = run:await()
      settles_within_2s(t0)
      assert.is_nil(r)
      assert.equal("SUBPROCESS_LOST", err.code)
      assert.matches(LOST, err.message)
      assert.is_true(h:waitForExit()) -- the group went with the daemon's incarnation
      -- the sandbox was resumed: the next call works
      r = assert(ctx.bash:run { command = "echo fine" })
      assert.same({ 0, "fine\n" }, { r.exitCode, r.stdout.text })
    end)
  end)

  it("mid-PTY: the pending send ends PTY_TRANSPORT, the session says exited, a new one works", function()
    with_ctx(function(ctx)
      local id = ctx.e2b:sandboxId()
      local agent = { id = "agent-fault" }
      local s = assert(ctx.pty:spawn(agent, { type = "shell" }))
      local op = assert(ctx.pty:startSend(agent, s.id, { text = "while :; do date; sleep 0.05; done", submit = true }))
      async.sleep(300)
      local t0 = F.kill_dshd(id)
      local r, err = op:wait()
      settles_within_2s(t0)
      assert.is_nil(r)
      assert.equal("PTY_TRANSPORT", err.code)
      assert.matches("^pty%-e2b: " .. LOST:sub(2), err.message)
      assert.same({ kind = "exited" }, ctx.pty:status(agent, s.id))
      local op2
      op2, err = ctx.pty:startSend(agent, s.id, { text = "echo hi", submit = true })
      assert.is_nil(op2)
      assert.same({ "PTY_EXITED", "pty-e2b: E2B PTY session has exited" }, { err.code, err.message })
      local s2 = assert(ctx.pty:spawn(agent, { type = "shell" }))
      r = assert(assert(ctx.pty:startSend(agent, s2.id, { text = "echo after-$((6*7))", submit = true })):wait())
      assert.truthy(r.viewport:find("after-42", 1, true), r.viewport)
    end)
  end)

  it("mid-LSP request: the query is retried once on a fresh server and answered", function()
    with_ctx(function(ctx)
      local id = ctx.e2b:sandboxId()
      assert(ctx.fs:writeText("a.fx", "hello slow\n"))
      local h = assert(F.hover(ctx, "a.fx", 0, 1))
      assert.same({ kind = "hover", hover = { contents = "word `hello` at 0:1" } },
        { kind = h.kind, hover = h.hover })
      local q = async.run(function() return F.hover(ctx, "a.fx", 0, 7) end) -- "slow": answers after 500 ms
      async.sleep(200)
      local t0 = F.kill_dshd(id)
      local r = assert(q:await())
      settles_within_2s(t0)
      assert.same({ kind = "hover", hover = { contents = "word `slow` at 0:7" } }, { kind = r.kind, hover = r.hover })
    end)
  end)

  it("mid-LSP request, twice: dshd dies under the retry too; the query ends LSP_SERVER_FAILED", function()
    with_ctx(function(ctx)
      local id = ctx.e2b:sandboxId()
      assert(ctx.fs:writeText("a.fx", "hello silent\n"))
      assert(F.hover(ctx, "a.fx", 0, 1))
      local pool = ctx.lsp._by_id.fixture._pool
      local first = pool[ctx.e2b.cwd]
      local q = async.run(function() return F.hover(ctx, "a.fx", 0, 7) end) -- "silent": never answers
      assert.is_truthy(helpers.eventually(function() return first._conn:pending_count() == 1 end))
      F.kill_dshd(id)
      -- the retry waits on a fresh server of the resumed sandbox
      assert.is_truthy(helpers.eventually(function()
        local inst = pool[ctx.e2b.cwd]
        return inst and inst ~= first and inst._conn:pending_count() == 1
      end, 5000), "the query was not retried on a fresh server")
      local t0 = F.kill_dshd(id)
      local r, err = q:await()
      settles_within_2s(t0)
      assert.is_nil(r)
      assert.equal("LSP_SERVER_FAILED", err.code)
      assert.matches('^language server "fixture" failed: ' .. LOST:sub(2, -2), err.message)
    end)
  end)

  it("mid-code-run, blocked in a binding: the run ends worker-exit saying the runtime was lost", function()
    with_ctx(function(ctx)
      local id = ctx.e2b:sandboxId()
      local entered, release = async.future(), async.future()
      local f = async.run(function()
        return ctx.codeRuntime:run { language = "lua", program = "return tools.block()",
          bindings = { { global = "tools", functions = { block = function()
            entered:resolve(true)
            release:await()
            return 1
          end } } } }
      end)
      entered:await()
      local t0 = F.kill_dshd(id)
      local r = f:await()
      settles_within_2s(t0)
      release:resolve(true) -- the binding returns after the run settled: ignored
      assert.same({}, r.logs)
      assert.equal("worker-exit", r.error.kind)
      assert.matches("^E2B runtime stdout failed: " .. LOST:sub(2), r.error.message)
      assert.is_nil(r.value)
      r = ctx.codeRuntime:run { language = "lua", program = "return 6 * 7" }
      assert.same({ logs = {}, value = 42 }, r)
    end)
  end)
end)
