-- What dshd keeps of processes that have exited (issue 7 item 10, issue 9
-- §6): a record (end event, replay rings, tag) stays for late Connects for
-- --exited-ttl-ms, and all records together hold at most --exited-max-bytes
-- (rings go first, oldest first); the argument vector and environment of a
-- process are let go when it exits. So RSS returns near idle once records
-- expire, however many arguments or how much output there was.
local D = require "helpers.dshd"
local helpers = require "helpers"

local MIB = 1048576

describe("dshd memory for exited processes", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  local function run_to_end(c, opts)
    local p = assert(c:start(opts))
    local r = assert(p:wait())
    p:close()
    return r, p.pid
  end

  it("lets go of argument vectors when processes exit (sandbox)", function()
    helpers.isolate_state()
    local S = D.sandbox()
    finally(function()
      S:kill()
      helpers.restore_state()
    end)
    helpers.run(function()
      local pid = assert(D.dshd_pid(S.id))
      local c = S:client()
      run_to_end(c, { cmd = "true" })
      require("dsh.async").sleep(2500) -- a sweep hands warm-up garbage back
      local before = assert(D.rss_kib(pid))
      local args = {}
      for i = 1, 100000 do args[i] = "x" end
      for _ = 1, 20 do
        local r = run_to_end(c, { cmd = "true", args = args, tag = ("t"):rep(100000) })
        assert.equal(0, r.exit_code)
      end
      -- the records are still there (a late Connect by tag works), their argv is not
      local st = assert(D.open_stream(c, "/process.Process/Connect", { process = { tag = ("t"):rep(100000) } }))
      D.drain(st)
      c:close()
      local after -- once a sweep has run (2.5 s here; the ceiling is for a loaded machine)
      helpers.eventually(function()
        after = assert(D.rss_kib(pid))
        return after - before < 24 * 1024
      end, 2500, 100)
      assert.is_true(after - before < 24 * 1024,
        string.format("RSS grew from %.1f to %.1f MiB", before / 1024, after / 1024))
    end)
  end)

  it("drops an exited process's record after --exited-ttl-ms", function()
    helpers.run(function()
      local d = D.bare({ "--exited-ttl-ms", "1000" }, { token = "t0k" })
      local c = d.client()
      finally(function()
        c:close()
        d.stop()
      end)
      local _, pid = run_to_end(c, { cmd = "echo", args = { "kept" }, tag = "short-lived" })
      local p = assert(c:connect(pid, { resume = { stdout = 0 } }))
      local r = assert(p:wait())
      p:close()
      assert.equal("kept\n", r.stdout)
      local gone = helpers.eventually(function()
        local q, err = c:connect(pid)
        if q then q:close() end
        return not q and err
      end, 3000)
      assert.same({ "not_found", "process with pid " .. pid .. " not found" }, { gone.code, gone.message })
      local q, err = D.open_stream(c, "/process.Process/Connect", { process = { tag = "short-lived" } })
      assert.is_nil(q)
      assert.same({ "not_found", "process with tag short-lived not found" }, { err.code, err.message })
    end)
  end)

  it("keeps at most --exited-max-bytes of output for exited processes, newest first", function()
    helpers.run(function()
      local d = D.bare({ "--exited-max-bytes", tostring(3 * MIB), "--replay-bytes", tostring(MIB) }, { token = "t0k" })
      local c = d.client()
      finally(function()
        c:close()
        d.stop()
      end)
      local pids = {}
      for i = 1, 6 do
        local _, pid = run_to_end(c, { cmd = "head", args = { "-c", tostring(MIB), "/dev/zero" } })
        pids[i] = pid
      end
      local function retained(pid)
        local s, start = D.open_stream(c, "/process.Process/Connect", { process = { pid = pid },
          resume = { stdout = 0 } })
        D.drain(s)
        return MIB - start.replay.stdout.from
      end
      -- the oldest lost their output (their end events remain), the newest kept all of it
      assert.equal(0, retained(pids[1]))
      assert.equal(0, retained(pids[2]))
      assert.equal(MIB, retained(pids[6]))
      assert.equal(MIB, retained(pids[5]))
    end)
  end)

  it("returns to about its idle RSS once 50 streams' records expire", function()
    helpers.run(function()
      local d = D.bare({ "--exited-ttl-ms", "1000" }, { token = "t0k" })
      local c = d.client()
      finally(function()
        c:close()
        d.stop()
      end)
      local pid = d.proc.pid
      run_to_end(c, { cmd = "true" })
      local async = require "dsh.async"
      async.sleep(1500)
      local idle = assert(D.rss_kib(pid))
      local tasks = {}
      for i = 1, 50 do
        tasks[i] = async.run(function()
          local ci = d.client()
          local r = run_to_end(ci, { cmd = "head", args = { "-c", tostring(MIB), "/dev/zero" } })
          ci:close()
          return r.exit_code
        end)
      end
      for i = 1, 50 do assert.equal(0, tasks[i]:await()) end
      local held = assert(D.rss_kib(pid))
      local after -- expiry, then a sweep trims the heap (3 s here; the ceiling is for a loaded machine)
      helpers.eventually(function()
        after = assert(D.rss_kib(pid))
        return after - idle < 8 * 1024
      end, 3000, 100)
      assert.is_true(after - idle < 8 * 1024, string.format("idle %.1f MiB, with 50 records %.1f MiB, after "
        .. "expiry %.1f MiB", idle / 1024, held / 1024, after / 1024))
    end)
  end)
end)
