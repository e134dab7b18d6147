-- A slow or stalled network path (issue 14, Faults): a proxy between the
-- client and the sandbox's dshd (spec/fixtures/fault-proxy.mjs, over the
-- unix socket) trickles every byte or forwards nothing. Through a trickle,
-- requests and streams complete intact; through a stall, a request ends
-- with deadline_exceeded naming the call at its deadline, nothing hangs, and
-- the client works again once the path does. A stream or a /files transfer on
-- a stalled path ends "unavailable" ("connection stalled: ...") within a
-- bound (3x its stall limit: the machine is shared), while a path that is
-- slow but moving, an idle stream kept alive by the daemon's pings, and a
-- reader that does not read for a while (backpressure, not a stall) go on.
-- The client's probes (dsh.envd._watch, spec/06-faults/08) are off where a
-- test is about a request's own deadline or a stall limit; where they are
-- on, a call that waits for a first answer on a stalled path ends
-- SANDBOX_UNRESPONSIVE as soon as a probe goes unanswered.
local async = require "dsh.async"
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local F = require "06-faults.support"
local helpers = require "helpers"
local loop = require "dsh.core.loop"

local function proxy(S)
  local px = F.proxy(S.unix_socket)
  finally(function() px.stop() end) -- also when the test fails
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
      -- stall limits below the test's length: a trickle must not trip them
      -- (though on a loaded machine it may pause for a second or two)
      local c = S:client { unix_socket = px.path, request_timeout_ms = 20000, keepalive_s = 2,
        files_stall_timeout_ms = 5000 }
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
        -- no probes: each request's own deadline ends it
        local c = S:client { unix_socket = px.path, request_timeout_ms = 1000, probe_timeout_ms = 0 }
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

  -- A stalled error: code, message (naming the call and the limit), bound.
  local function assert_stalled(err, call, limit_ms, t0)
    local ms = loop.now_ms() - t0
    assert.is_table(err)
    assert.equal("unavailable", err.code)
    assert.equal("envd unreachable: " .. call .. " (unix socket " .. helpers.state_dir .. "/fault-proxy.sock): "
      .. "connection stalled: nothing received or sent for " .. limit_ms .. " ms", err.message)
    assert.equal(limit_ms, err.stall_ms)
    assert.is_true(ms < 3 * limit_ms, string.format("noticed after %.0f ms", ms))
  end

  it("a stream on a path that stalls ends unavailable within 3x its limit (3 keepalive intervals); "
    .. "the wait for a stream's first answer ends SANDBOX_UNRESPONSIVE once a probe goes unanswered", function()
    helpers.run(function()
      local px = proxy(S)
      local c = S:client { unix_socket = px.path, keepalive_s = 1 } -- streams stall after 3000 ms
      local p = assert(c:start { cmd = "/bin/bash", args = { "-c", "while :; do echo x; sleep 0.2; done" } })
      local ev = assert(p:next())
      assert.equal("x\n", ev.data)
      px.set("stall")
      local t0 = loop.now_ms()
      local err
      repeat -- lines already on their way arrive first
        ev, err = p:next()
      until not ev
      assert_stalled(err, "POST http://localhost/process.Process/Start", 3000, t0)
      -- a stream started on the stalled path: its first answer never comes, nor
      -- does the probe's (the standing stream above rode the stall out until its limit)
      t0 = loop.now_ms()
      local q, qerr = c:start { cmd = "/bin/true" }
      local ms = loop.now_ms() - t0
      assert.is_nil(q)
      assert.same({ "SANDBOX_UNRESPONSIVE", "envd at unix socket " .. px.path .. " is unresponsive: its daemon did "
        .. "not answer a health check within 1500 ms; gave up on POST /process.Process/Start after " },
        { qerr.code, qerr.message:match("^(.* after )%d+ ms$") })
      assert.is_true(ms < 3000, string.format("noticed after %.0f ms", ms))
      px.set("pass")
      assert(c:health()) -- an answered health check ends that state
      assert(c:send_signal(p.pid, "SIGKILL")) -- the path works again; the loop ends
      p:close()
      c:close()
      px.stop()
    end)
  end)

  it("dsh.core.http: a request whose path stalls ends HTTP_STALLED with its limit; a bad limit is misuse", function()
    helpers.run(function()
      local px = proxy(S)
      local client = require("dsh.core.http").client()
      px.set("stall")
      local t0 = loop.now_ms()
      local res, err = client:request { url = "http://localhost/health", unix_socket = px.path,
        stall_timeout_ms = 500 }
      local ms = loop.now_ms() - t0
      assert.is_nil(res)
      assert.same({ "HTTP_STALLED", 500 }, { err.code, err.stall_ms })
      assert.equal("GET http://localhost/health (unix socket " .. px.path .. "): connection stalled: "
        .. "nothing received or sent for 500 ms", err.message)
      assert.is_true(ms < 1500, string.format("noticed after %.0f ms", ms))
      assert.error_matches(function() client:request { url = "http://localhost/", stall_timeout_ms = -1 } end,
        "dsh.core.http: request: stall_timeout_ms: expected an integer from 0 to", nil, true)
      client:close()
      px.stop()
    end)
  end)

  it("an idle stream outlives its stall limit: the daemon's keepalives count", function()
    helpers.run(function()
      local c = S:client { keepalive_s = 1 } -- a 3000 ms limit; 4 s without output
      local p = assert(c:start { cmd = "/bin/bash", args = { "-c", "sleep 4; echo done" } })
      local r = assert(p:wait())
      assert.same({ 0, "done\n" }, { r.exit_code, r.stdout })
      p:close()
      c:close()
    end)
  end)

  it("a /files download and upload on a path that stalls mid-transfer end unavailable within 3x the limit",
    function()
      helpers.run(function()
        local px = proxy(S)
        -- no probes: the stall limit ends each transfer
        local c = S:client { unix_socket = px.path, files_stall_timeout_ms = 1000, probe_timeout_ms = 0 }
        local text = string.rep("0123456789abcdef", 4 * 65536) -- 4 MiB: more than the client buffers
        assert(c:write_file("/home/user/stall-down.bin", text))
        -- a trickle first, so the file waits in the proxy rather than in flight when the path stalls
        px.set("trickle 4096 10")
        local r = assert(c:open_file("/home/user/stall-down.bin"))
        assert(r:read())
        px.set("stall")
        local t0 = loop.now_ms()
        local chunk, err
        repeat
          chunk, err = r:read()
        until not chunk
        assert_stalled(err, "GET http://localhost/files?path=/home/user/stall-down.bin&username=user", 1000, t0)
        r:close()
        px.set("pass")
        -- an upload whose source goes on while the path stalls after its first MiB
        local n = 0
        local ok, uerr = c:write_file("/home/user/stall-up.bin", function()
          n = n + 1
          if n == 2 then
            px.set("stall")
            t0 = loop.now_ms()
          end
          if n <= 8 then return string.rep(string.char(64 + n), 1024 * 1024) end
        end)
        assert.is_nil(ok)
        assert_stalled(uerr, "POST http://localhost/files?path=/home/user/stall-up.bin&username=user", 1000, t0)
        px.set("pass")
        assert(c:stat("/home/user")) -- the path works again
        c:close()
        px.stop()
      end)
    end)

  it("a reader that pauses for 3x the stall limit resumes without error (a full buffer is not a stall)",
    function()
      helpers.run(function()
        local c = S:client { files_stall_timeout_ms = 500 }
        local text = string.rep("fedcba9876543210", 4 * 65536) -- 4 MiB
        assert(c:write_file("/home/user/paused.bin", text))
        local r = assert(c:open_file("/home/user/paused.bin"))
        local parts = { assert(r:read()) }
        async.sleep(1500)
        while true do
          local chunk, err = r:read()
          assert.is_nil(err)
          if not chunk then break end
          parts[#parts + 1] = chunk
        end
        assert.equal(text, table.concat(parts))
        r:close()
        -- a process stream too: 8 MiB of output, nothing read for 1500 ms, a 500 ms limit
        local p = assert(c:start { cmd = "/bin/bash", args = { "-c", "head -c 8388608 /dev/zero | tr '\\0' z" },
          stall_timeout_ms = 500 })
        async.sleep(1500)
        local res = assert(p:wait())
        assert.equal(0, res.exit_code)
        assert.equal(string.rep("z", 8388608), res.stdout)
        p:close()
        c:close()
      end)
    end)
end)
