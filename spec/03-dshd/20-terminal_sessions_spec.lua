-- dshd's terminal-sessions extension on a PTY process in a sandbox: it is
-- advertised; GroupStatus names the terminal's foreground process group and
-- SendSignal "foreground" reaches that group (a shell's running job) and
-- answers its pgid; SendSignal "session" reaches every group of the session
-- (a background job of the shell); quiescence waits for the whole session,
-- not only the leader's group. A process without a terminal is refused.
local D = require "helpers.dshd"
local async = require "dsh.async"
local helpers = require "helpers"

describe("dshd terminal sessions", function()
  local S = D.use_sandbox()

  -- Read pty output until it holds `want` (plain), for at most 10 s.
  local function read_until(p, want, acc)
    return D.within(10000, "waiting for " .. ("%q"):format(want), function()
      acc = acc or ""
      while not acc:find(want, 1, true) do
        local ev, err = p:next()
        assert(ev, "stream ended before " .. want .. " (have " .. ("%q"):format(acc) .. "): " .. tostring(err))
        if ev.type == "data" then acc = acc .. ev.data end
      end
      return acc
    end)
  end

  local function shell(c)
    local p = assert(c:start { cmd = "/bin/bash", args = { "--norc", "--noprofile", "-i" },
      envs = { PS1 = "PROMPT> ", TERM = "dumb" }, pty = { rows = 24, cols = 200 } })
    return p, read_until(p, "PROMPT> ")
  end

  it("is advertised", function()
    helpers.run(function()
      local c = S:test_client()
      assert.is_true(assert(c:health()).extensions["terminal-sessions"])
    end)
  end)

  it("names and signals the terminal's foreground job", function()
    helpers.run(function()
      local c = S:test_client()
      local p, out = shell(c)
      assert.equal(p.pid, assert(c:group_status(p.pid)).foreground_pgid) -- the shell, at its prompt
      -- the job says when it runs (the sum is not in the echoed input): a
      -- SIGINT sent earlier could reach the shell's fork before it reset the
      -- shell's handlers, and be lost
      assert(c:send_pty(p.pid, "sh -c 'echo job-$((6*7)); exec sleep 300'\n"))
      out = read_until(p, "job-42", out)
      local fg = helpers.eventually(function()
        local g = assert(c:group_status(p.pid)).foreground_pgid
        return g ~= p.pid and g
      end, 5000)
      assert.is_truthy(fg, "the job never became the foreground group")
      assert.equal(fg, assert(c:signal_terminal(p.pid, "SIGINT", { foreground = true })))
      assert(c:send_pty(p.pid, "echo rc=$?\n"))
      out = read_until(p, "rc=130", out)
      read_until(p, "PROMPT> ", out:match("rc=130(.*)$"))
      assert.equal(p.pid, assert(c:group_status(p.pid)).foreground_pgid)
      assert(c:send_signal(p.pid, "SIGKILL", { group = true }))
      p:close()
    end)
  end)

  it("waits for the session's other groups and signals them all", function()
    helpers.run(function()
      local c = S:test_client()
      local p, out = shell(c)
      assert(c:send_pty(p.pid, "(trap '' TERM HUP; exec sleep 300) & echo job=$!\n"))
      out = read_until(p, "PROMPT> ", read_until(p, "job=", out):match("job=.*$"))
      local job = assert(tonumber(out:match("job=(%d+)")))
      -- the leader's group goes; the job (a group of its own, the same session) stays
      assert(c:send_signal(p.pid, "SIGKILL", { group = true }))
      p:close()
      assert.is_truthy(helpers.eventually(function() return assert(c:group_status(p.pid)).leader_exited end, 5000))
      async.sleep(300)
      local st = assert(c:group_status(p.pid))
      assert.is_false(st.quiescent, "quiescent while job " .. job .. " of the session runs")
      assert.is_true(assert(c:signal_terminal(p.pid, "SIGKILL", { session = true })))
      assert.is_truthy(helpers.eventually(function() return assert(c:group_status(p.pid)).quiescent end, 5000))
      local probe = assert(c:start { cmd = "/bin/sh", args = { "-c", "kill -0 " .. job .. " 2>/dev/null; echo $?" } })
      assert.equal("1\n", assert(probe:wait()).stdout)
      probe:close()
    end)
  end)

  it("refuses a process without a terminal", function()
    helpers.run(function()
      local c = S:test_client()
      local p = assert(c:start { cmd = "sleep", args = { "300" } })
      local ok, err = c:signal_terminal(p.pid, "SIGINT", { foreground = true })
      assert.is_nil(ok)
      assert.same({ "failed_precondition", "process " .. p.pid .. " has no terminal" }, { err.code, err.message })
      ok, err = c:signal_terminal(p.pid, "SIGKILL", { session = true })
      assert.is_nil(ok)
      assert.equal("failed_precondition", err.code)
      assert.is_nil(assert(c:group_status(p.pid)).foreground_pgid)
      assert(c:send_signal(p.pid, "SIGKILL", { group = true }))
      p:close()
    end)
  end)
end)
