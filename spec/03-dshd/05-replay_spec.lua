-- The replay extension: a client that disconnects and reconnects with
-- Connect's "resume" offsets gets exactly the bytes that followed (no gap,
-- no duplicate) on stdout, stderr and a PTY, and the start event's "replay"
-- says which range, if any, was dropped — shown with a bare dshd whose
-- --replay-bytes is tiny. Offsets past the end clamp to the end.
local async = require "dsh.async"
local D = require "helpers.dshd"
local helpers = require "helpers"

-- What `numbered(n)` prints: "line-1\n" ... "line-n\n" (stderr: "err-i\n").
local function lines(prefix, n, from)
  local t = {}
  for i = from or 1, n do t[#t + 1] = prefix .. i .. "\n" end
  return table.concat(t)
end

local N = 300
local NUMBERED = "for i in $(seq 1 " .. N .. "); do echo line-$i; echo err-$i >&2; sleep 0.002; done"

-- Read data events from p until stdout holds at least min bytes; returns
-- the bytes per stream and the next offsets.
local function read_some(p, min)
  local got = { stdout = {}, stderr = {} }
  local next_off = { stdout = 0, stderr = 0 }
  while next_off.stdout < min do
    local ev = assert(p:next())
    assert.equal("data", ev.type)
    assert.equal(next_off[ev.stream], ev.offset)
    got[ev.stream][#got[ev.stream] + 1] = ev.data
    next_off[ev.stream] = ev.offset + #ev.data
  end
  return { stdout = table.concat(got.stdout), stderr = table.concat(got.stderr) }, next_off
end

-- Read p to its end; returns the bytes per stream, the first offset seen
-- per stream and the end event.
local function read_rest(p)
  local got, first = { stdout = {}, stderr = {}, pty = {} }, {}
  while true do
    local ev = assert(p:next())
    if ev.type == "end" then
      return { stdout = table.concat(got.stdout), stderr = table.concat(got.stderr), pty = table.concat(got.pty) },
        first, ev
    end
    first[ev.stream] = first[ev.stream] or ev.offset
    got[ev.stream][#got[ev.stream] + 1] = ev.data
  end
end

describe("dshd replay (sandbox)", function()
  local S = D.use_sandbox()

  it("resumes stdout and stderr from the offsets read, with nothing lost or repeated", function()
    helpers.run(function()
      local c = S:test_client()
      assert.is_true(c:has("replay"))
      local p = assert(c:start { cmd = "/bin/bash", args = { "-c", NUMBERED } })
      local part1, off = read_some(p, 400)
      p:close() -- disconnect; the process keeps printing
      async.sleep(150)
      local q = assert(c:connect(p.pid, { resume = { stdout = off.stdout, stderr = off.stderr } }))
      -- nothing was dropped: each stream resumes exactly where it was asked to
      assert.same({ stdout = { requested = off.stdout, from = off.stdout },
        stderr = { requested = off.stderr, from = off.stderr } }, q.replay)
      local part2, first, ev = read_rest(q)
      q:close()
      assert.equal(0, ev.exit_code)
      if #part2.stdout > 0 then assert.equal(off.stdout, first.stdout) end
      assert.equal(lines("line-", N), part1.stdout .. part2.stdout)
      assert.equal(lines("err-", N), part1.stderr .. part2.stderr)
      assert.is_true(#part2.stdout > 0 and #part1.stdout >= 400)
      c:close()
    end)
  end)

  it("resumes several times in a row, and from the start of a PTY", function()
    helpers.run(function()
      local c = S:test_client()
      local p = assert(c:start { cmd = "/bin/bash",
        args = { "-c", "for i in $(seq 1 200); do echo row-$i; sleep 0.003; done" },
        pty = { rows = 24, cols = 80 } })
      local pid, all, off = p.pid, {}, 0
      local cur = p
      for _ = 1, 3 do
        local ev = assert(cur:next())
        assert.same({ "data", "pty", off }, { ev.type, ev.stream, ev.offset })
        all[#all + 1] = ev.data
        off = off + #ev.data
        cur:close()
        cur = assert(c:connect(pid, { resume = { pty = off } }))
        assert.same({ pty = { requested = off, from = off } }, cur.replay)
      end
      local rest, first = read_rest(cur)
      cur:close()
      if #rest.pty > 0 then assert.equal(off, first.pty) end
      local want = lines("row-", 200):gsub("\n", "\r\n")
      assert.equal(want, table.concat(all) .. rest.pty)
      -- the whole retained output again, from offset 0
      local again = assert(c:connect(pid, { resume = { pty = 0 } }))
      assert.same({ pty = { requested = 0, from = 0 } }, again.replay)
      assert.equal(want, (read_rest(again)).pty)
      again:close()
      c:close()
    end)
  end)

  it("clamps offsets beyond the end and sends only what comes next", function()
    helpers.run(function()
      local c = S:test_client()
      local p = assert(c:start { cmd = "/bin/bash", args = { "-c", "echo first; read x; echo second" }, stdin = true })
      local ev = assert(p:next())
      assert.equal("first\n", ev.data)
      p:close()
      local q = assert(c:connect(p.pid, { resume = { stdout = 1000000, stderr = 5 } }))
      assert.same({ stdout = { requested = 1000000, from = 6 }, stderr = { requested = 5, from = 0 } }, q.replay)
      assert(c:send_stdin(p.pid, "\n"))
      local rest, first = read_rest(q)
      q:close()
      assert.same({ "second\n", 6 }, { rest.stdout, first.stdout })
      c:close()
    end)
  end)
end)

describe("dshd replay (bare dshd --replay-bytes 4096)", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("says which range was dropped and replays the retained tail exactly", function()
    helpers.run(function()
      local d = D.bare { "--replay-bytes", "4096" }
      local c = d.client()
      local ok, err = pcall(function()
        -- 100000 bytes: "0123456789abcdef" x 6250, then a marker line, then it waits
        local p = assert(c:start { cmd = "/bin/bash",
          args = { "-c", "yes 0123456789abcde | head -c 100000; read x; echo tail" }, stdin = true })
        p:close() -- nobody reads: the ring keeps the last 4096 bytes
        local q
        assert.is_truthy(helpers.eventually(function()
          -- the output is complete once a resume from 0 starts at 100000 - 4096
          if q then q:close() end
          q = assert(c:connect(p.pid, { resume = { stdout = 0 } }))
          return q.replay.stdout.from == 100000 - 4096
        end, 10000))
        assert.same({ stdout = { requested = 0, from = 95904 }, stderr = { requested = 0, from = 0 } }, q.replay)
        assert(c:send_stdin(p.pid, "\n"))
        local rest, first, ev = read_rest(q)
        q:close()
        assert.equal(0, ev.exit_code)
        assert.equal(95904, first.stdout)
        local unit = "0123456789abcde\n"
        local want = (unit:rep(6250)):sub(95905) .. "tail\n"
        assert.equal(want, rest.stdout)
        -- a later resume from inside the dropped range starts at the ring's start
        local r = assert(c:connect(p.pid, { resume = { stdout = 10 } }))
        assert.same({ requested = 10, from = 100005 - 4096 }, r.replay.stdout)
        assert.equal(want:sub(-4096), (read_rest(r)).stdout)
        r:close()
      end)
      c:close()
      d.stop()
      assert(ok, err)
    end)
  end)
end)
