-- Many streams at once against one dshd: 50 processes started and read
-- concurrently (one task each, one shared client) all complete with their
-- exact stdout, stderr and exit code, while unary calls and /files requests
-- keep being answered in between.
local async = require "dsh.async"
local D = require "helpers.dshd"
local helpers = require "helpers"

local N = 50
local LINES = 2000

local function expected(k, prefix)
  local t = {}
  for i = 1, LINES do t[i] = prefix .. k .. ":" .. i .. "\n" end
  return table.concat(t)
end

describe("dshd concurrency", function()
  local S = D.use_sandbox()

  it("completes 50 concurrent output streams exactly", function()
    helpers.run(function()
      local c = S:test_client()
      local tasks = {}
      for k = 1, N do
        tasks[k] = async.run(function()
          local script = string.format(
            "for i in $(seq 1 %d); do echo o%d:$i; echo e%d:$i >&2; [ $((i %% 500)) = 0 ] && sleep 0.01; done; exit %d",
            LINES, k, k, k % 7)
          local p = assert(c:start { cmd = "/bin/bash", args = { "-c", script } })
          local r = assert(p:wait())
          p:close()
          return r
        end)
      end
      -- unary calls and /files while the streams run
      local side = async.run(function()
        local n = 0
        for i = 1, 20 do
          assert(c:list())
          assert(c:write_file("/tmp/conc/" .. i, tostring(i)))
          assert.equal(tostring(i), assert(c:read_file("/tmp/conc/" .. i)))
          n = n + 1
        end
        assert(c:remove("/tmp/conc"))
        return n
      end)
      local results = async.all(tasks)
      assert.equal(20, side:await())
      for k = 1, N do
        local r = results[k]
        assert.equal(expected(k, "o"), r.stdout, "stdout of process " .. k)
        assert.equal(expected(k, "e"), r.stderr, "stderr of process " .. k)
        assert.equal(k % 7, r.exit_code, "exit code of process " .. k)
      end
      c:close()
    end)
  end)

  it("serves each stream on its own connection: a stalled one does not block the others", function()
    helpers.run(function()
      local c = S:test_client()
      -- a stream nobody reads, with a producer that fills every buffer
      local stalled = assert(c:start { cmd = "/bin/bash", args = { "-c", "yes stalled | head -c 50000000" } })
      local others = {}
      for k = 1, 10 do
        others[k] = async.run(function()
          local p = assert(c:start { cmd = "/bin/echo", args = { "fine-" .. k } })
          local r = assert(p:wait())
          p:close()
          return r.stdout
        end)
      end
      local outs = D.within(10000, "the other streams", function() return async.all(others) end)
      for k = 1, 10 do assert.equal("fine-" .. k .. "\n", outs[k]) end
      -- the stalled one still delivers everything once read
      local n = 0
      while true do
        local ev = assert(stalled:next())
        if ev.type == "end" then break end
        n = n + #ev.data
      end
      assert.equal(50000000, n)
      stalled:close()
      c:close()
    end)
  end)
end)
