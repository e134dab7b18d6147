-- A client that stops reading a large stream (issue 14, Faults): dshd holds
-- the producer back instead of buffering, so its memory (RSS, sampled on the
-- host through /proc) stays bounded however long the client stalls, other
-- clients are still served meanwhile, and the stream goes on intact once
-- the client reads again. Through ctx.subprocess (the host's pipe is bounded
-- too) and with raw sockets that never read past the start event.
local async = require "dsh.async"
local D = require "helpers.dshd"
local F = require "06-faults.support"
local helpers = require "helpers"
local json = require "dsh.json"
local output = require "dsh.subprocess._output"
local sock = require "helpers.socket"

-- dshd idles at ~6 MiB and keeps a 1 MiB replay ring per process
-- (spec/03-dshd/03-large_output_spec.lua measures 7.5-9.5 MiB under one stream).
local RSS_BOUND_KIB = 32 * 1024
local STALL_MS = 3000

-- VmRSS of this process in KiB.
local function own_rss_kib()
  return tonumber(helpers.read_file("/proc/self/status"):match("VmRSS:%s*(%d+)"))
end

describe("a client that stops reading a large stream", function()
  D.use_state()

  it("through ctx.subprocess: dshd and the host stay bounded; reading again resumes the stream", function()
    helpers.run(function()
      local ctx = F.compose()
      local id = ctx.e2b:sandboxId()
      local pid = assert(D.dshd_pid(id))
      local h = assert(ctx.subprocess:spawn { argv = { "cat", "/dev/zero" } })
      assert.equal(string.rep("\0", 10), assert(h.stdout:read()):sub(1, 10)) -- it streams
      local host0 = own_rss_kib()
      local rss = D.rss_sampler(pid, 20)
      async.sleep(STALL_MS) -- nobody reads
      local peak, samples = rss.stop()
      assert.is_true(samples >= 20, "only " .. samples .. " RSS samples")
      assert.is_true(peak < RSS_BOUND_KIB, "dshd peak RSS " .. peak .. " KiB while the client stalled")
      assert.is_true(h.stdout._bytes <= output.HIGH_WATER + 1048576,
        "the host's pipe holds " .. h.stdout._bytes .. " bytes")
      assert.is_true(own_rss_kib() - host0 < 64 * 1024, "the host grew while not reading")
      -- dshd serves other calls meanwhile
      assert.equal(0, assert(ctx.bash:run { command = "true" }).exitCode)
      -- reading again: 32 MiB more, all zeros
      local n = 0
      while n < 32 * 1048576 do
        local chunk = assert(h.stdout:read())
        assert.is_nil(chunk:find("[^%z]"))
        n = n + #chunk
      end
      h.stdout:close() -- read no more (else the pump waits on the full pipe for ever)
      h:terminate()
      local r = h.done:await()
      assert.equal("SIGTERM", r.signal)
      assert.is_true(h:waitForExit())
      F.dispose(ctx)
    end)
  end)

  it("eight raw clients that never read past the start event: dshd stays bounded and serves a ninth", function()
    helpers.run(function()
      local S = D.sandbox()
      local pid = assert(D.dshd_pid(S.id))
      local c = S:client()
      local fds, pids = {}, {}
      local rss = D.rss_sampler(pid, 20)
      for i = 1, 8 do
        local fd = sock.open(S:addr())
        fds[i] = fd
        sock.send(fd, D.request("POST", "/process.Process/Start", { "X-Access-Token: " .. S.token,
          "Content-Type: application/connect+json" },
          D.envelope(0, json.encode { process = { cmd = "/bin/cat", args = { "/dev/zero" } } })))
        local got = ""
        while not got:find('"pid":%d+') do got = got .. assert(sock.recv_some(fd, 5000), "no start event") end
        pids[i] = tonumber(got:match('"pid":(%d+)'))
      end
      async.sleep(STALL_MS)
      -- a ninth client is served at once
      local p = assert(c:start { cmd = "/bin/echo", args = { "served" } })
      local out = {}
      while true do
        local ev = assert(p:next())
        if ev.type == "end" then break end
        out[#out + 1] = ev.data
      end
      p:close()
      assert.equal("served\n", table.concat(out))
      local peak, samples = rss.stop()
      assert.is_true(samples >= 20, "only " .. samples .. " RSS samples")
      assert.is_true(peak < RSS_BOUND_KIB + 8 * 1024, "dshd peak RSS " .. peak .. " KiB under 8 stalled clients")
      -- a stalled client reads again: the stream goes on
      local more = assert(sock.recv_some(fds[1], 5000))
      assert.is_true(#more > 0)
      for i, fd in ipairs(fds) do
        sock.close(fd)
        assert(c:send_signal(pids[i], "SIGKILL", { group = true }))
      end
      assert.is_truthy(helpers.eventually(function() return #assert(c:list()) == 0 end, 5000))
      c:close()
      S:kill()
    end)
  end)
end)
