-- Process streams and clients that behave unusually (issue 7, item 13): a
-- client that half-closes its socket after the request (it will send
-- nothing more, but still reads) gets the whole stream, end event and
-- end-of-stream envelope included; a client that stopped reading does not
-- hold the output back from a second client for more than a moment (it
-- falls behind and, with the replay extension, sees the gap in offsets),
-- while a single slow client still loses nothing; and a client that really
-- went away is still noticed at once. In a real local sandbox.
local async = require "dsh.async"
local D = require "helpers.dshd"
local helpers = require "helpers"
local sock = require "helpers.socket"
local json = require "dsh.json"
local loop = require "dsh.core.loop"


--- Opens a Start stream on a raw socket; returns the fd and the pid from
-- the start event (the rest of the socket's bytes are not read).
local function raw_start(addr, token, cmd, args, shut_wr)
  local fd = sock.open(addr)
  local req = D.request("POST", "/process.Process/Start", { "X-Access-Token: " .. token,
    "Content-Type: application/connect+json" },
    D.envelope(0, json.encode { process = { cmd = cmd, args = args } }))
  sock.send(fd, req)
  if shut_wr then sock.shutdown_write(fd) end -- SHUT_WR: the client sends nothing more
  local got = ""
  while not got:find('"pid":%d+') do got = got .. assert(sock.recv_some(fd, 5000), "no start event") end
  return fd, tonumber(got:match('"pid":(%d+)')), got
end

describe("dshd process streams and unusual clients", function()
  local S = D.use_sandbox()
  local addr
  setup(function()
    addr = S:addr()
  end)

  it("a client that half-closes after the request gets the whole stream and its end", function()
    helpers.run(function()
      local fd, _, got = raw_start(addr, S.token, "/bin/sh", { "-c", "sleep 1; echo done" }, true)
      local parts = { got }
      while true do
        local b = sock.recv_some(fd, 8000)
        if not b or b == "" then break end
        parts[#parts + 1] = b
      end
      sock.close(fd)
      local st, _, body = D.parse_response(table.concat(parts))
      assert.equal(200, st)
      local envs = D.envelopes(assert(body, "the chunked body did not end"))
      local last = envs[#envs]
      assert.same({ flags = 2, msg = {} }, last)
      local ev = envs[#envs - 1].msg.event
      assert.same({ exited = true, status = "exit status 0" }, ev["end"])
      local out = {}
      for _, e in ipairs(envs) do
        if e.msg.event and e.msg.event.data then out[#out + 1] = e.msg.event.data.stdout end
      end
      assert.equal("ZG9uZQo=", table.concat(out))
    end)
  end)

  it("a client that stopped reading does not starve a second Connect", function()
    helpers.run(function()
      local c = S:test_client()
      local fd, pid = raw_start(addr, S.token, "/bin/sh", { "-c", "while :; do head -c 65536 /dev/zero; done" })
      async.sleep(500) -- the first client's socket and the replay ring fill up
      local p = assert(c:connect(pid))
      local ev = D.within(5000, "data for the second client", function()
        while true do
          local e = assert(p:next())
          if e.type == "data" then return e end
        end
      end)
      assert.equal("stdout", ev.stream)
      assert(c:send_signal(pid, "SIGKILL", { group = true }))
      p:close()
      sock.close(fd)
    end)
  end)

  it("a single client that reads slowly loses nothing", function()
    helpers.run(function()
      local c = S:test_client()
      local total = 8 * 1048576
      local p = assert(c:start { cmd = "head", args = { "-c", tostring(total), "/dev/zero" } })
      async.sleep(2500) -- nobody reads: the process is held back, not its output dropped
      local n = 0
      while true do
        local e, err = p:next()
        assert.is_nil(err)
        if not e then break end
        if e.type == "data" then n = n + #e.data end
      end
      assert.equal(total, n)
      assert.equal(0, p.result.exit_code)
      p:close()
    end)
  end)

  it("a client that closes its socket is still noticed at once (bare dshd with an idle timeout)", function()
    helpers.run(function()
      local d = D.bare({ "--idle-timeout-ms", "1500" }, { token = "t0k" })
      finally(function() d.stop() end)
      -- a half-closed client is alive: its stream keeps dshd from being idle
      local fd = raw_start(d.addr, "t0k", "sleep", { "300" }, true)
      async.sleep(2500)
      assert.is_true(helpers.pid_alive(d.proc.pid), "dshd went idle under a half-closed client's stream")
      -- closed (everything it was sent read, so only a FIN): noticed, and dshd goes idle
      sock.close(fd)
      local t = loop.now_ms()
      local st = D.within(6000, "dshd's idle exit", function() return d.proc:wait() end)
      assert.equal(3, st.exit_code)
      assert.is_true(loop.now_ms() - t < 4000)
      -- the same for a client that never half-closed: its end of file is noticed at once
      d.stop()
      d = D.bare({ "--idle-timeout-ms", "1500" }, { token = "t0k" })
      fd = raw_start(d.addr, "t0k", "sleep", { "300" })
      sock.close(fd)
      t = loop.now_ms()
      st = D.within(6000, "dshd's idle exit", function() return d.proc:wait() end)
      assert.equal(3, st.exit_code)
      assert.is_true(loop.now_ms() - t < 3000)
    end)
  end)
end)
