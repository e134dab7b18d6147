-- The envd client's own deadlines (dsh.envd._watch; issue 18, item 2), on a
-- real sandbox's dshd behind the fault proxy (spec/fixtures/fault-proxy.mjs):
-- a call on a silent path ends once a probe goes unanswered; later calls fail
-- at once with the same code, one each RETRY_MS asks again, and an answered
-- probe ends the state; a standing stream rides the stall out; a stream with
-- a deadline ends by it and the grace though bytes keep coming; a /files
-- download that trickles ends; abandon() ends everything, standing streams
-- too, for good; the client's label names the sandbox in every error.
local async = require "dsh.async"
local D = require "helpers.dshd"
local F = require "06-faults.support"
local envd = require "dsh.envd"
local errors = require "dsh.errors"
local helpers = require "helpers"
local loop = require "dsh.core.loop"

local PROBED = "is unresponsive: its daemon did not answer a health check within " .. envd.PROBE_TIMEOUT_MS .. " ms"

local function lines(n)
  local t = {}
  for i = 1, n do t[i] = tostring(i) end
  return table.concat(t, "\n") .. "\n"
end

describe("the envd client's own deadlines", function()
  local S = D.use_sandbox()

  it("a silent path: the call ends once a probe goes unanswered, later ones at once, until a probe is answered",
    function()
      helpers.run(function()
        local px = F.proxy(S.unix_socket)
        local c = S:client { unix_socket = px.path, label = "sandbox under test" }
        assert(c:stat("/home/user"))
        px.set("stall")
        local t0 = loop.now_ms()
        local r, err = c:stat("/home/user")
        local ms = loop.now_ms() - t0
        assert.is_nil(r)
        assert.equal("SANDBOX_UNRESPONSIVE", err.code)
        assert.equal("sandbox under test", err.sandbox)
        assert.matches("^sandbox under test " .. PROBED:gsub("%p", "%%%0")
          .. "; gave up on POST /filesystem%.Filesystem/Stat after %d+ ms$", err.message)
        assert.is_true(ms < 3000, string.format("ended after %.0f ms", ms))
        local state = assert(c:unresponsive())
        assert.equal("is unresponsive: its daemon did not answer a health check within 1500 ms", state.why)
        -- later calls, of every kind, fail at once with the same code, not sent
        for _, call in ipairs {
          function() return c:list_dir("/home/user") end,
          function() return c:start { cmd = "/bin/true" } end,
          function() return c:read_file("/home/user/x") end,
          function() return c:write_file("/home/user/x", "x") end,
        } do
          t0 = loop.now_ms()
          r, err = call()
          assert.is_true(loop.now_ms() - t0 < 100, "a later call waited")
          assert.same({ "SANDBOX_UNRESPONSIVE" }, { err.code, r })
          assert.matches("^sandbox under test " .. PROBED:gsub("%p", "%%%0") .. " %(found %d+ ms ago%); "
            .. "[A-Z]+ /[^ ]+ was not sent$", err.message)
        end
        -- the path passes again: within RETRY_MS a call probes, is answered, and goes through
        px.set("pass")
        t0 = loop.now_ms()
        assert(helpers.eventually(function() return c:stat("/home/user") end, 5000))
        assert.is_true(loop.now_ms() - t0 < envd.RETRY_MS + 1000, "no call probed again within RETRY_MS")
        assert.is_nil(c:unresponsive())
        -- a health check that goes unanswered begins the state, an answered one ends it
        px.set("stall")
        r, err = c:health { timeout_ms = 300 }
        assert.same({ "deadline_exceeded" }, { err.code, r })
        assert.equal("is unresponsive: its daemon did not answer a health check within 300 ms", c:unresponsive().why)
        px.set("pass")
        assert(c:health())
        assert.is_nil(c:unresponsive())
        c:close()
        px.stop()
      end)
    end)

  it("holds no unanswered probe against a daemon seen at work on this host, up to BUSY_PROBES in a row", function()
    helpers.run(function()
      local watch = require "dsh.envd._watch"
      local px = F.proxy(S.unix_socket)
      -- the daemon as the host would see it: at work (its CPU time grows), idle, or stopped
      local function client(kind)
        local seen, cpu = 0, 0
        local c = S:client { unix_socket = px.path, probe_timeout_ms = 300, activity = function()
          seen = seen + 1
          if kind == "working" then cpu = cpu + 1 end
          return { cpu = cpu, stopped = kind == "stopped" }
        end }
        return c, function() return seen end
      end
      local cases = {}
      for _, kind in ipairs { "working", "idle", "stopped" } do
        local c, seen = client(kind)
        assert(c:stat("/home/user"))
        cases[kind] = { c = c, seen = seen }
      end
      px.set("stall")
      for kind, k in pairs(cases) do
        local before = k.seen()
        local r, err = k.c:stat("/home/user")
        assert.same({ "SANDBOX_UNRESPONSIVE" }, { err.code, r }, kind)
        -- two looks per probe: when it starts, and when it timed out
        local probes = (k.seen() - before) / 2
        assert.equal(kind == "working" and watch.BUSY_PROBES + 1 or 1, probes, kind)
        k.c:close()
      end
      px.stop()
    end)
  end)

  it("a standing stream rides out a stall that ends the calls waiting for an answer", function()
    helpers.run(function()
      local px = F.proxy(S.unix_socket)
      local c = S:client { unix_socket = px.path }
      local p = assert(c:start { cmd = "/bin/bash",
        args = { "-c", "for i in $(seq 1 20); do echo $i; sleep 0.05; done" } })
      px.set("stall")
      local r, err = c:stat("/home/user")
      assert.same({ "SANDBOX_UNRESPONSIVE" }, { err.code, r })
      px.set("pass")
      local out = {}
      while true do
        local ev = assert(p:next())
        if ev.type == "end" then
          assert.equal(0, ev.exit_code)
          break
        end
        out[#out + 1] = ev.data
      end
      assert.equal(lines(20), table.concat(out)) -- every line, once, in order
      p:close()
      assert(c:health())
      c:close()
      px.stop()
    end)
  end)

  it("a stream with a deadline ends by it and the grace while bytes keep coming a byte a second", function()
    helpers.run(function()
      local px = F.proxy(S.unix_socket)
      local c = S:client { unix_socket = px.path, label = "sandbox under test" }
      local t0 = loop.now_ms()
      local p = assert(c:start { cmd = "/bin/bash", args = { "-c", "while :; do echo tick; sleep 0.2; done" },
        timeout_ms = 1000 })
      px.set("trickle 1 1000")
      local ev, err
      repeat ev, err = p:next() until not ev
      local ms = loop.now_ms() - t0
      assert.same({ "SANDBOX_UNRESPONSIVE", "sandbox under test did not end POST /process.Process/Start by its "
        .. "deadline (1000 ms, and 1000 ms more)" }, { err.code, err.message })
      assert.is_true(ms < 1000 + 2000, string.format("ended after %.0f ms", ms))
      p:close()
      px.set("pass")
      assert(c:health())
      c:close()
      px.stop()
    end)
  end)

  it("a /files download that trickles a byte a second ends once a probe goes unanswered", function()
    helpers.run(function()
      local px = F.proxy(S.unix_socket)
      local c = S:client { unix_socket = px.path, label = "sandbox under test" }
      assert(c:write_file("/home/user/trickled.txt", string.rep("z", 4096)))
      px.set("trickle 1 1000")
      local t0 = loop.now_ms()
      local body, err = c:read_file("/home/user/trickled.txt")
      local ms = loop.now_ms() - t0
      assert.is_nil(body)
      assert.equal("SANDBOX_UNRESPONSIVE", err.code)
      assert.matches("; gave up on GET /files%?path=/home/user/trickled%.txt&username=user after %d+ ms$", err.message)
      assert.is_true(ms < 3000, string.format("ended after %.0f ms", ms))
      px.set("pass")
      assert(c:health())
      assert.equal(string.rep("z", 4096), assert(c:read_file("/home/user/trickled.txt")))
      c:close()
      px.stop()
    end)
  end)

  it("abandon(err) ends every call in flight, standing streams too, and every later call, with err", function()
    helpers.run(function()
      local c = S:client()
      local p = assert(c:start { cmd = "/bin/sleep", args = { "30" } })
      local pending = async.run(function() return p:next() end)
      local gone = errors.new("SANDBOX_UNRESPONSIVE", "sandbox under test: given up")
      c:abandon(gone)
      local ev, err = pending:await()
      assert.is_nil(ev)
      assert.equal(gone, err)
      local r, lerr = c:list()
      assert.same({ gone }, { lerr, r })
      assert.same({ why = "sandbox under test: given up" }, { why = c:unresponsive().why })
      c:close()
      local k = S:client()
      assert(k:send_signal(p.pid, "SIGKILL"))
      k:close()
    end)
  end)
end)
