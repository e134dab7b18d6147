-- Hundreds of megabytes of process output reach the host intact (sha256
-- computed in the sandbox against an incremental sha256 on the host, data
-- event offsets contiguous), while the sandbox's dshd stays within a fixed
-- memory bound: with a fast reader, a slow reader, and nobody attached at all
-- (then only the replay ring's worth is kept, and a late Connect says which
-- bytes were dropped). dshd's RSS is sampled on the host through /proc.
local async = require "dsh.async"
local D = require "helpers.dshd"
local helpers = require "helpers"
local sha256 = require "dsh.core.sha256"

local MB = 1000 * 1000
local RSS_BOUND_KIB = 32 * 1024 -- measured peaks 7.5-9.5 MiB: idle ~6 MiB, a 1 MiB ring per stream
local REPLAY_BYTES = 1048576 -- dshd's default --replay-bytes

describe("dshd large output", function()
  local S = D.use_sandbox()
  local pid
  setup(function()
    pid = assert(D.dshd_pid(S.id), "no dshd below the sandbox's supervisor")
  end)

  -- Run `bytes` of random data through `tee >(sha256sum >&2)`; read every
  -- event (pausing pause_ms after each when given) while sampling dshd's RSS.
  local function transfer(bytes, pause_ms)
    local c = S:test_client()
    local rss = D.rss_sampler(pid, 20)
    local p = assert(c:start { cmd = "/bin/bash",
      args = { "-c", "head -c " .. bytes .. " /dev/urandom | tee >(sha256sum >&2)" } })
    local h, n, events, gaps, stderr = sha256.new(), 0, 0, 0, {}
    while true do
      local ev = assert(p:next())
      if ev.type == "end" then
        assert.same({ 0, "exit status 0" }, { ev.exit_code, ev.status })
        break
      end
      if ev.stream == "stdout" then
        if ev.offset ~= n then gaps = gaps + 1 end
        h:update(ev.data)
        n = n + #ev.data
        events = events + 1
        if pause_ms then async.sleep(pause_ms) end
      else
        stderr[#stderr + 1] = ev.data
      end
    end
    p:close()
    c:close()
    local peak, samples = rss.stop()
    return { bytes = n, events = events, gaps = gaps, host_sha = h:hex(),
      sandbox_sha = table.concat(stderr):match("^(%x+)  %-\n$"), peak = peak, samples = samples }
  end

  it("streams 300 MB intact with dshd's memory bounded", function()
    helpers.run(function()
      local r = transfer(300 * MB)
      assert.equal(300 * MB, r.bytes)
      assert.equal(0, r.gaps)
      assert.is_truthy(r.sandbox_sha)
      assert.equal(r.sandbox_sha, r.host_sha)
      assert.is_true(r.samples >= 20, "only " .. r.samples .. " RSS samples")
      assert.is_true(r.peak < RSS_BOUND_KIB, "dshd peak RSS " .. r.peak .. " KiB")
    end)
  end)

  it("holds the producer back for a slow reader instead of buffering", function()
    helpers.run(function()
      local r = transfer(100 * MB, 4)
      assert.equal(100 * MB, r.bytes)
      assert.equal(0, r.gaps)
      assert.equal(r.sandbox_sha, r.host_sha)
      assert.is_true(r.events >= 100, "only " .. r.events .. " data events")
      assert.is_true(r.peak < RSS_BOUND_KIB, "dshd peak RSS " .. r.peak .. " KiB")
    end)
  end)

  it("keeps only the replay ring when nobody reads, and says what was dropped", function()
    helpers.run(function()
      local c = S:test_client()
      local rss = D.rss_sampler(pid, 20)
      -- a deterministic stream: "abcdefghijklmno\n" repeated
      local total = 200 * MB
      local p = assert(c:start { cmd = "/bin/bash",
        args = { "-c", "yes abcdefghijklmno | head -c " .. total } })
      p:close() -- nobody attached from here on
      assert.is_truthy(helpers.eventually(function() return assert(c:group_status(p.pid)).quiescent end, 60000))
      local peak = rss.stop()
      assert.is_true(peak < RSS_BOUND_KIB, "dshd peak RSS " .. peak .. " KiB")

      local q = assert(c:connect(p.pid, { resume = { stdout = 0 } }))
      local from = total - REPLAY_BYTES
      assert.same({ stdout = { requested = 0, from = from }, stderr = { requested = 0, from = 0 } }, q.replay)
      local got, first_offset = {}, nil
      while true do
        local ev = assert(q:next())
        if ev.type == "end" then
          assert.equal(0, ev.exit_code)
          break
        end
        first_offset = first_offset or ev.offset
        got[#got + 1] = ev.data
      end
      q:close()
      got = table.concat(got)
      assert.equal(from, first_offset)
      assert.equal(REPLAY_BYTES, #got)
      -- the last REPLAY_BYTES bytes of the pattern, starting at its phase
      local unit = "abcdefghijklmno\n"
      local phase = from % #unit
      local want = (unit:sub(phase + 1) .. unit:rep(math.ceil(REPLAY_BYTES / #unit) + 1)):sub(1, REPLAY_BYTES)
      assert.equal(want, got)
      c:close()
    end)
  end)
end)
