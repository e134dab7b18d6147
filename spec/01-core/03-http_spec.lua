-- dsh.core.http against a real loopback server (spec/fixtures/httpd.c), started
-- fresh for every test over TCP and a unix socket, and stopped before the
-- leak check.
local async = require "dsh.async"
local helpers = require "helpers"
local http = require "dsh.core.http"
local loop = require "dsh.core.loop"
local proc = require "dsh.core.proc"

local MiB = 1024 * 1024

describe("dsh.core.http", function()
  local dir, server, base

  local function start_server()
    local argv = { helpers.fixture("httpd"), dir .. "/httpd.sock" }
    local p = assert(proc.spawn { argv = argv, stderr = "inherit" })
    local out = ""
    while not out:match("^%d+\n%d+\n") do
      local chunk, err = p:read()
      assert(chunk, "fixture-httpd did not start: " .. tostring(err))
      out = out .. chunk
    end
    local port = tonumber(out:match("^(%d+)\n"))
    return { proc = p, port = port, sock = dir .. "/httpd.sock" }
  end

  local function stop_server()
    if not server then return end
    server.proc:terminate(2000)
    server.proc:wait()
    server.proc:close()
    server = nil
  end

  setup(function()
    dir = helpers.tmpdir()
  end)

  teardown(function()
    stop_server()
    helpers.rm_rf(dir)
  end)

  before_each(function()
    helpers.snapshot()
    server = start_server()
    base = "http://127.0.0.1:" .. server.port
  end)

  after_each(function()
    stop_server()
    helpers.assert_clean()
  end)

  -- A fresh client. Tests close it themselves (assert_clean checks that);
  -- finally() closes it when a test fails early, so one failure stays one.
  local function client()
    local c = http.client()
    finally(function() c:close() end)
    return c
  end

  describe("requests", function()
    it("makes a GET round trip", function()
      local c = client()
      local res = assert(c:fetch { url = base .. "/status?code=200" })
      assert.equal(200, res.status)
      assert.equal("status 200\n", res.body)
      assert.equal("11", res.headers["content-length"])
      c:close()
    end)

    it("makes a POST round trip with a body and request headers", function()
      local c = client()
      local res = assert(c:fetch {
        method = "POST", url = base .. "/echo", body = "hello\0world",
        headers = { ["Content-Type"] = "application/octet-stream" },
      })
      assert.equal(200, res.status)
      assert.equal("hello\0world", res.body)
      assert.equal("POST", res.headers["x-echo-method"])
      assert.equal("11", res.headers["x-echo-content-length"])
      assert.equal("none", res.headers["x-echo-te"])
      c:close()
    end)

    it("sends request headers and other methods", function()
      local c = client()
      local res = assert(c:fetch { method = "PATCH", url = base .. "/inspect",
        headers = { ["X-Foo"] = "bar baz", ["X-Num"] = 42 } })
      assert.matches("^method: PATCH\n", res.body)
      assert.matches("\nX%-Foo: bar baz\n", res.body)
      assert.matches("\nX%-Num: 42\n", res.body)
      assert.not_matches("Expect", res.body)
      res = assert(c:fetch { method = "DELETE", url = base .. "/echo" })
      assert.equal("DELETE", res.headers["x-echo-method"])
      c:close()
    end)

    it("lower-cases response header names and joins repeated ones", function()
      local c = client()
      local res = assert(c:fetch { url = base .. "/status?code=201" })
      assert.equal(201, res.status)
      assert.equal("a, b", res.headers["x-multi"])
      assert.is_nil(res.headers["X-Multi"])
      c:close()
    end)

    it("treats 404 and 500 as responses, not errors", function()
      local c = client()
      for _, code in ipairs { 404, 500 } do
        local res, err = c:fetch { url = base .. "/status?code=" .. code }
        assert.is_nil(err)
        assert.equal(code, res.status)
        assert.equal("status " .. code .. "\n", res.body)
      end
      c:close()
    end)

    it("delivers the head of responses without a body before the end", function()
      local c = client()
      local res = assert(c:request { method = "HEAD", url = base .. "/status?code=200" })
      assert.equal(200, res.status)
      assert.equal("11", res.headers["content-length"])
      assert.is_nil(res:read())
      res:close()
      local r204 = assert(c:fetch { url = base .. "/status?code=204" })
      assert.equal(204, r204.status)
      assert.equal("", r204.body)
      c:close()
    end)

    it("reuses one connection for sequential requests", function()
      local c = client()
      local before = tonumber(assert(c:fetch { url = base .. "/count" }).body)
      for i = 1, 5 do
        local res = assert(c:fetch { method = "POST", url = base .. "/echo", body = "n" .. i })
        assert.equal("n" .. i, res.body)
      end
      local after = tonumber(assert(c:fetch { url = base .. "/count" }).body)
      assert.equal(before, after)
      assert.same({ requests = 7, connections = 1, live = 0 }, c:stats())
      c:close()
    end)

    it("runs 50 requests in parallel as tasks", function()
      local c = client()
      local bodies = helpers.run(function()
        local tasks = {}
        for i = 1, 50 do
          tasks[i] = async.run(function()
            local res = assert(c:fetch { method = "POST", url = base .. "/echo", body = "request " .. i })
            assert.equal(200, res.status)
            return res.body
          end)
        end
        return async.all(tasks)
      end)
      for i = 1, 50 do assert.equal("request " .. i, bodies[i]) end
      local st = c:stats()
      assert.equal(50, st.requests)
      assert.equal(0, st.live)
      assert.is_true(st.connections >= 1 and st.connections <= 50)
      -- the connections made stay cached: a second wave makes none
      helpers.run(function()
        local tasks = {}
        for i = 1, 10 do
          tasks[i] = async.run(function() return assert(c:fetch { url = base .. "/count" }) end)
        end
        async.all(tasks)
      end)
      assert.equal(st.connections, c:stats().connections)
      c:close()
    end)

    it("talks HTTP/1.1 over a unix socket, reusing the connection", function()
      local c = client()
      for i = 1, 3 do
        local res = assert(c:fetch {
          method = "POST", url = "http://localhost/echo", unix_socket = server.sock, body = "over unix " .. i,
        })
        assert.equal(200, res.status)
        assert.equal("over unix " .. i, res.body)
      end
      assert.equal(1, c:stats().connections)
      c:close()
    end)
  end)

  describe("streaming", function()
    it("streams a 200 MB body with bounded buffering to a slow consumer", function()
      local c = client()
      local max = 256 * 1024
      local n = 200 * MiB
      local res = assert(c:request { url = base .. "/bytes?n=" .. n, max_buffer_bytes = max })
      assert.equal(200, res.status)
      assert.equal("chunked", res.headers["transfer-encoding"])
      collectgarbage()
      local lua_base, lua_peak = collectgarbage("count"), 0
      local total, chunks = 0, 0
      while true do
        local chunk, err = res:read()
        assert.is_nil(err)
        if not chunk then break end
        chunks = chunks + 1
        -- byte i of the body is i % 251: check both ends of every chunk
        assert.equal(total % 251, chunk:byte(1))
        assert.equal((total + #chunk - 1) % 251, chunk:byte(-1))
        total = total + #chunk
        if chunks <= 40 then
          async.sleep(2) -- slow at first: the transfer must pause, not buffer
          assert.is_true(res:info().buffered <= max)
        end
        if chunks % 64 == 0 then lua_peak = math.max(lua_peak, collectgarbage("count") - lua_base) end
      end
      local info = res:info()
      assert.equal(n, total)
      assert.equal(n, info.body_bytes)
      assert.is_true(info.done)
      assert.is_true(info.buffered_peak <= max, "buffered_peak " .. info.buffered_peak)
      assert.is_true(info.buffered_peak >= max / 2, "the slow consumer should have filled the buffer")
      assert.is_true(lua_peak < 64 * 1024, "Lua heap grew by " .. lua_peak .. " KiB")
      res:close()
      c:close()
    end)

    local function pattern(n)
      local unit = {}
      for b = 0, 255 do unit[#unit + 1] = string.char(b) end
      unit = table.concat(unit)
      return unit:rep(math.ceil(n / 256)):sub(1, n)
    end

    local function upload(c, data, piece, headers, max)
      local res = assert(c:request { method = "POST", url = base .. "/echo", body_stream = true,
        headers = headers, max_buffer_bytes = max })
      assert.is_nil(res.status) -- returned before the head: the server answers after the body
      for i = 1, #data, piece do assert(res:write(data:sub(i, i + piece - 1))) end
      assert(res:finish())
      local body = assert(res:body())
      return res, body
    end

    it("streams a request body of several MB chunked, all byte values intact", function()
      local c = client()
      local data = pattern(5 * MiB + 123)
      local res, body = upload(c, data, 100000, nil, 64 * 1024)
      assert.equal(200, res.status)
      assert.equal("chunked", res.headers["x-echo-te"])
      assert.equal(#data, tonumber(res.headers["x-echo-length"]))
      assert.is_true(body == data, "echoed body differs")
      assert.equal(#data, res:info().sent_bytes)
      res:close()
      c:close()
    end)

    it("streams a request body with Content-Length when given, in one big write", function()
      local c = client()
      local data = pattern(3 * MiB)
      local res, body = upload(c, data, #data, { ["Content-Length"] = #data })
      assert.equal("none", res.headers["x-echo-te"])
      assert.equal(tostring(#data), res.headers["x-echo-content-length"])
      assert.is_true(body == data, "echoed body differs")
      res:close()
      c:close()
    end)

    it("reads and writes from separate tasks", function()
      local c = client()
      local data = pattern(2 * MiB)
      local body = helpers.run(function()
        local res = assert(c:request { method = "PUT", url = base .. "/echo", body_stream = true })
        local reader = async.run(function() return assert(res:body()) end)
        for i = 1, #data, 65536 do
          assert(res:write(data:sub(i, i + 65535)))
          async.yield()
        end
        assert(res:finish())
        local b = reader:await()
        assert.equal("PUT", res.headers["x-echo-method"])
        res:close()
        return b
      end)
      assert.is_true(body == data)
      c:close()
    end)

    it("lets several tasks wait on one response", function()
      local c = client()
      local got = helpers.run(function()
        local res = assert(c:request { url = base .. "/slow?n=3&delay_ms=30" })
        assert.equal("chunk 0\n", res:read())
        local a = async.run(function() return res:read() end)
        local b = async.run(function() return res:read() end)
        local all = (a:await() or "") .. (b:await() or "")
        res:close()
        return all
      end)
      assert.equal(16, #got)
      assert.matches("chunk 1\n", got)
      assert.matches("chunk 2\n", got)
      c:close()
    end)

    it("reads a dribbled body chunk by chunk", function()
      local c = client()
      local res = assert(c:request { url = base .. "/slow?n=5&delay_ms=5" })
      local got = {}
      while true do
        local chunk = res:read()
        if not chunk then break end
        got[#got + 1] = chunk
      end
      assert.equal("chunk 0\nchunk 1\nchunk 2\nchunk 3\nchunk 4\n", table.concat(got))
      assert.is_true(#got >= 2)
      res:close()
      c:close()
    end)
  end)

  describe("failures", function()
    it("times out a request as HTTP_TIMEOUT", function()
      local c = client()
      local t0 = loop.now_ms()
      local res, err = c:fetch { url = base .. "/sleep?ms=3000", timeout_ms = 100 }
      assert.is_nil(res)
      assert.equal("HTTP_TIMEOUT", err.code)
      assert.matches("GET http://127%.0%.0%.1:%d+/sleep%?ms=3000: .*[Tt]imed out", err.message)
      assert.is_true(loop.now_ms() - t0 < 2000)
      c:close()
    end)

    it("times out a body that stalls after the head", function()
      local c = client()
      local res = assert(c:request { url = base .. "/slow?n=100&delay_ms=50", timeout_ms = 200 })
      assert.equal(200, res.status)
      local body, err = res:body()
      assert.is_nil(body)
      assert.equal("HTTP_TIMEOUT", err.code)
      res:close()
      c:close()
    end)

    it("reports a refused connection as HTTP_ERROR with libcurl's message", function()
      local c = client()
      local res, err = c:fetch { url = "http://127.0.0.1:1/x" }
      assert.is_nil(res)
      assert.equal("HTTP_ERROR", err.code)
      assert.matches("GET http://127%.0%.0%.1:1/x: Failed to connect to 127%.0%.0%.1 port 1", err.message)
      assert.equal("EHTTP", err.status)
      c:close()
    end)

    it("reports a missing unix socket and a malformed URL", function()
      local c = client()
      local res, err = c:fetch { url = "http://localhost/", unix_socket = dir .. "/nothing.sock" }
      assert.is_nil(res)
      assert.equal("HTTP_ERROR", err.code)
      assert.matches("GET http://localhost/ %(unix socket .*/nothing%.sock%): .*[Cc]onnect", err.message)
      res, err = c:fetch { url = "nope://what" }
      assert.is_nil(res)
      assert.equal("HTTP_ERROR", err.code)
      assert.matches("[Pp]rotocol", err.message)
      c:close()
    end)

    it("fails when the server drops the connection mid-body", function()
      local c = client()
      local res = assert(c:request { url = base .. "/drop?n=100000" })
      assert.equal(200, res.status)
      local body, err = res:body()
      assert.is_nil(body)
      assert.equal("HTTP_ERROR", err.code)
      assert.matches("transfer closed with 100000 bytes remaining to read", err.message)
      res:close()
      -- and the client goes on with a fresh connection
      assert.equal("status 200\n", assert(c:fetch { url = base .. "/status?code=200" }).body)
      assert.equal(2, c:stats().connections)
      c:close()
    end)

    it("bounds the response head", function()
      local c = client()
      local res, err = c:fetch { url = base .. "/bigheader?n=5000", max_header_bytes = 1024 }
      assert.is_nil(res)
      assert.equal("HTTP_ERROR", err.code)
      assert.matches("response head exceeds max_header_bytes %(1024%)", err.message)
      assert.equal(5000, #assert(c:fetch { url = base .. "/bigheader?n=5000" }).headers["x-big"])
      c:close()
    end)
  end)

  describe("aborts", function()
    it("aborts mid-body through a signal, and never reuses that connection", function()
      local c = client()
      local ctl = async.controller()
      local res = assert(c:request { url = base .. "/slow?n=100&delay_ms=20", signal = ctl.signal })
      assert.matches("^chunk 0\n", assert(res:read()))
      ctl:abort("user stop")
      local chunk, err = res:read()
      assert.is_nil(chunk)
      assert.equal("ABORTED", err.code)
      assert.equal("user stop", err.message)
      assert.equal("user stop", err.reason)
      assert.equal("ABORTED", select(2, res:body()).code)
      res:close()
      local next_res = assert(c:fetch { url = base .. "/status?code=200" })
      assert.equal("status 200\n", next_res.body)
      assert.equal(2, c:stats().connections)
      c:close()
    end)

    it("wakes a task waiting for body bytes when the signal aborts", function()
      local c = client()
      local ctl = async.controller()
      local err = helpers.run(function()
        local res = assert(c:request { url = base .. "/slow?n=100&delay_ms=200", signal = ctl.signal })
        local t = loop.timer(function() ctl:abort(async.abort_error("stopped by timer")) end)
        t:start(30)
        local chunks = 0
        while true do
          local chunk, e = res:read()
          if not chunk then
            t:close()
            res:close()
            return e
          end
          chunks = chunks + 1
        end
      end)
      assert.equal("ABORTED", err.code)
      assert.equal("stopped by timer", err.message)
      c:close()
    end)

    it("aborts a request still waiting for its head", function()
      local c = client()
      local ctl = async.controller()
      local t = loop.timer(function() ctl:abort("too slow") end)
      t:start(30)
      local res, err = c:request { url = base .. "/sleep?ms=3000", signal = ctl.signal }
      t:close()
      assert.is_nil(res)
      assert.equal("ABORTED", err.code)
      assert.equal("too slow", err.message)
      -- an already aborted signal stops the request before it starts
      res, err = c:fetch { url = base .. "/status?code=200", signal = ctl.signal }
      assert.is_nil(res)
      assert.equal("ABORTED", err.code)
      assert.equal(1, c:stats().requests)
      c:close()
    end)

    it("cancels a running request on close", function()
      local c = client()
      local res = assert(c:request { url = base .. "/slow?n=100&delay_ms=20" })
      assert(res:read())
      assert.equal(1, c:stats().live)
      res:close()
      res:close()
      assert.equal(0, c:stats().live)
      assert.matches("closed", tostring(res))
      assert.has_error(function() res:read() end, "dsh.core.http: read: response is closed")
      c:close()
    end)

    it("closes the open responses of a client that closes", function()
      local c = client()
      local res = assert(c:request { url = base .. "/slow?n=100&delay_ms=20" })
      assert.matches("1 open", tostring(c))
      c:close()
      c:close()
      assert.equal("dsh.core.http.client (closed)", tostring(c))
      assert.has_error(function() res:read() end, "dsh.core.http: read: response is closed")
      assert.has_error(function() c:fetch { url = base } end, "dsh.core.http: fetch: client is closed")
    end)

    it("frees forgotten responses and clients when collected", function()
      local c = client()
      local weak = setmetatable({}, { __mode = "v" })
      weak[1] = assert(c:request { url = base .. "/slow?n=100&delay_ms=20" })
      assert(weak[1]:read())
      collectgarbage()
      collectgarbage()
      assert.is_nil(weak[1])
      assert.equal(0, c:stats().live)
      assert.is_nil(loop.live()["http.response"])
      -- a client collected together with a running request of its own (in
      -- either order, C cancels and frees everything)
      weak[2] = http.client()
      weak[3] = assert(weak[2]:request { url = base .. "/slow?n=100&delay_ms=20" })
      assert(weak[3]:read())
      collectgarbage()
      collectgarbage()
      assert.is_nil(weak[2])
      assert.is_nil(weak[3])
      c:close()
      -- what was forgotten open is what the leak check reports (and only that)
      local forgotten = helpers.take_collected_open()
      assert.equal(3, #forgotten, table.concat(forgotten, ", "))
      assert.matches("^dsh%.core%.http%.client", forgotten[1])
      assert.matches("^dsh%.core%.http%.response%(GET .*/slow", forgotten[2])
      assert.matches("^dsh%.core%.http%.response%(GET .*/slow", forgotten[3])
    end)
  end)

  describe("misuse", function()
    it("raises on bad options, naming the module", function()
      local c = client()
      assert.has_error(function() c:request {} end, "dsh.core.http: request: url: expected string, got nil")
      assert.has_error(function() c:request { url = base, body = "x", body_stream = true } end,
        "dsh.core.http: request: body and body_stream are exclusive")
      assert.has_error(function() c:request { url = base, headers = { ["X-Bad"] = "a\r\nb" } } end,
        "dsh.core.http: request: header X-Bad: expected a string without CR or LF")
      assert.has_error(function() c:request { url = base, timeout_ms = -1 } end,
        "dsh.core.http: request: timeout_ms: expected an integer from 0 to 1099511627776, got -1")
      assert.has_error(function() c:request { url = base, max_buffer_bytes = 2 ^ 32 } end,
        "dsh.core.http: request: max_buffer_bytes: expected an integer from 0 to 1073741824, got 4294967296")
      assert.has_error(function() c:request { url = base, method = "GET /x" } end)
      local res = assert(c:request { url = base .. "/status?code=200" })
      assert.has_error(function() res:write("x") end,
        "dsh.core.http: write: the request was not made with body_stream = true")
      assert.matches("^dsh%.core%.http%.response%(GET http://127%.0%.0%.1:%d+/status%?code=200, 200, ",
        tostring(res))
      res:close()
      assert.same({ requests = 1, connections = 1, live = 0 }, c:stats())
      c:close()
    end)
  end)
end)
