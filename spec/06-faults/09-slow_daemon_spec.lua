-- A sandbox whose dshd answers a byte a second, or whose path forwards
-- nothing (issue 18, item 2): the context's client reaches dshd through the
-- fault proxy (spec/fixtures/fault-proxy.mjs), which trickles one byte a
-- second each way, or stalls (every call, unary or stream, never answered).
-- Bytes that keep coming do not hold the host: every provider's call ends
-- within its timeout and 2 s (a call without one once a probe goes
-- unanswered) with SANDBOX_UNRESPONSIVE naming the sandbox, later calls
-- fail at once, calls work again once the path does, and dispose ends
-- within 5 s, killing the sandbox through its supervisor. Nothing is left.
local D = require "helpers.dshd"
local F = require "06-faults.support"
local T = require "06-faults.deadlines"
local helpers = require "helpers"

local function with_proxy(mode, fn)
  helpers.run(function()
    local ctx = F.compose()
    local id = ctx.e2b:sandboxId()
    local fault = T.proxied(ctx, mode)
    local ok, err = xpcall(fn, debug.traceback, ctx, fault)
    if not ok then
      fault.resume()
      ctx:dispose()
    end
    fault.close()
    if not ok then
      require("dsh.sandbox").kill(id)
      error(err, 0)
    end
  end)
end

describe("a sandbox that answers a byte a second, or not at all", function()
  D.use_state()

  it("a byte a second: every provider's call ends within its deadline naming the sandbox; dispose in 5 s",
    function()
      with_proxy("trickle 1 1000", function(ctx, fault)
        T.each_provider(ctx, fault, T.prepare(ctx))
        T.dispose(ctx, fault)
      end)
    end)

  it("nothing answered (unary calls and streams alike): every provider's call ends within its deadline; "
    .. "dispose in 5 s", function()
    with_proxy("stall", function(ctx, fault)
      T.each_provider(ctx, fault, T.prepare(ctx))
      T.dispose(ctx, fault)
    end)
  end)
end)
