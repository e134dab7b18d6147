-- A slow or stalled network path (issue 14, Faults): a proxy between the
-- client and the sandbox's dshd (spec/fixtures/fault-proxy.mjs, over the
-- unix socket) trickles every byte or forwards nothing. Through a trickle,
-- requests and streams complete intact; through a stall, a request ends
-- with deadline_exceeded naming the call at its deadline, nothing hangs, and
-- the client works again once the path does.
local async = require "dsh.async"
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local helpers = require "helpers"
local loop = require "dsh.loop"
local proc = require "dsh.proc"
local sys = require "dsh.sysutil"

-- The proxy in front of sandbox S: {path=, set(command), stop()}.
local function proxy(S)
  local path = helpers.state_dir .. "/fault-proxy.sock"
  local p = assert(proc.spawn { argv = { assert(sys.which("node")), helpers.root .. "/spec/fixtures/fault-proxy.mjs",
    path, S.unix_socket }, env = { PATH = os.getenv("PATH") }, stdin = "pipe" })
  assert.equal("ready\n", p:read())
  local stopped = false
  local px
  px = {
    path = path,
    set = function(command)
      assert(p:write(command .. "\n"))
      assert.equal("ok\n", p:read())
    end,
    stop = function()
      if stopped then return end
      stopped = true
      p:close_stdin()
      p:wait()
      p:close()
    end,
  }
  return px
end

local function lines(n)
  local t = {}
  for i = 1, n do t[i] = tostring(i) end
  return table.concat(t, "\n") .. "\n"
end

describe("a slow or stalled path to dshd", function()
  local S = D.use_sandbox()

  it("through a trickle (4 KiB per 10 ms each way): files, a command's output and a stream arrive intact", function()
    helpers.run(function()
      local px = proxy(S)
      local c = S:client { unix_socket = px.path, request_timeout_ms = 20000 }
      local ctx = helpers.start_context {
        (E.envd_owner(c, "/home/user/trickle")), require "dsh.providers.fs_e2b",
        require "dsh.providers.subprocess_e2b",
      }
      px.set("trickle 4096 10")
      local text = string.rep("0123456789abcdef", 16384) -- 256 KiB
      assert(ctx.fs:writeText("big.txt", text))
      assert.equal(text, assert(ctx.fs:readText("big.txt")).text)
      local h = assert(ctx.subprocess:spawn { argv = { "seq", "1", "30000" },
        stdio = { stdout = { maxBytes = 1000000 } } })
      local r = assert(h.done:await())
      assert.equal(0, r.exitCode)
      assert.equal(lines(30000), h.stdout:readFrom(0).text)
      assert(c:write_file("/home/user/trickle/raw.bin", text)) -- a /files upload
      assert.equal(text, assert(c:read_file("/home/user/trickle/raw.bin")))
      assert(ctx:dispose())
      px.stop()
    end)
  end)

  it("through a stall: a request ends deadline_exceeded at its deadline; the stream waits and loses nothing",
    function()
      helpers.run(function()
        local px = proxy(S)
        local c = S:client { unix_socket = px.path, request_timeout_ms = 1000 }
        local p = assert(c:start { cmd = "/bin/bash",
          args = { "-c", "for i in $(seq 1 20); do echo $i; sleep 0.05; done" } })
        px.set("stall")
        local t0 = loop.now_ms()
        local r, err = c:stat("/home/user")
        local ms = loop.now_ms() - t0
        assert.is_nil(r)
        assert.equal("deadline_exceeded", err.code)
        assert.matches("^POST http://localhost/filesystem%.Filesystem/Stat %(unix socket .*fault%-proxy%.sock%): "
          .. "Operation timed out after %d+ milliseconds with 0 bytes received$", err.message)
        assert.is_true(ms >= 1000 and ms < 2000, string.format("timed out after %.0f ms", ms))
        r, err = c:list_dir("/home/user") -- the next one too, on a new connection
        assert.same({ "deadline_exceeded" }, { err.code, r })
        async.sleep(500)
        px.set("pass")
        -- the stream went on: every line, once, in order
        local out = {}
        while true do
          local ev = assert(p:next())
          if ev.type == "end" then
            assert.equal(0, ev.exit_code)
            break
          end
          out[#out + 1] = ev.data
        end
        assert.equal(lines(20), table.concat(out))
        assert(c:stat("/home/user")) -- the path works again
        p:close()
        c:close()
        px.stop()
      end)
    end)
end)
