-- Requests whose HTTP framing is ambiguous or broken, sent byte for byte to a
-- sandbox's dshd (spec/fixtures/rawhttp.c): behind a proxy each of them could
-- smuggle a second request, so dshd refuses them at once with a plain-text
-- error and closes the connection (issue 7, items 5 and 13). A chunk-size
-- line longer than libmicrohttpd's read buffer once pinned a CPU for the
-- 640 s connection timeout; now the connection is dropped within seconds.
-- After each, dshd is the same process and still serves.
local D = require "helpers.dshd"
local helpers = require "helpers"
local loop = require "dsh.core.loop"
local sys = require "dsh.core.sysutil"

--- CPU seconds used so far by a host pid (utime + stime).
local function cpu_s(pid)
  local stat = assert(sys.read_file("/proc/" .. pid .. "/stat"))
  local fields = {}
  for f in stat:match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = f end
  return (tonumber(fields[12]) + tonumber(fields[13])) / 100
end

describe("dshd and ambiguous HTTP framing", function()
  local S = D.use_sandbox()
  local addr, T, dshd_pid
  setup(function()
    addr = S:addr()
    T = "X-Access-Token: " .. S.token
    dshd_pid = D.dshd_pid(S.id)
  end)

  local function still_serving()
    assert.equal(dshd_pid, D.dshd_pid(S.id))
    local c = S:client()
    local e = c:stat("/home/user")
    c:close()
    assert.same({ "/home/user", "dir" }, { e and e.path, e and e.type })
  end

  -- Sends raw bytes; returns status, headers, body, the time until the
  -- server closed (rawhttp stops after quiet_ms without a byte otherwise).
  local function send(bytes, quiet_ms)
    local t = loop.now_ms()
    local out = D.raw(addr, bytes, { timeout_ms = quiet_ms or 8000 })
    local elapsed = loop.now_ms() - t
    local st, h, b = D.parse_response(out)
    return st, h, b, elapsed, out
  end

  -- Each refusal: status, plain-text message, Connection: close, and the
  -- connection really closed (well before rawhttp's 8 s quiet time).
  local function refused(bytes, status, message)
    local st, h, b, elapsed = send(bytes)
    assert.equal(status, st)
    assert.equal("text/plain; charset=utf-8", h["content-type"])
    assert.equal("close", (h["connection"] or ""):lower())
    assert.equal(message, b)
    assert.is_true(elapsed < 5000, "the connection stayed open for " .. elapsed .. " ms")
    still_serving()
  end

  local upload = "POST /files?path=/home/user/framing.txt HTTP/1.1\r\nHost: localhost\r\n"
  local octets = "Content-Type: application/octet-stream\r\n"

  it("an unknown Transfer-Encoding gets 501", function()
    helpers.run(function()
      refused(upload .. T .. "\r\n" .. octets .. "Transfer-Encoding: gzip\r\n\r\nabc", 501,
        "501 Not Implemented: unsupported Transfer-Encoding \"gzip\"\n")
      refused(upload .. T .. "\r\n" .. octets .. "Transfer-Encoding: chunked, gzip\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 501,
        "501 Not Implemented: unsupported Transfer-Encoding \"chunked, gzip\"\n")
      -- a second Transfer-Encoding header is just as unknown
      refused(upload .. T .. "\r\n" .. octets .. "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n"
        .. "3\r\nabc\r\n0\r\n\r\n", 501, "501 Not Implemented: unsupported Transfer-Encoding \"identity\"\n")
      assert.is_nil(sys.read_file(S:home() .. "/framing.txt"))
    end)
  end)

  it("chunked together with Content-Length, and two different Content-Lengths: 400", function()
    helpers.run(function()
      refused(upload .. T .. "\r\n" .. octets .. "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
        .. "3\r\nabc\r\n0\r\n\r\n", 400,
        "400 Bad Request: both Transfer-Encoding and Content-Length\n")
      refused(upload .. T .. "\r\n" .. octets .. "Content-Length: 3\r\nContent-Length: 5\r\n\r\nabcde", 400,
        "400 Bad Request: conflicting Content-Length headers\n")
      assert.is_nil(sys.read_file(S:home() .. "/framing.txt"))
      -- the same Content-Length twice is one length (as Go's server has it)
      local st, _, b = send(upload .. T .. "\r\n" .. octets .. "Content-Length: 3\r\nContent-Length: 3\r\n"
        .. "Connection: close\r\n\r\nabc")
      assert.equal(200, st, b)
      assert.equal("abc", sys.read_file(S:home() .. "/framing.txt"))
      os.remove(S:home() .. "/framing.txt")
    end)
  end)

  it("HTTP/1.1 without Host: 400; HTTP/1.0 needs none", function()
    helpers.run(function()
      refused("GET /health HTTP/1.1\r\n\r\n", 400, "400 Bad Request: missing required Host header\n")
      refused("POST /filesystem.Filesystem/Stat HTTP/1.1\r\n" .. T .. "\r\nContent-Type: application/json\r\n"
        .. "Content-Length: 2\r\n\r\n{}", 400, "400 Bad Request: missing required Host header\n")
      local st = send("GET /health HTTP/1.0\r\n\r\n")
      assert.equal(204, st)
    end)
  end)

  it("a chunk-size line longer than the read buffer: dropped at once, no CPU burnt", function()
    helpers.run(function()
      local c0 = cpu_s(dshd_pid)
      local _, _, _, elapsed, out = send("POST /files?path=/home/user/chunky.txt HTTP/1.1\r\nHost: localhost\r\n"
        .. T .. "\r\n" .. octets .. "Transfer-Encoding: chunked\r\n\r\n" .. ("0"):rep(200 * 1024))
      -- no answer can be sent in the middle of a body: the connection is closed
      assert.equal("", out)
      assert.is_true(elapsed < 3000, "the connection stayed open for " .. elapsed .. " ms")
      -- dshd notices within a fraction of a second that it spins on it
      local spent = cpu_s(dshd_pid) - c0
      assert.is_true(spent < 1, string.format("dshd used %.2f CPU-s in %d ms", spent, elapsed))
      still_serving()
      -- and the same cost afterwards: nothing keeps spinning
      local c1 = cpu_s(dshd_pid)
      require("dsh.async").sleep(1000) -- a second of doing nothing
      assert.is_true(cpu_s(dshd_pid) - c1 < 0.3, "dshd keeps using CPU")
      os.remove(S:home() .. "/chunky.txt")
    end)
  end)
end)
