-- process.Process on a real dshd in a real local sandbox: every RPC with its
-- error codes and messages, the order of stream events (start first, end
-- last), the end event's values (with the exit-signals extension), stdin,
-- List, Connect fan-out, keepalives and the Connect-Timeout-Ms deadline; then
-- what differs on a bare `dshd --envd-compat` (stock envd behaviour).
local async = require "dsh.async"
local base64 = require "dsh.core.base64"
local D = require "helpers.dshd"
local helpers = require "helpers"
local json = require "dsh.json"
local loop = require "dsh.core.loop"

local START, CONNECT = "/process.Process/Start", "/process.Process/Connect"
local NO_PID = 999999

local function bash(script, extra)
  local msg = { process = { cmd = "/bin/bash", args = { "-c", script } }, stdin = false }
  for k, v in pairs(extra or {}) do msg[k] = v end
  return msg
end

local function pids(list)
  local set = {}
  for _, p in ipairs(list) do set[p.pid] = p end
  return set
end

describe("dshd process service (sandbox)", function()
  local S = D.use_sandbox()

  describe("Start", function()
    it("sends start first, then the output, then end last, and nothing after it", function()
      helpers.run(function()
        local c = S:test_client()
        local s, start = D.open_stream(c, START, bash("echo out; echo err >&2; echo more; exit 3"))
        assert.is_true(type(start.pid) == "number" and start.pid > 1)
        local msgs, err = D.drain(s)
        assert.is_nil(err)
        local kinds = D.kinds(msgs)
        assert.equal("end", kinds[#kinds])
        for i = 1, #kinds - 1 do assert.equal("data", kinds[i]) end
        local out, events = D.output(msgs)
        assert.equal("out\nmore\n", out.stdout)
        assert.equal("err\n", out.stderr)
        -- replay extension: each data event says where its first byte sits in its stream
        local seen = { stdout = 0, stderr = 0 }
        for _, e in ipairs(events) do
          assert.equal(seen[e.stream], e.offset)
          seen[e.stream] = seen[e.stream] + #e.data
        end
        assert.same({ exitCode = 3, exited = true, status = "exit status 3", error = "exit status 3" },
          D.end_event(msgs))
        c:close()
      end)
    end)

    it("reports exit 0 without exitCode or error", function()
      helpers.run(function()
        local c = S:test_client()
        local s = D.open_stream(c, START, bash("exit 0"))
        local msgs, err = D.drain(s)
        assert.is_nil(err)
        assert.same({ "end" }, D.kinds(msgs))
        assert.same({ exited = true, status = "exit status 0" }, D.end_event(msgs))
        c:close()
      end)
    end)

    it("reports a death by signal as envd does, plus the signal number (exit-signals)", function()
      helpers.run(function()
        local c = S:test_client()
        for _, case in ipairs {
          { sig = "SIGKILL", status = "signal: killed", num = 9 },
          { sig = "SIGTERM", status = "signal: terminated", num = 15 },
          { sig = "SIGINT", status = "signal: interrupt", num = 2 },
        } do
          local s, start = D.open_stream(c, START, { process = { cmd = "sleep", args = { "30" } } })
          assert(c:send_signal(start.pid, case.sig))
          local msgs, err = D.drain(s)
          assert.is_nil(err)
          assert.same({ exitCode = -1, exited = false, status = case.status, error = case.status,
            signal = case.num, coreDumped = false }, D.end_event(msgs), case.sig)
        end
        -- a process that signals itself
        local s = D.open_stream(c, START, { process = { cmd = "sh", args = { "-c", "kill -HUP $$" } } })
        local msgs = D.drain(s)
        assert.same({ exitCode = -1, exited = false, status = "signal: hangup", error = "signal: hangup",
          signal = 1, coreDumped = false }, D.end_event(msgs))
        c:close()
      end)
    end)

    it("writes stdin in order, CloseStdin gives EOF, and the pid is gone after the end", function()
      helpers.run(function()
        local c = S:test_client()
        local p = assert(c:start { cmd = "sh", args = { "-c", "cat; echo eof; read x; exec sleep 30" }, stdin = true })
        assert(c:send_stdin(p.pid, "one\n"))
        assert(c:send_stdin(p.pid, "two\n"))
        assert(c:close_stdin(p.pid))
        assert(c:close_stdin(p.pid)) -- again: a no-op
        local out = ""
        while out ~= "one\ntwo\neof\n" do
          local ev = assert(p:next())
          assert.equal("data", ev.type)
          out = out .. ev.data
          assert.is_true(#out <= 12, out)
        end
        assert(p:kill())
        local r = assert(p:wait())
        assert.same({ "signal: killed", false }, { r.status, r.exited })
        p:close()
        local ok, err = c:send_stdin(p.pid, "late")
        assert.is_nil(ok)
        assert.same({ "not_found", "process with pid " .. p.pid .. " not found" }, { err.code, err.message })
        c:close()
      end)
    end)

    it("without stdin the process reads end of file at once", function()
      helpers.run(function()
        local c = S:test_client()
        local p = assert(c:start { cmd = "/bin/bash", args = { "-c", "cat; read x; echo read=$?" } })
        local r = assert(p:wait())
        assert.same({ "read=1\n", 0 }, { r.stdout, r.exit_code })
        p:close()
        c:close()
      end)
    end)

    it("gives the process PATH, HOME, USER, LOGNAME and the request's envs, and cwd", function()
      helpers.run(function()
        local c = S:test_client()
        local p = assert(c:start { cmd = "/usr/bin/env", envs = { FOO = "bar baz", LOGNAME = "override" } })
        local r = assert(p:wait())
        p:close()
        local env = {}
        for k, v in r.stdout:gmatch("([^=\n]+)=([^\n]*)") do env[k] = v end
        assert.same({
          HOME = "/home/user", USER = "user", LOGNAME = "override", FOO = "bar baz",
          PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        }, env)
        for cwd, want in pairs { [""] = "/home/user", ["~"] = "/home/user", ["/tmp"] = "/tmp",
          ["~/../user/."] = "/home/user" } do
          local q = assert(c:start { cmd = "/usr/bin/pwd", cwd = cwd ~= "" and cwd or nil })
          assert.equal(want .. "\n", assert(q:wait()).stdout, "cwd " .. cwd)
          q:close()
        end
        c:close()
      end)
    end)

    it("answers start errors in the end envelope: cwd, program, user, request", function()
      helpers.run(function()
        local c = S:test_client()
        for _, case in ipairs {
          { { cmd = "/bin/true", cwd = "/nonexistent/dir" }, "invalid_argument",
            "cwd '/nonexistent/dir' does not exist" },
          { { cmd = "/bin/true", cwd = "nope" }, "invalid_argument", "cwd '/home/user/nope' does not exist" },
          { { cmd = "/bin/true", cwd = "/etc/passwd" }, "invalid_argument", "cwd '/etc/passwd' does not exist" },
          { { cmd = "/no/such/program" }, "invalid_argument",
            "failed to start process: spawn \"/no/such/program\": No such file or directory" },
          { { cmd = "/bin/true", user = "nosuchuser" }, "unauthenticated", "invalid username: 'nosuchuser'" },
        } do
          local p, err = c:start(case[1])
          assert.is_nil(p)
          -- from the end-of-stream envelope of a 200 answer, not from an HTTP status
          assert.same({ case[2], case[3], nil }, { err.code, err.message, err.http_status })
        end
        local msgs, err = D.drain(assert(c:stream(START, {})))
        assert.same({}, msgs)
        assert.same({ "invalid_argument", "process: config is required" }, { err.code, err.message })
        -- root is the sandbox's own (dshd runs as it), as in an E2B sandbox;
        -- with one shared identity there is no other account to act as
        local root, rerr = c:start { cmd = "/usr/bin/id", args = { "-u" }, user = "root" }
        if require("dsh.sandbox.uids").mode() == "shared" then
          assert.same({ "permission_denied", "cannot act as user 'root': dshd is not running as root (it runs "
            .. "as uid 1000)" }, { rerr.code, rerr.message })
        else
          local r = assert(root:wait())
          assert.same({ 0, "0\n" }, { r.exit_code, r.stdout })
          root:close()
        end
        c:close()
      end)
    end)
  end)

  describe("calls on a pid", function()
    it("answer not_found for a pid or tag that does not exist", function()
      helpers.run(function()
        local c = S:test_client()
        local msg = "process with pid " .. NO_PID .. " not found"
        local function check(ok, err, what)
          assert.is_nil(ok, what)
          assert.same({ "not_found", msg }, { err.code, err.message }, what)
        end
        check(c:connect(NO_PID))
        check(c:send_stdin(NO_PID, "x"))
        check(c:send_pty(NO_PID, "x"))
        check(c:close_stdin(NO_PID))
        check(c:send_signal(NO_PID, "SIGKILL"))
        check(c:send_signal(NO_PID, "SIGTERM", { group = true, grace_ms = 100 }))
        check(c:update_pty(NO_PID, 10, 10))
        check(c:group_status(NO_PID))
        local w = assert(c:watch_group(NO_PID))
        check(w:next())
        w:close()
        local ok, err = c:call("/process.Process/SendSignal",
          { process = { tag = "no-such-tag" }, signal = "SIGNAL_SIGKILL" })
        assert.is_nil(ok)
        assert.same({ "not_found", "process with tag no-such-tag not found", 404 },
          { err.code, err.message, err.http_status })
        c:close()
      end)
    end)

    it("refuse input, close and resize on the wrong kind of process", function()
      helpers.run(function()
        local c = S:test_client()
        local pty = assert(c:start { cmd = "sleep", args = { "30" }, pty = { rows = 24, cols = 80 } })
        local plain = assert(c:start { cmd = "sleep", args = { "30" } }) -- stdin: /dev/null
        local function check(want_code, want_msg, ok, err)
          assert.is_nil(ok)
          assert.same({ want_code, want_msg }, { err.code, err.message })
        end
        check("internal", "error writing to stdin: stdin not enabled or closed", c:send_stdin(pty.pid, "x"))
        check("unknown", "cannot close stdin for PTY process \u{2014} send Ctrl+D (0x04) instead",
          c:close_stdin(pty.pid))
        check("unimplemented", "invalid input type: neither stdin nor pty is set",
          c:call("/process.Process/SendInput", { process = { pid = pty.pid }, input = {} }))
        check("invalid_argument", "input: only one of stdin and pty may be set",
          c:call("/process.Process/SendInput",
            { process = { pid = pty.pid }, input = { stdin = "eA==", pty = "eA==" } }))
        check("internal", "error writing to tty: tty not assigned to process", c:send_pty(plain.pid, "x"))
        check("internal", "error writing to stdin: stdin not enabled or closed", c:send_stdin(plain.pid, "x"))
        check("internal", "error resizing tty: tty not assigned to process", c:update_pty(plain.pid, 30, 100))
        assert.is_true(c:close_stdin(plain.pid)) -- never enabled: a no-op, as envd
        -- stdin closed earlier refuses input too
        local cat = assert(c:start { cmd = "sh", args = { "-c", "cat; exec sleep 30" }, stdin = true })
        assert(c:close_stdin(cat.pid))
        check("internal", "error writing to stdin: stdin not enabled or closed", c:send_stdin(cat.pid, "x"))
        for _, p in ipairs { pty, plain, cat } do
          assert(p:kill())
          assert.equal("signal: killed", assert(p:wait()).status)
        end
        for _, p in ipairs { pty, plain, cat } do p:close() end
        c:close()
      end)
    end)

    it("SendSignal refuses signals it does not know, and the process keeps running", function()
      helpers.run(function()
        local c = S:test_client()
        local p = assert(c:start { cmd = "sleep", args = { "30" } })
        for sig, msg in pairs {
          SIGNAL_SIGUSR1 = "invalid signal: SIGNAL_SIGUSR1",
          SIGNAL_UNSPECIFIED = "invalid signal: SIGNAL_UNSPECIFIED",
          [10] = "invalid signal: 10",
        } do
          local ok, err = c:call("/process.Process/SendSignal", { process = { pid = p.pid }, signal = sig })
          assert.is_nil(ok)
          assert.same({ "unimplemented", msg, 501 }, { err.code, err.message, err.http_status })
        end
        assert.is_truthy(pids(assert(c:list()))[p.pid])
        -- names and numbers both select a signal
        assert(c:call("/process.Process/SendSignal", { process = { pid = p.pid }, signal = 9 }))
        assert.equal("signal: killed", assert(p:wait()).status)
        p:close()
        c:close()
      end)
    end)
  end)

  describe("StreamInput (stream-input)", function()
    -- One client-stream request of the given messages, sent raw; returns the
    -- HTTP status and the answer's envelopes.
    local function stream_input(msgs)
      local body = {}
      for i, m in ipairs(msgs) do body[i] = D.envelope(0, json.encode(m)) end
      local st, _, b = D.parse_response(D.raw(S:addr(), D.request("POST", "/process.Process/StreamInput",
        { "X-Access-Token: " .. S.token, "Content-Type: application/connect+json", "Connection: close" },
        table.concat(body))))
      return st, D.envelopes(b)
    end

    it("writes each data message to stdin in order and ignores keepalives", function()
      helpers.run(function()
        local c = S:test_client()
        local p = assert(c:start { cmd = "cat", stdin = true })
        local st, envs = stream_input {
          { start = { process = { pid = p.pid } } },
          { data = { input = { stdin = base64.encode("one\n") } } },
          { keepalive = {} },
          { data = { input = { stdin = base64.encode("two\n") } } },
        }
        assert.same({ 200, { { flags = 0, msg = {} }, { flags = 2, msg = {} } } }, { st, envs })
        assert(c:close_stdin(p.pid))
        assert.equal("one\ntwo\n", assert(p:wait()).stdout)
        p:close()
        c:close()
      end)
    end)

    it("ends with the first error: unknown pid, data before start, start twice", function()
      helpers.run(function()
        local c = S:test_client()
        local p = assert(c:start { cmd = "cat", stdin = true })
        local data = { data = { input = { stdin = base64.encode("lost\n") } } }
        for _, case in ipairs {
          { { { start = { process = { pid = NO_PID } } }, data }, "not_found",
            "process with pid " .. NO_PID .. " not found" },
          { { data }, "invalid_argument", "first message must be a start event" },
          { { { start = { process = { pid = p.pid } } }, { start = { process = { pid = p.pid } } } },
            "invalid_argument", "start event sent twice" },
        } do
          local st, envs = stream_input(case[1])
          assert.same({ 200, { { flags = 2, msg = { error = { code = case[2], message = case[3] } } } } }, { st, envs })
        end
        assert(c:close_stdin(p.pid))
        assert.equal("", assert(p:wait()).stdout)
        p:close()
        c:close()
      end)
    end)
  end)

  describe("List", function()
    it("shows each running process with its config as sent and its tag, until it ends", function()
      helpers.run(function()
        local c = S:test_client()
        local a = assert(c:start { cmd = "sleep", args = { "30" }, tag = "my-tag", envs = { A = "1" },
          cwd = "~/../../tmp" })
        local b = assert(c:start { cmd = "/bin/sleep", args = { "31" } })
        local list = pids(assert(c:list()))
        assert.same({ pid = a.pid, tag = "my-tag",
          config = { cmd = "sleep", args = { "30" }, envs = { A = "1" }, cwd = "~/../../tmp" } }, list[a.pid])
        assert.same({ pid = b.pid, config = { cmd = "/bin/sleep", args = { "31" }, envs = {} } }, list[b.pid])
        -- a tag selects the process too
        assert(c:call("/process.Process/SendSignal", { process = { tag = "my-tag" }, signal = "SIGNAL_SIGKILL" }))
        assert.equal("signal: killed", assert(a:wait()).status)
        list = pids(assert(c:list()))
        assert.is_nil(list[a.pid])
        assert.is_truthy(list[b.pid])
        assert(b:kill())
        assert(b:wait())
        assert.is_nil(pids(assert(c:list()))[b.pid])
        a:close()
        b:close()
        c:close()
      end)
    end)
  end)

  describe("Connect", function()
    it("streams only new output, to every subscriber, and each gets the end", function()
      helpers.run(function()
        local c = S:test_client()
        local p = assert(c:start { cmd = "/bin/bash", args = { "-c", "echo early; read x; echo late-$x; exit 5" },
          stdin = true })
        local ev = assert(p:next())
        assert.same({ "data", "stdout", "early\n" }, { ev.type, ev.stream, ev.data })
        local s1, st1 = D.open_stream(c, CONNECT, { process = { pid = p.pid } })
        local s2, st2 = D.open_stream(c, CONNECT, { process = { pid = p.pid } })
        assert.same({ { pid = p.pid }, { pid = p.pid } }, { st1, st2 })
        assert(c:send_stdin(p.pid, "go\n"))
        for _, s in ipairs { s1, s2 } do
          local msgs, err = D.drain(s)
          assert.is_nil(err)
          local out = D.output(msgs)
          assert.same({ "late-go\n", "" }, { out.stdout, out.stderr })
          assert.same({ exitCode = 5, exited = true, status = "exit status 5", error = "exit status 5" },
            D.end_event(msgs))
        end
        local r = assert(p:wait())
        assert.same({ "late-go\n", 5 }, { r.stdout, r.exit_code })
        p:close()
        c:close()
      end)
    end)

    it("after the end still answers with start and the end event for a while", function()
      helpers.run(function()
        local c = S:test_client()
        local p = assert(c:start { cmd = "/bin/bash", args = { "-c", "echo bye; exit 4" } })
        assert.equal(4, assert(p:wait()).exit_code)
        p:close()
        local s, start = D.open_stream(c, CONNECT, { process = { pid = p.pid } })
        assert.same({ pid = p.pid }, start)
        local msgs, err = D.drain(s)
        assert.is_nil(err)
        assert.same({ "end" }, D.kinds(msgs))
        assert.equal(4, D.end_event(msgs).exitCode)
        c:close()
      end)
    end)
  end)

  describe("streams", function()
    it("send keepalives while idle, never before start", function()
      helpers.run(function()
        local c = S:test_client()
        local s = assert(c:stream(START, bash("sleep 2.3; echo done"), { keepalive_s = 1 }))
        local msgs, err = D.drain(s)
        assert.is_nil(err)
        local kinds = D.kinds(msgs)
        assert.equal("start", kinds[1])
        local n = 0
        for i = 2, #kinds - 2 do
          assert.equal("keepalive", kinds[i])
          n = n + 1
        end
        assert.is_true(n >= 2 and n <= 3, "keepalives: " .. n)
        assert.same({ "data", "end" }, { kinds[#kinds - 1], kinds[#kinds] })
        c:close()
      end)
    end)

    it("Connect-Timeout-Ms on Start kills the process, with or without the client", function()
      helpers.run(function()
        local c = S:test_client()
        local t0 = loop.now_ms()
        local p = assert(c:start { cmd = "sleep", args = { "30" }, timeout_ms = 400 })
        local ev, err = p:next()
        local took = loop.now_ms() - t0
        assert.is_nil(ev)
        assert.same({ "deadline_exceeded", "context deadline exceeded" }, { err.code, err.message })
        assert.is_true(took >= 390 and took < 5000, "took " .. took .. " ms")
        p:close()
        local function gone(pid)
          return helpers.eventually(function()
            local st = assert(c:group_status(pid))
            return st.quiescent and st.leader_exited and not pids(assert(c:list()))[pid]
          end, 3000)
        end
        assert.is_truthy(gone(p.pid))
        -- the record says how it ended
        local msgs = D.drain((D.open_stream(c, CONNECT, { process = { pid = p.pid } })))
        assert.equal("signal: killed", D.end_event(msgs).status)

        -- the client goes away at once: the deadline still applies
        local q = assert(c:start { cmd = "sleep", args = { "30" }, timeout_ms = 300 })
        q:close()
        assert.is_truthy(pids(assert(c:list()))[q.pid])
        assert.is_truthy(gone(q.pid))

        -- the deadline is the lifetime of the whole group: a background
        -- grandchild goes too, and the group is reported empty
        local g = assert(c:start { cmd = "bash", args = { "-c", "sleep 300 & echo $!; wait" },
          timeout_ms = 400 })
        local first = assert(g:next())
        local grandchild = tonumber(first.data:match("%d+"))
        assert.is_number(grandchild)
        local _, gerr = g:wait()
        assert.equal("deadline_exceeded", gerr.code)
        g:close()
        assert.is_truthy(gone(g.pid))
        local probe = assert(c:start { cmd = "sh",
          args = { "-c", "kill -0 " .. grandchild .. " 2>/dev/null; echo $?" } })
        assert.equal("1\n", assert(probe:wait()).stdout)
        probe:close()
        c:close()
      end)
    end)

    it("Connect-Timeout-Ms on Connect ends only that stream", function()
      helpers.run(function()
        local c = S:test_client()
        local p = assert(c:start { cmd = "sleep", args = { "30" } })
        local q = assert(c:connect(p.pid, { timeout_ms = 300 }))
        local ev, err = q:next()
        assert.is_nil(ev)
        assert.same({ "deadline_exceeded", "context deadline exceeded" }, { err.code, err.message })
        q:close()
        async.sleep(100)
        assert.is_truthy(pids(assert(c:list()))[p.pid])
        assert(p:kill())
        assert.equal("signal: killed", assert(p:wait()).status)
        p:close()
        c:close()
      end)
    end)

    it("ignore unknown request fields and accept snake_case names", function()
      helpers.run(function()
        local c = S:test_client()
        local msgs, err = D.drain((D.open_stream(c, START, {
          process = { cmd = "/bin/echo", args = { "ok" }, future_field = { 1, 2 } }, stdin = false, unknownTop = true,
        })))
        assert.is_nil(err)
        assert.equal("ok\n", D.output(msgs).stdout)
        c:close()
      end)
    end)
  end)
end)

describe("dshd process service (bare dshd --envd-compat)", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  local function with_compat(fn)
    helpers.run(function()
      local d = D.bare { "--envd-compat" }
      local c = d.client()
      local ok, err = xpcall(fn, debug.traceback, c, d)
      c:close()
      d.stop()
      if not ok then error(err, 0) end
    end)
  end

  it("sends end events without extension fields and data without offsets", function()
    with_compat(function(c)
      local s, start = D.open_stream(c, START, bash("printf abc; exec sleep 30"))
      local ev = assert(s:next())
      assert.same({ __data = true, stream = "stdout", data = "abc" }, ev) -- no offset on the wire
      assert(c:send_signal(start.pid, "SIGKILL"))
      local msgs, err = D.drain(s)
      assert.is_nil(err)
      assert.same({ exitCode = -1, exited = false, status = "signal: killed", error = "signal: killed" },
        D.end_event(msgs))
    end)
  end)

  it("knows only SIGTERM and SIGKILL, and no extension route or header", function()
    with_compat(function(c)
      local p = assert(c:start { cmd = "sleep", args = { "30" } })
      for sig, msg in pairs {
        SIGNAL_SIGINT = "invalid signal: SIGNAL_UNSPECIFIED",
        SIGNAL_SIGHUP = "invalid signal: SIGNAL_UNSPECIFIED",
        [2] = "invalid signal: 2",
      } do
        local ok, err = c:call("/process.Process/SendSignal", { process = { pid = p.pid }, signal = sig })
        assert.is_nil(ok)
        assert.same({ "unimplemented", msg }, { err.code, err.message })
      end
      for _, path in ipairs { "/process.Process/GroupStatus", "/process.Process/StreamInput",
        "/process.Process/WatchGroup" } do
        local ok, err = c:call(path, { process = { pid = p.pid } })
        assert.is_nil(ok)
        assert.same({ "unimplemented", 404, "404 page not found" }, { err.code, err.http_status, err.message }, path)
      end
      local h = assert(c:health())
      assert.same({ ok = true, extensions = {} }, h)
      -- resume is ignored: only new output, no replay field
      local s, start = D.open_stream(c, CONNECT, { process = { pid = p.pid }, resume = { stdout = 0 } })
      assert.same({ pid = p.pid }, start)
      s:close()
      assert(c:send_signal(p.pid, "SIGTERM"))
      local r = assert(p:wait())
      assert.same({ "signal: terminated", nil }, { r.status, r.signal })
      p:close()
    end)
  end)
end)
