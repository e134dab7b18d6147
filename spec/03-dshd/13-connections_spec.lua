-- Connections that hold dshd's resources (issue 7, items 8 and 11): idle or
-- trickling sockets that never finish a request header are closed after
-- --header-timeout-ms (5 s by default), kept-alive ones after
-- --keepalive-timeout-ms, an unauthenticated request's connection right after
-- its 401; and when dshd runs out of file descriptors it closes what it
-- cannot serve and accepts again as soon as descriptors are free.
local async = require "dsh.async"
local D = require "helpers.dshd"
local envd = require "dsh.envd"
local helpers = require "helpers"
local sock = require "helpers.socket"
local loop = require "dsh.core.loop"
local proc = require "dsh.core.proc"

--- A raw connection through spec/fixtures/rawhttp.c whose bytes are written
-- by the caller over time. :send(bytes), :finish() -> answer, ms from open
-- to the server's close (or to quiet_ms without a byte).
local function raw_conn(addr, quiet_ms)
  local p = assert(proc.spawn { argv = { helpers.fixture("rawhttp"), addr, "--timeout-ms", tostring(quiet_ms) },
    stdin = "pipe", stderr = "pipe" })
  local t0 = loop.now_ms()
  local out_task = async.run(function()
    local out = p:read_all()
    return out, loop.now_ms() - t0
  end)
  local c = {}
  function c.send(bytes) return p:write(bytes) end
  function c.finish()
    local out, ms = out_task:await()
    p:close_stdin()
    local err = p:read_all("stderr")
    local st = p:wait()
    p:close()
    assert(st.exit_code == 0, "fixture-rawhttp failed: " .. tostring(err))
    return out, ms
  end
  return c
end

--- A bare dshd (no sandbox) under `prlimit --nofile=N`, with its token on fd 0.
local function limited_dshd(nofile, token)
  local dir = helpers.tmpdir()
  local p = assert(proc.spawn {
    argv = { "prlimit", "--nofile=" .. nofile .. ":" .. nofile, "--", helpers.bin("dshd"), "--listen",
      "127.0.0.1:0", "--ready-file", dir .. "/ready", "--access-token-fd", "0" },
    cwd = dir, stdin = "pipe", stdout = "null", stderr = "null",
    env = { PATH = "/usr/local/bin:/usr/bin:/bin", HOME = dir, LANG = "C.UTF-8" },
  })
  assert(p:write(token))
  p:close_stdin()
  local addr = assert(helpers.eventually(function()
    local s = helpers.read_file(dir .. "/ready")
    return s and s:sub(-1) == "\n" and (s:gsub("%s+$", ""))
  end, 5000), "dshd did not become ready")
  local d = { proc = p, addr = addr }
  function d.stop()
    p:terminate(2000)
    p:wait()
    p:wait_quiescent()
    p:close()
    helpers.rm_rf(dir)
  end
  return d
end

local function tcp_open(addr, bytes)
  local fd = sock.open(addr)
  if bytes then sock.send(fd, bytes) end
  return fd
end

local function health(addr, quiet_ms)
  return (D.parse_response(D.raw(addr, D.request("GET", "/health", { "Connection: close" }),
    { timeout_ms = quiet_ms or 3000 })))
end

describe("dshd and connections that hold resources", function()
  local S = D.use_sandbox()
  local addr, T
  setup(function()
    addr = S:addr()
    T = "X-Access-Token: " .. S.token
  end)

  it("closes connections that send no complete header within 5 s, however they trickle", function()
    helpers.run(function()
      local silent, partial, trickle = {}, {}, raw_conn(addr, 15000)
      for i = 1, 50 do silent[i] = raw_conn(addr, 15000) end
      for i = 1, 10 do
        partial[i] = raw_conn(addr, 15000)
        partial[i].send("GET /health HTTP/1.1\r\nHost: localhost\r\n")
      end
      local stop = false
      local writer = async.run(function()
        for ch in ("GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: " .. ("a"):rep(100)):gmatch(".") do
          if stop or not trickle.send(ch) then break end
          async.sleep(200)
        end
      end)
      -- meanwhile dshd serves others
      assert.equal(204, health(addr))
      for _, list in ipairs { silent, partial, { trickle } } do
        for _, c in ipairs(list) do
          local out, ms = c.finish()
          assert.equal("", out)
          assert.is_true(ms >= 4000 and ms < 8000, "closed after " .. ms .. " ms")
        end
      end
      stop = true
      writer:await()
      assert.equal(204, health(addr))
    end)
  end)

  it("closes the connection of a request refused for its token", function()
    helpers.run(function()
      for _, hs in ipairs { { "X-Access-Token: wrong" }, {} } do
        local c = raw_conn(addr, 8000)
        -- a second request follows on the same connection: it never gets an answer
        local req = D.request("POST", "/filesystem.Filesystem/Stat", { "Content-Type: application/json", hs[1] },
          '{"path":"/"}')
        c.send(req .. D.request("GET", "/health", {}))
        local out, ms = c.finish()
        local st, h, _, rest = D.parse_response(out)
        assert.equal(401, st)
        assert.equal("close", (h.connection or ""):lower())
        assert.equal("", rest)
        assert.is_true(ms < 3000, "closed after " .. ms .. " ms")
      end
      -- with the token the same connection carries both
      local c = raw_conn(addr, 1500)
      c.send(D.request("POST", "/filesystem.Filesystem/Stat", { "Content-Type: application/json", T }, '{"path":"/"}')
        .. D.request("GET", "/health", {}))
      local out = c.finish()
      local st, _, _, rest = D.parse_response(out)
      assert.equal(200, st)
      assert.equal(204, (D.parse_response(rest)))
    end)
  end)

  it("closes kept-alive connections idle for --keepalive-timeout-ms", function()
    helpers.run(function()
      local d = D.bare({ "--keepalive-timeout-ms", "1000" }, { token = "t0k" })
      finally(d.stop)
      local c = raw_conn(d.addr, 8000)
      c.send(D.request("GET", "/health", {}))
      local out, ms = c.finish()
      assert.equal(204, (D.parse_response(out)))
      assert.is_true(ms >= 900 and ms < 4000, "closed after " .. ms .. " ms")
    end)
  end)

  it("accepts again once connections no longer exhaust its file descriptors", function()
    helpers.run(function()
      local d = limited_dshd(64, "t0k")
      finally(d.stop)
      -- 80 kept-alive clients at once, more than 64 fds allow, then all leave
      for _ = 1, 3 do
        local fds = {}
        for i = 1, 80 do fds[i] = tcp_open(d.addr, D.request("GET", "/health", {})) end
        async.sleep(500)
        for _, fd in ipairs(fds) do sock.close(fd) end
        -- once dshd has seen them go (a ceiling of 30 s: it takes milliseconds)
        assert.is_truthy(helpers.eventually(function() return health(d.addr) == 204 end, 30000, 50))
      end
    end)
  end)

  it("closes what it cannot accept while processes hold its fds, and recovers after", function()
    helpers.run(function()
      local d = limited_dshd(64, "t0k")
      local c = envd.client { url = "http://" .. d.addr, access_token = "t0k" }
      finally(function()
        c:close()
        d.stop()
      end)
      -- processes with three pipes each until dshd runs out of descriptors
      local procs = {}
      for _ = 1, 40 do
        local p, err = c:start { cmd = "sleep", args = { "60" } }
        if not p then
          assert.matches("Too many open files", err.message)
          break
        end
        procs[#procs + 1] = p
      end
      assert.is_true(#procs >= 5 and #procs < 40, #procs .. " processes started")
      -- a new connection is closed at once, not left waiting in the backlog
      local t = loop.now_ms()
      health(d.addr, 8000)
      assert.is_true(loop.now_ms() - t < 5000, "a new connection waited " .. (loop.now_ms() - t) .. " ms")
      for _, p in ipairs(procs) do
        c:send_signal(p.pid, "SIGKILL")
        p:wait()
        p:close()
      end
      assert.equal(204, helpers.eventually(function()
        local st = health(d.addr)
        return st == 204 and st
      end, 5000))
    end)
  end)
end)
