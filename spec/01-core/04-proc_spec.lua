local proc = require "dsh.core.proc"
local async = require "dsh.async"
local loop = require "dsh.core.loop"
local helpers = require "helpers"
local lfs = require "lfs"

local has_utf8, utf8 = pcall(require, "dsh.core.utf8")

local ENV = { PATH = "/usr/bin:/bin" }

-- Every proc a test starts is closed after it, even when the test fails.
local opened = {}
local function spawn(opts)
  local p, err = proc.spawn(opts)
  if p then opened[#opened + 1] = p end
  return p, err
end

local function sh(script, extra)
  local o = { argv = { "/bin/sh", "-c", script }, env = ENV }
  for k, v in pairs(extra or {}) do o[k] = v end
  return assert(spawn(o))
end

-- Our children that are zombies (nobody reaped them).
local function zombies()
  local me, list = helpers.pid(), {}
  for name in lfs.dir("/proc") do
    if name:match("^%d+$") then
      local f = io.open("/proc/" .. name .. "/stat")
      if f then
        local stat = f:read("*l") or ""
        f:close()
        local state, ppid = stat:match("^%d+ %b() (%a) (%d+)")
        if state == "Z" and tonumber(ppid) == me then list[#list + 1] = tonumber(name) end
      end
    end
  end
  return list
end

-- Reads p's output until it contains needle (plain); returns all of it.
local function read_until(p, needle)
  local got = ""
  while not got:find(needle, 1, true) do
    local chunk = p:read()
    if not chunk then break end
    got = got .. chunk
  end
  return got
end

describe("dsh.core.proc", function()
  before_each(helpers.snapshot)
  after_each(function()
    for _, p in ipairs(opened) do p:close() end
    opened = {}
    local clean = helpers.eventually(function() return #zombies() == 0 end, 5000, 5)
    assert(clean, "zombies left: " .. table.concat(zombies(), ", "))
    assert.equal(0, proc.live_count())
    helpers.assert_clean()
  end)

  describe("spawn", function()
    it("runs a program and reports its output and exit code", function()
      helpers.run(function()
        local p = assert(spawn { argv = { "echo", "hello", "world" }, env = ENV })
        assert.is_true(p.pid > 0)
        assert.equal("hello world\n", p:read_all())
        assert.same({ exit_code = 0, core_dumped = false }, p:wait())
        assert.is_true(p:wait_quiescent())
        assert.is_true(p:quiescent())
        assert.matches("^dsh.core.proc %d+ %(exited 0%)$", tostring(p))
      end)
    end)

    it("reports exit codes and stderr separately", function()
      helpers.run(function()
        local p = sh("echo out; echo err >&2; exit 7")
        assert.equal("out\n", p:read_all("stdout"))
        assert.equal("err\n", p:read_all("stderr"))
        local r = p:wait()
        assert.equal(7, r.exit_code)
        assert.is_nil(r.signal)
        local st = p:status()
        assert.is_false(st.running)
        assert.is_true(st.stdout_eof and st.stderr_eof)
        assert.equal(4, st.stdout_bytes)
      end)
    end)

    it("passes exactly the given environment, nothing inherited", function()
      helpers.run(function()
        local p = assert(spawn { argv = { "/usr/bin/env" }, env = { B = "two words", A = 1 } })
        assert.equal("A=1\nB=two words\n", p:read_all())
        p:close()
        local q = assert(spawn { argv = { "/usr/bin/env" } })
        assert.equal("", q:read_all())
      end)
    end)

    it("looks argv[1] up in the PATH of env, not ours", function()
      helpers.run(function()
        local p = assert(spawn { argv = { "fixture-trickle", "ok", "0" },
          env = { PATH = "/nonexistent:" .. helpers.build .. "/bin" } })
        assert.equal("ok", p:read_all())
        local q, err = spawn { argv = { "fixture-trickle" }, env = ENV }
        assert.is_nil(q)
        assert.equal('spawn "fixture-trickle": No such file or directory', err.message)
      end)
    end)

    it("runs in the given cwd and its own process group", function()
      helpers.run(function()
        local dir = helpers.tmpdir()
        finally(function() helpers.rm_rf(dir) end)
        local p = sh("pwd; ps -o pgid= -p $$", { cwd = dir })
        local out = p:read_all()
        assert.equal(dir .. "\n" .. p.pid, out:gsub("%s+$", ""):gsub("\n%s+", "\n"))
        assert.equal(0, p:wait().exit_code)
      end)
    end)

    it("fails with a clear error for a bad program or cwd", function()
      local p, err = spawn { argv = { "/nope" }, env = ENV }
      assert.is_nil(p)
      assert.equal("PROC_SPAWN_FAILED", err.code)
      assert.equal('spawn "/nope": No such file or directory', err.message)
      assert.equal('PROC_SPAWN_FAILED: spawn "/nope": No such file or directory', tostring(err))

      p, err = spawn { argv = { "true" }, env = ENV, cwd = "/nonexistent-dir" }
      assert.is_nil(p)
      assert.equal("PROC_SPAWN_FAILED", err.code)
      assert.equal('spawn: cwd "/nonexistent-dir": No such file or directory', err.message)

      p, err = spawn { argv = { "/etc/passwd" } }
      assert.is_nil(p)
      assert.equal('spawn "/etc/passwd": Permission denied', err.message)
      assert.same({}, zombies())
    end)

    it("raises on misuse, naming the module", function()
      assert.has_error(function() spawn { argv = {} } end,
        "dsh.core.proc: spawn: argv must be a non-empty list of strings")
      assert.has_error(function() spawn { argv = { "a", 3 } } end,
        "dsh.core.proc: spawn: argv must be a non-empty list of strings")
      assert.has_error(function() spawn { argv = { "true" }, stdout = "file" } end,
        'dsh.core.proc: spawn: stdout must be "pipe", "null" or "inherit", got file')
      assert.has_error(function() spawn { argv = { "true" }, stout = "pipe" } end,
        'dsh.core.proc: spawn: unknown option "stout"')
      assert.has_error(function() spawn { argv = { "true" }, env = { ["A=B"] = "x" } } end,
        'dsh.core.proc: spawn: env name "A=B" is not a valid variable name')
      local p = assert(spawn { argv = { "true" }, stdout = "null" })
      assert.has_error(function() p:read() end, "dsh.core.proc: read: stdout is not a pipe")
      assert.has_error(function() p:write("x") end, "dsh.core.proc: write: stdin is not a pipe")
      assert.has_error(function() p:signal("NOPE") end, "dsh.core.proc: signal: unknown signal NOPE")
      assert.has_error(function() p:resize(10, 10) end, "dsh.core.proc: resize: the proc has no pty")
      p:close()
      p:close()
      assert.has_error(function() p:wait() end, "dsh.core.proc: wait: the proc is closed")
      assert.is_true(p:status().closed)
      assert.matches("closed%)$", tostring(p))
    end)
  end)

  describe("stdio", function()
    it("round-trips binary data with every byte value through stdin", function()
      helpers.run(function()
        local bytes = {}
        for i = 0, 255 do bytes[#bytes + 1] = string.char(i) end
        local block = table.concat(bytes)
        local data = block:rep(1000) -- 256000 bytes: more than the pipes and buffers hold
        local p = assert(spawn { argv = { "cat" }, env = ENV, stdin = "pipe", max_buffer_bytes = 16384 })
        local writer = async.run(function()
          for i = 1, #data, 100000 do assert(p:write(data:sub(i, i + 99999))) end
          assert.is_true(p:status().stdin_pending <= 16384)
          p:close_stdin()
          p:close_stdin()
        end)
        local out = p:read_all()
        writer:await()
        assert.equal(#data, #out)
        assert.is_true(out == data)
        assert.equal(0, p:wait().exit_code)
        assert.is_false(p:status().stdin_open)
      end)
    end)

    it("reports a broken stdin as an error, not a raise", function()
      helpers.run(function()
        local p = sh("exec 0<&-; exit 0", { stdin = "pipe" })
        p:wait()
        local ok, err = p:write(("x"):rep(200000))
        assert.is_nil(ok)
        assert.equal("PROC_STDIN_CLOSED", err.code)
        ok, err = p:write("more")
        assert.is_nil(ok)
        assert.equal("PROC_STDIN_CLOSED", err.code)
        -- a reader that leaves while write waits for the backlog to drain
        local q = assert(spawn { argv = { "head", "-c", "1" }, env = ENV, stdin = "pipe",
          stdout = "null" })
        ok, err = q:write(("y"):rep(1000000))
        assert.is_nil(ok)
        assert.equal("PROC_STDIN_CLOSED", err.code)
        assert.equal(0, q:wait().exit_code)
      end)
    end)

    it("gives stdin /dev/null by default", function()
      helpers.run(function()
        local p = assert(spawn { argv = { "cat" }, env = ENV })
        assert.equal("", p:read_all())
        assert.equal(0, p:wait().exit_code)
      end)
    end)

    it("moves 50 MB intact through a bounded buffer", function()
      helpers.run(function()
        local line = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\n"
        local n = 50 * 1000 * 1000
        local p = sh("yes 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ | head -c " .. n)
        local parts, biggest = {}, 0
        while true do
          local chunk = p:read()
          if not chunk then break end
          if #chunk > biggest then biggest = #chunk end
          parts[#parts + 1] = chunk
        end
        local out = table.concat(parts)
        assert.equal(n, #out)
        assert.is_true(biggest <= 65536)
        local want = line:rep(math.ceil(n / #line)):sub(1, n)
        assert.is_true(out == want, "output differs from the expected pattern")
        assert.equal(0, p:wait().exit_code)
        assert.equal(n, p:status().stdout_bytes)
      end)
    end)

    it("stops reading while the buffer is full (back-pressure)", function()
      helpers.run(function()
        local p = assert(spawn { argv = { "head", "-c", "1000000", "/dev/zero" }, env = ENV,
          max_buffer_bytes = 4096 })
        assert.is_truthy(helpers.eventually(function() return p:status().stdout_bytes >= 4096 end, 5000, 5))
        async.sleep(50) -- head keeps writing into the pipe, but we take nothing more
        local st = p:status()
        assert.equal(4096, st.stdout_bytes)
        assert.is_true(st.running)
        assert.equal(1000000, #p:read_all())
        assert.equal(0, p:wait().exit_code)
      end)
    end)
  end)

  describe("signals and termination", function()
    it("signals the whole group, reaching a grandchild", function()
      helpers.run(function()
        local p = sh("sleep 30 & echo $!; wait")
        local gpid = tonumber(read_until(p, "\n"))
        assert.is_true(helpers.pid_alive(gpid))
        assert.is_true(p:signal("TERM"))
        assert.equal("SIGTERM", p:wait().signal)
        assert.is_true(p:wait_quiescent())
        assert.is_false(helpers.pid_alive(gpid))
      end)
    end)

    it("signals only the leader when asked", function()
      helpers.run(function()
        local p = sh("sleep 30 & echo $!; wait")
        local gpid = tonumber(read_until(p, "\n"))
        assert.is_true(p:signal(10, false)) -- SIGUSR1
        assert.equal("SIGUSR1", p:wait().signal)
        async.sleep(20)
        assert.is_true(helpers.pid_alive(gpid))
        assert.is_false(p:quiescent())
        assert.is_true(p:signal("SIGKILL"))
        assert.is_true(p:wait_quiescent())
        assert.is_false(helpers.pid_alive(gpid))
      end)
    end)

    it("escalates to KILL for a grandchild that ignores TERM, and is quiescent only then", function()
      helpers.run(function()
        -- the leader exits at once; the orphan ignores TERM and reports its pid
        local p = sh([[(trap '' TERM; exec sh -c 'echo $$; exec sleep 30') & exit 0]])
        local gpid = tonumber(read_until(p, "\n"))
        assert.equal(0, p:wait().exit_code)
        assert.is_false(p:quiescent())
        local grace = 2000
        local t0 = loop.now_ms()
        assert.is_true(p:terminate(grace))
        local probe = async.run(function()
          async.sleep(grace / 10) -- well inside the grace, however slow the machine
          return helpers.pid_alive(gpid), p:quiescent(), p:status().kill_sent
        end)
        assert.is_true(p:wait_quiescent())
        local elapsed = loop.now_ms() - t0
        local alive_mid, quiet_mid, kill_mid = probe:await()
        assert.is_true(alive_mid, "the grandchild should survive TERM")
        assert.is_false(quiet_mid)
        assert.is_false(kill_mid)
        assert.is_true(elapsed >= grace - 5, "quiescent after " .. elapsed .. " ms")
        local st = p:status()
        assert.is_true(st.term_requested)
        assert.is_true(st.kill_sent)
        assert.is_true(st.quiescent)
        assert.is_false(helpers.pid_alive(gpid))
      end)
    end)

    it("terminates idempotently without restarting the grace", function()
      helpers.run(function()
        local p = assert(spawn { argv = { "sleep", "30" }, env = ENV })
        assert.is_true(p:terminate(5000))
        assert.is_true(p:terminate(0))
        assert.equal("SIGTERM", p:wait().signal)
        assert.is_true(p:wait_quiescent())
        assert.is_true(p:terminate(0))
        assert.is_false(p:status().kill_sent)
      end)
    end)

    it("stops waiting when an abort signal fires", function()
      helpers.run(function()
        local p = assert(spawn { argv = { "sleep", "30" }, env = ENV })
        local ctl = async.controller()
        local t = loop.timer(function() ctl:abort("enough") end)
        t:start(30)
        local r, err = p:wait(ctl.signal)
        t:close()
        assert.is_nil(r)
        assert.equal("ABORTED", err.code)
        assert.equal("enough", err.message)
        assert.is_true(p:status().running)
        local ok, err2 = p:wait_quiescent(ctl.signal)
        assert.is_false(ok)
        assert.equal("ABORTED", err2.code)
      end)
    end)

    it("kills the group when a running proc is closed, and wakes its waiters", function()
      helpers.run(function()
        local p = sh("sleep 30 & echo $!; wait")
        local gpid = tonumber(read_until(p, "\n"))
        local waiter = async.run(function() return p:wait() end)
        local reader = async.run(function() return p:read() end)
        async.yield()
        p:close()
        local r, err = waiter:await()
        assert.is_nil(r)
        assert.equal("PROC_CLOSED", err.code)
        local chunk, rerr = reader:await()
        assert.is_nil(chunk)
        assert.equal("PROC_CLOSED", rerr.code)
        assert.is_truthy(helpers.eventually(function()
          return not helpers.pid_alive(gpid) and not helpers.group_alive(p.pid)
        end, 5000, 5))
      end)
    end)
  end)

  describe("pty", function()
    it("delivers multibyte characters split across reads", function()
      helpers.run(function()
        local text = "héllo 你好"
        local p = assert(spawn { argv = { helpers.fixture("trickle"), text, "10" }, env = ENV, pty = {} })
        local chunks, got, split = {}, 0, false
        while true do
          local c = p:read()
          if not c then break end
          chunks[#chunks + 1] = c
          got = got + #c
          -- the next byte is a continuation byte: this read ended inside a character
          local nextb = text:byte(got + 1)
          if nextb and nextb >= 0x80 and nextb < 0xC0 then split = true end
        end
        assert.is_true(split, "no read ended inside a character (" .. #chunks .. " reads)")
        assert.equal(text, table.concat(chunks))
        -- reassembled as text: every piece a stream decoder releases is whole UTF-8
        -- (without dsh.core.utf8, only the bytes above are checked)
        if has_utf8 then
          local dec = utf8.stream()
          local parts = {}
          for _, c in ipairs(chunks) do
            local piece = assert(dec:feed(c))
            assert.is_true(utf8.validate(piece))
            parts[#parts + 1] = piece
          end
          parts[#parts + 1] = assert(dec:finish())
          assert.equal(text, table.concat(parts))
        end
        assert.equal(0, p:wait().exit_code)
      end)
    end)

    it("echoes input through the terminal", function()
      helpers.run(function()
        local p = assert(spawn { argv = { "cat" }, env = ENV, pty = { rows = 24, cols = 80 } })
        assert.is_true(p:write("hello\n"))
        local got = read_until(p, "hello\r\nhello\r\n")
        assert.equal("hello\r\nhello\r\n", got)
        assert.is_true(p:write("\4"))
        assert.equal(0, p:wait().exit_code)
        assert.has_error(function() p:close_stdin() end,
          'dsh.core.proc: close_stdin: a pty has no separate stdin (write "\\4" for end of file)')
        assert.has_error(function() p:read("stderr") end,
          "dsh.core.proc: read: stderr is not a pipe (a pty has only stdout)")
      end)
    end)

    it("interrupts the foreground job with Ctrl-C", function()
      helpers.run(function()
        local p = assert(spawn { argv = { "sleep", "30" }, env = ENV, pty = true })
        assert.is_true(p:write("\3"))
        assert.equal("SIGINT", p:wait().signal)
        assert.is_true(p:wait_quiescent())
      end)
    end)

    it("resizes the window", function()
      helpers.run(function()
        local p = sh("stty size; read x; stty size", { pty = { rows = 24, cols = 80 } })
        assert.matches("24 80\r\n", read_until(p, "24 80\r\n"), 1, true)
        assert.is_true(p:resize(40, 100))
        assert.is_true(p:write("\n"))
        local out = p:read_all()
        assert.matches("40 100\r\n", out, 1, true)
        assert.equal(0, p:wait().exit_code)
      end)
    end)
  end)

  it("works outside a task too (REPL style)", function()
    local p = assert(spawn { argv = { "echo", "repl" }, env = ENV })
    assert.equal("repl\n", p:read_all())
    assert.equal(0, p:wait().exit_code)
    p:close()
  end)

  it("leaves no zombie behind", function()
    helpers.run(function()
      local list = {}
      for i = 1, 5 do
        list[#list + 1] = sh("exit " .. i)
        list[#list + 1] = sh("sleep 30 & sleep 30")
        assert.is_nil((spawn { argv = { "/nope" } }))
      end
      for _, p in ipairs(list) do p:close() end
      assert.is_truthy(helpers.eventually(function() return #zombies() == 0 end, 5000, 5))
    end)
  end)
end)
