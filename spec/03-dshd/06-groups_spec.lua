-- Process groups (extensions process-groups, group-signals, quiescence):
-- "group": true signals reach grandchildren while a plain signal reaches the
-- leader only (as envd); SIGTERM with graceMs escalates to SIGKILL for a
-- grandchild that ignores TERM, not before; GroupStatus and WatchGroup report
-- quiescence only once the group is empty; the extra signals act as named.
local async = require "dsh.async"
local D = require "helpers.dshd"
local helpers = require "helpers"
local loop = require "dsh.core.loop"

describe("dshd process groups", function()
  local S = D.use_sandbox()

  -- Is pid alive inside the sandbox (kill -0 from another process there)?
  local function alive(c, pid)
    local p = assert(c:start { cmd = "/bin/bash", args = { "-c", "kill -0 " .. pid .. " 2>/dev/null" } })
    local r = assert(p:wait())
    p:close()
    return r.exit_code == 0
  end

  -- What ps says of pid (its field, e.g. "args" or "stat"), trailing newline removed.
  local function ps(c, pid, field)
    local p = assert(c:start { cmd = "ps", args = { "-o", field .. "=", "-p", tostring(pid) } })
    local out = assert(p:wait()).stdout
    p:close()
    return (out:gsub("%s+$", ""))
  end

  -- Start `script` (whose first output line is a grandchild's pid); returns
  -- the process stream and that pid.
  local function start_tree(c, script, opts)
    local o = { cmd = "/bin/bash", args = { "-c", script } }
    for k, v in pairs(opts or {}) do o[k] = v end
    local p = assert(c:start(o))
    local out = ""
    while not out:find("\n") do
      local ev = assert(p:next())
      assert.equal("data", ev.type)
      out = out .. ev.data
    end
    return p, assert(tonumber(out:match("^(%d+)\n")))
  end

  it("reaches grandchildren with group=true; without it only the leader", function()
    helpers.run(function()
      local c = S:test_client()
      assert.is_true(c:has("group-signals") and c:has("process-groups") and c:has("quiescence"))
      -- leader-only SIGTERM: the grandchild survives in the group
      local p, gc = start_tree(c, "sleep 300 >/dev/null 2>&1 & echo $!; wait")
      assert.is_true(alive(c, gc))
      assert(c:send_signal(p.pid, "SIGTERM"))
      local r = assert(p:wait())
      assert.equal("signal: terminated", r.status)
      p:close()
      assert.is_true(alive(c, gc))
      assert.same({ leader_exited = true, quiescent = false }, assert(c:group_status(p.pid)))
      -- the group outlives its leader and can still be signalled as a whole
      assert(c:send_signal(p.pid, "SIGKILL", { group = true }))
      assert.is_truthy(helpers.eventually(function() return assert(c:group_status(p.pid)).quiescent end, 5000))
      assert.is_false(alive(c, gc))

      -- group SIGTERM: leader and grandchild both go
      local q, gc2 = start_tree(c, "sleep 300 >/dev/null 2>&1 & echo $!; wait")
      assert(c:send_signal(q.pid, "SIGTERM", { group = true }))
      assert.equal("signal: terminated", assert(q:wait()).status)
      q:close()
      assert.is_truthy(helpers.eventually(function() return assert(c:group_status(q.pid)).quiescent end, 5000))
      assert.is_false(alive(c, gc2))
      c:close()
    end)
  end)

  it("escalates SIGTERM to SIGKILL after graceMs for a grandchild that ignores TERM", function()
    helpers.run(function()
      local c = S:test_client()
      local p, gc = start_tree(c, "bash -c 'trap \"\" TERM; exec sleep 300' >/dev/null 2>&1 & echo $!; wait")
      -- once the grandchild has installed its trap and exec'd
      assert.is_truthy(helpers.eventually(function() return ps(c, gc, "args") == "sleep 300" end, 30000, 20))
      local t0 = loop.now_ms()
      assert(c:send_signal(p.pid, "SIGTERM", { group = true, grace_ms = 3000 }))
      assert.equal("signal: terminated", assert(p:wait()).status)
      p:close()
      -- inside the grace period the grandchild is still there
      async.sleep(300)
      assert.same({ leader_exited = true, quiescent = false }, assert(c:group_status(p.pid)))
      assert.is_true(alive(c, gc))
      assert.is_truthy(helpers.eventually(function() return assert(c:group_status(p.pid)).quiescent end, 30000))
      local took = loop.now_ms() - t0
      assert.is_true(took >= 2950 and took < 30000, "quiescent after " .. took .. " ms")
      assert.is_false(alive(c, gc))
      c:close()
    end)
  end)

  it("does not escalate when the group is gone within graceMs", function()
    helpers.run(function()
      local c = S:test_client()
      local p = assert(c:start { cmd = "sleep", args = { "300" } })
      local t0 = loop.now_ms()
      assert(c:send_signal(p.pid, "SIGTERM", { group = true, grace_ms = 60000 }))
      local r = assert(p:wait())
      -- TERM did it: no SIGKILL was needed
      assert.same({ "signal: terminated", "SIGTERM" }, { r.status, r.signal })
      assert.is_truthy(helpers.eventually(function() return assert(c:group_status(p.pid)).quiescent end, 30000))
      assert.is_true(loop.now_ms() - t0 < 30000, "quiescent at the grace's end, not before it")
      p:close()
      c:close()
    end)
  end)

  it("WatchGroup reports each change and ends only once the group is empty", function()
    helpers.run(function()
      local c = S:test_client()
      local p, gc = start_tree(c, "sleep 300 >/dev/null 2>&1 & echo $!; read x", { stdin = true })
      local w = assert(c:watch_group(p.pid))
      assert.same({ leader_exited = false, quiescent = false }, assert(w:next()))
      assert.same({ leader_exited = false, quiescent = false }, assert(c:group_status(p.pid)))
      assert(c:send_stdin(p.pid, "\n")) -- the leader exits; the grandchild stays
      assert.same({ leader_exited = true, quiescent = false }, assert(w:next()))
      assert.equal(0, assert(p:wait()).exit_code)
      p:close()
      async.sleep(200)
      assert.same({ leader_exited = true, quiescent = false }, assert(c:group_status(p.pid)))
      assert.is_true(alive(c, gc))
      assert(c:send_signal(p.pid, "SIGKILL", { group = true }))
      assert.same({ leader_exited = true, quiescent = true }, assert(w:next()))
      local last, err = w:next()
      assert.is_nil(last)
      assert.is_nil(err) -- a clean end of stream
      w:close()
      assert.same({ leader_exited = true, quiescent = true }, assert(c:group_status(p.pid)))
      -- a watch opened on an empty group says so at once and ends
      local w2 = assert(c:watch_group(p.pid))
      assert.same({ leader_exited = true, quiescent = true }, assert(w2:next()))
      assert.is_nil(w2:next())
      w2:close()
      c:close()
    end)
  end)

  it("sends SIGINT, SIGHUP, SIGQUIT, SIGTSTP and SIGCONT as named", function()
    helpers.run(function()
      local c = S:test_client()
      for _, case in ipairs {
        { "SIGINT", "signal: interrupt", 2 },
        { "SIGHUP", "signal: hangup", 1 },
        { "SIGQUIT", "signal: quit", 3 },
      } do
        local p = assert(c:start { cmd = "sleep", args = { "300" } })
        assert(c:send_signal(p.pid, case[1], { group = true }))
        local r = assert(p:wait())
        assert.same({ case[2], case[1], false }, { r.status, r.signal, r.exited }, case[1])
        p:close()
      end
      -- TSTP stops the group, CONT resumes it: a counter stands still, then moves on
      local p = assert(c:start { cmd = "/bin/bash",
        args = { "-c", "for i in $(seq 1 1000); do echo $i; sleep 0.01; done" } })
      local function last_line()
        local out = ""
        repeat
          local ev = assert(p:next())
          out = out .. ev.data
        until out:sub(-1) == "\n"
        return tonumber(out:match("(%d+)\n$"))
      end
      last_line()
      assert(c:send_signal(p.pid, "SIGTSTP", { group = true }))
      assert.is_truthy(helpers.eventually(function() return ps(c, p.pid, "stat"):match("^T") end, 30000, 20),
        "the group did not stop")
      assert(c:send_signal(p.pid, "SIGCONT", { group = true }))
      local a = last_line()
      local b = last_line()
      assert.is_true(b > a)
      assert(c:send_signal(p.pid, "SIGKILL", { group = true }))
      p:wait()
      p:close()
      c:close()
    end)
  end)
end)
