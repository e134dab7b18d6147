-- PTYs on dshd in a sandbox: the kernel's echo of typed input, Ctrl-D as end
-- of file, Ctrl-C (0x03) interrupting `sleep` (alone, and inside an
-- interactive bash that survives it), the initial size and Update's resize
-- as `stty size` sees them, and stdout/stderr merged into the pty stream.
local D = require "helpers.dshd"
local helpers = require "helpers"
local loop = require "dsh.core.loop"

describe("dshd PTYs", function()
  local S = D.use_sandbox()

  -- Read pty events until the collected output contains `want` (a plain
  -- string), for at most 10 s; returns everything collected. Fails on any
  -- other event.
  local function read_until(p, want, acc)
    return D.within(10000, "waiting for " .. ("%q"):format(want), function()
      acc = acc or ""
      while not acc:find(want, 1, true) do
        local ev, err = p:next()
        assert(ev, "stream ended before " .. want .. " (have " .. ("%q"):format(acc) .. "): " .. tostring(err))
        assert.equal("data", ev.type, "before " .. want .. ": " .. ("%q"):format(acc))
        assert.equal("pty", ev.stream)
        acc = acc .. ev.data
      end
      return acc
    end)
  end

  -- The rest of the stream: the output and the end event.
  local function finish(p, acc)
    return D.within(10000, "waiting for the end", function()
      acc = acc or ""
      while true do
        local ev = assert(p:next())
        if ev.type == "end" then return acc, ev end
        acc = acc .. ev.data
      end
    end)
  end

  it("echoes typed input, and Ctrl-D ends the input", function()
    helpers.run(function()
      local c = S:test_client()
      local p = assert(c:start { cmd = "cat", pty = { rows = 24, cols = 80 } })
      assert(c:send_pty(p.pid, "abc\n"))
      -- the terminal echoes the line (ONLCR: \r\n), then cat prints it back
      local out = read_until(p, "abc\r\nabc\r\n")
      assert.equal("abc\r\nabc\r\n", out)
      assert(c:send_pty(p.pid, "\4"))
      local rest, ev = finish(p)
      assert.equal("", rest)
      assert.same({ 0, "exit status 0" }, { ev.exit_code, ev.status })
      p:close()
      c:close()
    end)
  end)

  it("delivers Ctrl-C as SIGINT to the foreground sleep", function()
    helpers.run(function()
      local c = S:test_client()
      local t0 = loop.now_ms()
      local p = assert(c:start { cmd = "/bin/bash", args = { "-c", "echo ready; exec sleep 30" },
        pty = { rows = 24, cols = 80 } })
      read_until(p, "ready\r\n")
      assert(c:send_pty(p.pid, "\3"))
      local _, ev = finish(p)
      assert.same({ -1, false, "signal: interrupt", "SIGINT" }, { ev.exit_code, ev.exited, ev.status, ev.signal })
      assert.is_true(loop.now_ms() - t0 < 10000)
      p:close()
      c:close()
    end)
  end)

  it("interrupts a command in an interactive shell, which keeps running", function()
    helpers.run(function()
      local c = S:test_client()
      local t0 = loop.now_ms()
      local p = assert(c:start { cmd = "/bin/bash", args = { "--norc", "--noprofile", "-i" },
        envs = { PS1 = "PROMPT> ", TERM = "dumb" }, pty = { rows = 24, cols = 80 } })
      local out = read_until(p, "PROMPT> ")
      assert(c:send_pty(p.pid, "echo st''arted; sleep 30; echo not-''reached\n"))
      out = read_until(p, "started\r\n", out)
      -- Ctrl-C must find sleep as the terminal's foreground job ("+" in ps's
      -- STAT), not bash between two commands
      assert.is_truthy(helpers.eventually(function()
        local ps = assert(c:start { cmd = "ps", args = { "-C", "sleep", "-o", "stat=" } })
        local r = assert(ps:wait())
        ps:close()
        return r.stdout:find("+", 1, true)
      end, 5000))
      assert(c:send_pty(p.pid, "\3"))
      assert(c:send_pty(p.pid, "echo rc=$?\n"))
      out = read_until(p, "rc=130", out)
      assert(c:send_pty(p.pid, "exit 0\n"))
      out = finish(p, out)
      assert.is_nil(out:find("not-reached", 1, true))
      assert.is_true(loop.now_ms() - t0 < 10000)
      p:close()
      c:close()
    end)
  end)

  it("starts with the requested size and resizes with Update", function()
    helpers.run(function()
      local c = S:test_client()
      local p = assert(c:start { cmd = "/bin/bash", args = { "-c", "stty size; read x; stty size; read x; stty size" },
        pty = { rows = 24, cols = 80 } })
      local out = read_until(p, "24 80\r\n")
      assert(c:update_pty(p.pid, 40, 100))
      assert(c:send_pty(p.pid, "\n"))
      out = read_until(p, "40 100\r\n", out)
      assert(p:resize(7, 33))
      assert(c:send_pty(p.pid, "\n"))
      local rest, ev = finish(p, out)
      assert.equal("24 80\r\n\r\n40 100\r\n\r\n7 33\r\n", rest)
      assert.equal(0, ev.exit_code)
      p:close()
      c:close()
    end)
  end)

  it("merges stdout and stderr into the pty stream, and SIGKILL ends it", function()
    helpers.run(function()
      local c = S:test_client()
      local p = assert(c:start { cmd = "/bin/bash", args = { "-c", "echo out; echo err >&2; exec sleep 30" },
        pty = { rows = 24, cols = 80 } })
      local out = read_until(p, "out\r\nerr\r\n")
      assert.equal("out\r\nerr\r\n", out)
      assert(p:kill())
      local rest, ev = finish(p)
      assert.equal("", rest)
      assert.same({ "signal: killed", "SIGKILL" }, { ev.status, ev.signal })
      p:close()
      c:close()
    end)
  end)
end)
