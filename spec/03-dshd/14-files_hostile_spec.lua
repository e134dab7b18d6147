-- Files that would stall dshd's one loop or never end (issue 7, items 6, 7
-- and 13): uploads and spill files aimed at a FIFO are refused at once
-- (dshd never waits in open() for a reader), a download whose file ends
-- early (truncated while it is sent, or a sysfs file whose size is a lie)
-- ends with the connection closed, and a path component over 255 bytes is
-- invalid_argument everywhere. Everything runs in a real local sandbox,
-- except the sysfs file, which only the host has.
local D = require "helpers.dshd"
local helpers = require "helpers"
local sock = require "helpers.socket"
local loop = require "dsh.core.loop"


--- A GET of path read to the end (or until ms pass without a byte):
-- headers, the body bytes, and whether the server closed the connection.
local function download(addr, token, path, ms, before_rest)
  local fd = sock.open(addr)
  local req = D.request("GET", "/files?path=" .. path, { "X-Access-Token: " .. token })
  sock.send(fd, req)
  local got = assert(sock.recv_some(fd, 5000, 4096), "no answer")
  while not got:find("\r\n\r\n", 1, true) do got = got .. assert(sock.recv_some(fd, 5000, 4096)) end
  local st, h = D.parse_response(got)
  local body = {got:sub(got:find("\r\n\r\n", 1, true) + 4)}
  if before_rest then before_rest() end
  local closed = false
  while true do
    local b = sock.recv_some(fd, ms, 65536)
    if not b then break end
    if b == "" then
      closed = true
      break
    end
    body[#body + 1] = b
  end
  sock.close(fd)
  return st, h, table.concat(body), closed
end

describe("dshd and files that would stall it", function()
  local S = D.use_sandbox()
  local addr
  setup(function()
    addr = S:addr()
  end)

  local function sh(c, script)
    local p = assert(c:start { cmd = "/bin/bash", args = { "-c", script } })
    local r = assert(p:wait())
    p:close()
    assert.equal(0, r.exit_code, r.stderr)
    return r.stdout
  end

  it("refuses an upload to a FIFO at once, raw and multipart, and keeps serving", function()
    helpers.run(function()
      local c = S:test_client()
      sh(c, "mkfifo /home/user/fifo")
      local t = loop.now_ms()
      local ok, err = D.within(5000, "upload to a FIFO", function() return c:write_file("/home/user/fifo", "data") end)
      assert.is_nil(ok)
      assert.same({ "invalid_argument", "path '/home/user/fifo' is not a regular file" }, { err.code, err.message })
      ok, err = c:write_files { { path = "/home/user/a.txt", data = "a" }, { path = "/home/user/fifo", data = "b" } }
      assert.is_nil(ok)
      assert.same({ "invalid_argument", "path '/home/user/fifo' is not a regular file" }, { err.code, err.message })
      assert.is_true(loop.now_ms() - t < 3000)
      -- a device is no regular file either
      ok, err = c:write_file("/dev/null", "data")
      assert.is_nil(ok)
      assert.equal("path '/dev/null' is not a regular file", err.message)
      assert.equal("dir", c:stat("/home/user").type)
      sh(c, "rm -f /home/user/fifo /home/user/a.txt")
    end)
  end)

  it("refuses a spill file that is a FIFO, without waiting for a reader", function()
    helpers.run(function()
      local c = S:test_client()
      sh(c, "mkfifo /home/user/spill.fifo")
      local t = loop.now_ms()
      local p, err = D.within(5000, "Start with a FIFO spill", function()
        return c:start { cmd = "echo", args = { "hi" },
          spill = { stdout = { path = "/home/user/spill.fifo", maxBytes = 100 } } }
      end)
      assert.is_nil(p)
      assert.same({ "invalid_argument", "spill: /home/user/spill.fifo is not a regular file" },
        { err.code, err.message })
      assert.is_true(loop.now_ms() - t < 3000)
      assert.equal("dir", c:stat("/home/user").type)
      sh(c, "rm -f /home/user/spill.fifo")
    end)
  end)

  it("ends a download whose file is truncated while it is sent, closing the connection", function()
    helpers.run(function()
      local c = S:test_client()
      sh(c, "head -c 64M /dev/urandom > /home/user/big.bin")
      local st, h, body, closed = download(addr, S.token, "/home/user/big.bin", 5000, function()
        sh(c, "truncate -s 4096 /home/user/big.bin")
      end)
      assert.equal(200, st)
      assert.equal(tostring(64 * 1048576), h["content-length"])
      assert.is_true(#body < 64 * 1048576, "the whole file arrived")
      assert.is_true(closed, "the connection stayed open")
      sh(c, "rm -f /home/user/big.bin")
    end)
  end)

  it("ends a download of a sysfs file at its real end (bare dshd: the host's /sys)", function()
    helpers.run(function()
      local d = D.bare({}, { token = "t0k" })
      finally(d.stop)
      local real = assert(helpers.read_file("/sys/devices/system/cpu/online"))
      local t = loop.now_ms()
      local st, h, body, closed = download(d.addr, "t0k", "/sys/devices/system/cpu/online", 5000)
      assert.equal(200, st)
      assert.equal("4096", h["content-length"])
      assert.equal(real, body)
      assert.is_true(closed, "the connection stayed open")
      assert.is_true(loop.now_ms() - t < 4000)
    end)
  end)

  it("a path component over 255 bytes is invalid_argument, for every call that takes a path", function()
    helpers.run(function()
      local c = S:test_client()
      local long = "/home/user/" .. ("a"):rep(256) .. "/x"
      local want = "invalid path '" .. long .. "': a name is longer than 255 bytes"
      for name, call in pairs {
        stat = function() return c:stat(long) end,
        make_dir = function() return c:make_dir(long) end,
        list_dir = function() return c:list_dir(long) end,
        remove = function() return c:remove(long) end,
        move = function() return c:move("/home/user", long) end,
        create_watcher = function() return c:create_watcher(long) end,
      } do
        local ok, err = call()
        assert.is_nil(ok, name)
        assert.same({ "invalid_argument", want }, { err.code, err.message }, name)
      end
      local ok, err = c:read_file(long)
      assert.is_nil(ok)
      assert.same({ "invalid_argument", "error expanding and resolving path '" .. long .. "': " .. want },
        { err.code, err.message })
      ok, err = c:write_file(long, "x")
      assert.is_nil(ok)
      assert.same({ "invalid_argument", "error resolving path: " .. want }, { err.code, err.message })
      -- exactly 255 is a name like any other
      local fine = "/home/user/" .. ("b"):rep(255)
      assert(c:write_file(fine, "ok"))
      assert.equal("ok", c:read_file(fine))
      assert(c:remove(fine))
      -- a Start's cwd too
      local p
      p, err = c:start { cmd = "true", cwd = long }
      assert.is_nil(p)
      assert.same({ "invalid_argument", want }, { err.code, err.message })
    end)
  end)
end)
