-- Who may reach a dshd without an access token (issue 7, item 12): a
-- listener that is not loopback needs a token unless
-- --allow-tokenless-network says so; and without a token, a request must
-- name the server by IP address or "localhost" (a DNS-rebinding page names
-- its own domain) and carry no Origin but an allowed one (--allow-origin),
-- so a web page cannot drive the daemon. With a token neither check applies.
-- Bare dshds on this host (flags are what is tested), nothing started as
-- root does anything but answer.
local async = require "dsh.async"
local D = require "helpers.dshd"
local helpers = require "helpers"
local json = require "dsh.json"
local proc = require "dsh.core.proc"

--- Runs dshd with args to its exit (or stops it once ready): status, stderr.
local function run_dshd(args)
  local dir = helpers.tmpdir()
  local argv = { helpers.bin("dshd"), "--ready-file", dir .. "/ready" }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  local p = assert(proc.spawn { argv = argv, cwd = dir, stdin = "null", stdout = "null", stderr = "pipe",
    env = { PATH = "/usr/local/bin:/usr/bin:/bin", HOME = dir, LANG = "C.UTF-8" } })
  local err_task = async.run(function() return p:read_all("stderr") end)
  local ready = helpers.eventually(function()
    return helpers.read_file(dir .. "/ready") or not helpers.pid_alive(p.pid)
  end, 5000)
  if type(ready) == "string" then p:terminate(2000) end
  local st = p:wait()
  local log = err_task:await()
  p:wait_quiescent()
  p:close()
  helpers.rm_rf(dir)
  return st.exit_code, log, type(ready) == "string" and ready or nil
end

describe("dshd listeners without an access token", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("refuses a listener that is not loopback without a token", function()
    helpers.run(function()
      for _, addr in ipairs { "0.0.0.0:0", "[::]:0" } do
        local code, log, ready = run_dshd { "--listen", addr }
        assert.equal(1, code, log)
        assert.is_nil(ready)
        assert.matches("dshd: refusing to listen on " .. addr:gsub("%p", "%%%0") .. " without an access token "
          .. "%(anyone who reaches it could run commands%); give one with %-%-access%-token%-fd, or pass "
          .. "%-%-allow%-tokenless%-network", log)
      end
    end)
  end)

  it("listens on any address with a token, or with --allow-tokenless-network", function()
    helpers.run(function()
      local code, log, ready = run_dshd { "--listen", "0.0.0.0:0", "--access-token", "t0k" }
      assert.equal(0, code, log)
      assert.matches("^0%.0%.0%.0:%d+\n$", ready)
      code, log, ready = run_dshd { "--listen", "0.0.0.0:0", "--allow-tokenless-network" }
      assert.equal(0, code, log)
      assert.matches("^0%.0%.0%.0:%d+\n$", ready)
      assert.matches("anyone who can reach 0%.0%.0%.0:%d+ can run commands", log)
      -- loopback and unix sockets need no flag
      code, log = run_dshd { "--listen", "127.0.0.2:0" }
      assert.equal(0, code, log)
    end)
  end)

  -- Sends a request whose Host is host (not the helper's default).
  local function ask_host(addr, host, extra, path, body, method)
    local hs = { "Content-Type: application/json", "Connection: close" }
    for _, h in ipairs(extra or {}) do hs[#hs + 1] = h end
    local req = D.request(method or "POST", path or "/filesystem.Filesystem/Stat", hs, body or '{"path":"/"}')
    req = req:gsub("\r\nHost: localhost\r\n", "\r\nHost: " .. host .. "\r\n", 1)
    local st, _, b = D.parse_response(D.raw(addr, req))
    return st, b and b ~= "" and json.decode(b) or nil
  end

  it("refuses requests that name another host, or come from a web page, when there is no token", function()
    helpers.run(function()
      local d = D.bare({ "--allow-origin", "http://app.example:3000" })
      finally(d.stop)
      local port = d.addr:match(":(%d+)$")
      local good = { "localhost", "localhost:" .. port, "127.0.0.1:" .. port, "127.0.0.1", "[::1]:" .. port }
      for _, host in ipairs(good) do
        assert.equal(200, (ask_host(d.addr, host)), host)
      end
      local bad = { "evil.example:" .. port, "evil.example", "127.0.0.1.nip.io:" .. port, "localhost.evil" }
      for _, host in ipairs(bad) do
        local st, b = ask_host(d.addr, host)
        assert.same({ 403, { code = 403, message = "request refused: Host '" .. host .. "' is not an IP address or "
          .. "localhost (without an access token, requests must name this server by address)" } }, { st, b }, host)
      end
      local st, b = ask_host(d.addr, "localhost", { "Origin: http://evil.example" })
      assert.same({ 403, { code = 403, message = "request refused: a request from the web page "
        .. "'http://evil.example' needs the access token" } }, { st, b })
      -- also for /files, the one route a browser form could POST to
      st = ask_host(d.addr, "localhost", { "Origin: null" }, "/files?path=/tmp/x", "x")
      assert.equal(403, st)
      assert.equal(200, (ask_host(d.addr, "localhost", { "Origin: http://app.example:3000" })))
      -- /health too: nothing answers a rebinding page
      assert.equal(403, (ask_host(d.addr, "evil.example", nil, "/health", "", "GET")))
      assert.equal(204, (ask_host(d.addr, "127.0.0.1", nil, "/health", "", "GET")))
    end)
  end)

  it("with a token, Host and Origin are not checked", function()
    helpers.run(function()
      local d = D.bare({}, { token = "t0k" })
      finally(d.stop)
      assert.equal(200, (ask_host(d.addr, "evil.example", { "X-Access-Token: t0k", "Origin: http://evil.example" })))
      assert.equal(401, (ask_host(d.addr, "evil.example", { "Origin: http://evil.example" })))
    end)
  end)
end)
