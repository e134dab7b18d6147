local async = require "dsh.async"
local loop = require "dsh.core.loop"
local helpers = require "helpers"

describe("dsh.async", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("runs a task and returns its values through await", function()
    local t = async.run(function(a, b)
      async.sleep(5)
      return a + b, "done"
    end, 2, 3)
    local sum, word = t:await()
    assert.equal(5, sum)
    assert.equal("done", word)
    assert.is_true(t:done())
  end)

  it("forgets a finished task (a host running for days keeps no task it ran)", function()
    -- LuaJIT's weak tables have no ephemerons: a task table entry whose value
    -- reaches its key is never collected unless the finished task leaves it.
    local probe = setmetatable({}, { __mode = "v" })
    for i = 1, 100 do
      local f = async.run(function() async.yield() return i end)
      probe[i] = f.coroutine
      assert.equal(i, f:await())
    end
    collectgarbage()
    collectgarbage()
    assert.is_nil(next(probe))
    -- a suspended task stays: only the task table may hold what wakes it
    local gate = async.future()
    local waiting = async.run(function() return gate:await() end)
    probe.waiting = waiting.coroutine
    waiting = nil -- luacheck: ignore 311
    collectgarbage()
    collectgarbage()
    assert.is_not_nil(probe.waiting)
    gate:resolve("done")
    async.step(0)
  end)

  it("awaits outside any task by driving the loop (REPL rule)", function()
    assert.is_nil(coroutine.running())
    local before = loop.now_ms()
    assert.is_true(async.sleep(30))
    assert.is_true(loop.now_ms() - before >= 25)
  end)

  it("sleeps concurrently in several tasks", function()
    local order = {}
    local a = async.run(function() async.sleep(40) order[#order + 1] = "a" end)
    local b = async.run(function() async.sleep(10) order[#order + 1] = "b" end)
    async.all { a, b }
    assert.same({ "b", "a" }, order)
  end)

  it("re-raises a task's error to whoever awaits it", function()
    local t = async.run(function() async.sleep(1) error({ code = "X" }) end)
    local ok, err = pcall(t.await, t)
    assert.is_false(ok)
    assert.equal("X", err.code)
  end)

  it("reports an error nobody awaited instead of swallowing it", function()
    local seen = {}
    local old = async.on_unhandled(function(err, tb) seen[#seen + 1] = { err = err, tb = tb } end)
    async.run(function() error("lost in a task") end)
    async.sleep(1)
    async.on_unhandled(old)
    assert.equal(1, #seen)
    assert.matches("lost in a task", tostring(seen[1].err))
    assert.matches("stack traceback", seen[1].tb)
  end)

  it("does not report an error that was awaited", function()
    local seen = 0
    local old = async.on_unhandled(function() seen = seen + 1 end)
    local t = async.run(function() error("seen") end)
    assert.has_error(function() t:await() end)
    async.sleep(1)
    async.on_unhandled(old)
    assert.equal(0, seen)
  end)

  it("times out a slow function and aborts its signal with the reason", function()
    local got_reason
    local v, err = async.timeout(20, function(signal)
      local ok, e = async.sleep(5000, signal)
      got_reason = signal.reason
      return ok, e
    end)
    assert.is_nil(v)
    assert.equal("TIMEOUT", err.code)
    assert.equal("timed out after 20 ms", err.message)
    async.sleep(1)
    assert.equal(err, got_reason)
  end)

  it("returns a fast function's values from timeout", function()
    local a, b = async.timeout(1000, function() return 1, 2 end)
    assert.equal(1, a)
    assert.equal(2, b)
  end)

  it("carries the abort reason and calls listeners once", function()
    local ctl = async.controller()
    local calls = {}
    local off = ctl.signal:on_abort(function(r) calls[#calls + 1] = r end)
    ctl.signal:on_abort(function(r) calls[#calls + 1] = "second:" .. r end)
    assert.is_true(ctl:abort("stop"))
    assert.is_false(ctl:abort("again"))
    off()
    assert.same({ "stop", "second:stop" }, calls)
    assert.is_true(ctl.signal.aborted)
    assert.equal("stop", ctl.signal.reason)
    local ok, err = ctl.signal:check()
    assert.is_nil(ok)
    assert.equal("ABORTED", err.code)
    assert.equal("stop", err.message)
  end)

  it("aborts a sleep through its signal", function()
    local ctl = async.controller()
    async.run(function() async.sleep(10) ctl:abort("enough") end)
    local ok, err = async.sleep(10000, ctl.signal)
    assert.is_nil(ok)
    assert.equal("ABORTED", err.code)
    assert.equal("enough", err.reason)
  end)

  it("combines signals with any_signal", function()
    local a, b = async.controller(), async.controller()
    local any = async.any_signal(a.signal, nil, b.signal)
    assert.is_false(any.aborted)
    b:abort("b went")
    assert.is_true(any.aborted)
    assert.equal("b went", any.reason)
  end)

  it("waits for all futures and raises the first rejection after all settle", function()
    local finished = false
    local ok, err = pcall(async.all, {
      async.run(function() async.sleep(1) error("first") end),
      async.run(function() async.sleep(20) finished = true end),
    })
    assert.is_false(ok)
    assert.matches("first", err)
    assert.is_true(finished)
  end)

  it("races futures and returns the winner's index and values", function()
    local i, v = async.race {
      async.run(function() async.sleep(50) return "slow" end),
      async.run(function() async.sleep(1) return "fast" end),
    }
    assert.equal(2, i)
    assert.equal("fast", v)
    async.sleep(60) -- let the loser finish so no timer is left
  end)

  it("detects a deadlock instead of hanging", function()
    local f = async.future()
    local ok, err = pcall(f.await, f)
    assert.is_false(ok)
    assert.matches("deadlock", err)
  end)

  it("resumes a task waiting on a future settled by another task", function()
    local f = async.future()
    local waiter = async.run(function() return f:await() * 2 end)
    async.run(function() async.sleep(2) f:resolve(21) end)
    assert.equal(42, waiter:await())
  end)

  it("keeps working when a task awaits inside a foreign coroutine", function()
    local t = async.run(function()
      local co = coroutine.wrap(function() return async.sleep(5) end)
      return co()
    end)
    assert.is_true(t:await())
  end)

  it("wraps a function so callers block or suspend transparently", function()
    local double = async.wrap(function(x) async.sleep(1) return x * 2 end)
    assert.equal(8, double(4))
    assert.equal(6, helpers.run(function() return double(3) end))
  end)
end)
