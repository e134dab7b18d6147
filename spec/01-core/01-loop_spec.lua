local F = require "dsh.core._ffi"
local loop = require "dsh.core.loop"
local async = require "dsh.async"
local helpers = require "helpers"

describe("dsh.core.loop", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("fires timers in order on the one loop", function()
    local fired = {}
    local a = loop.timer(function() fired[#fired + 1] = "a" end)
    local b = loop.timer(function() fired[#fired + 1] = "b" end)
    a:start(20)
    b:start(5)
    while #fired < 2 do loop.step(-1) end
    a:close()
    b:close()
    assert.same({ "b", "a" }, fired)
  end)

  it("repeats a timer until stopped", function()
    local n = 0
    local t = loop.timer(function() n = n + 1 end)
    t:start(1, 1)
    while n < 5 do loop.step(-1) end
    t:close()
    assert.equal(5, n)
  end)

  it("returns after the timeout when nothing happens", function()
    local t = loop.timer(function() end)
    t:start(10000)
    local before = loop.now_ms()
    assert.equal(0, loop.step(20))
    assert.is_true(loop.now_ms() - before >= 15)
    t:close()
  end)

  it("reports that nothing can arrive when no watcher is active", function()
    assert.is_nil(loop.step(-1))
  end)

  it("hands out unique increasing ids", function()
    local a, b = loop.new_id(), loop.new_id()
    assert.is_true(b > a)
  end)

  it("tracks live objects until they close", function()
    local t = loop.timer(function() end)
    assert.equal(1, loop.live().timer)
    t:close()
    t:close()
    assert.is_nil(loop.live().timer)
  end)

  it("keeps running when a handler raises, and reports the error", function()
    local seen
    local old = async.on_unhandled(function(err) seen = err end)
    local t = loop.timer(function() error("handler broke") end)
    t:start(1)
    loop.step(-1)
    t:close()
    async.on_unhandled(old)
    assert.matches("handler broke", seen)
  end)

  it("delivers a watched signal as an event instead of its default action", function()
    local got
    local w = loop.on_signal(15, function(n) got = n end)
    os.execute("kill -TERM " .. helpers.pid())
    while not got do loop.step(-1) end
    w:close()
    assert.equal(15, got)
  end)

  it("mirrors the core status catalogue", function()
    for name, code in pairs { OK = 0, EINVAL = -1, EAGAIN = -3, ELIMIT = -4, ESTATE = -18, EEOF = -19 } do
      assert.equal(name, (F.status(code)))
    end
    assert.equal(-18, loop.ESTATE)
  end)
end)
