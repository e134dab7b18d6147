-- Malformed requests to a sandbox's dshd, sent byte for byte with
-- spec/fixtures/rawhttp.c: each gets the right status, Connect code and
-- message (or the connection is dropped), and afterwards dshd still serves
-- /health and a real RPC, from the same process.
local D = require "helpers.dshd"
local helpers = require "helpers"
local json = require "dsh.json"

describe("dshd and malformed requests", function()
  local S = D.use_sandbox()
  local addr, T, dshd_pid
  setup(function()
    addr = S:addr()
    T = "X-Access-Token: " .. S.token
    dshd_pid = D.dshd_pid(S.id)
  end)

  -- dshd is the same process and answers /health and a Stat.
  local function still_serving()
    assert.equal(dshd_pid, D.dshd_pid(S.id))
    local st, h = D.parse_response(D.raw(addr, D.request("GET", "/health", { "Connection: close" })))
    assert.equal(204, st)
    assert.equal("no-store", h["cache-control"])
    local c = S:client()
    local e = c:stat("/home/user")
    c:close()
    assert.same({ "/home/user", "dir" }, { e and e.path, e and e.type })
  end

  -- A unary request; returns status, headers, decoded JSON body.
  local function unary(path, headers, body, method)
    local hs = { T, "Connection: close" }
    for _, h in ipairs(headers or {}) do hs[#hs + 1] = h end
    local st, h, b = D.parse_response(D.raw(addr, D.request(method or "POST", path, hs, body)))
    return st, h, b and json.decode(b)
  end

  -- A server-stream request; returns status and the envelopes.
  local function stream(path, headers, body)
    local hs = { T, "Connection: close", "Content-Type: application/connect+json" }
    for _, h in ipairs(headers or {}) do hs[#hs + 1] = h end
    local st, h, b = D.parse_response(D.raw(addr, D.request("POST", path, hs, body)))
    assert.equal("application/connect+json", h["content-type"])
    return st, D.envelopes(b)
  end

  local J = "Content-Type: application/json"

  it("bad JSON and non-objects: invalid_argument", function()
    helpers.run(function()
      for body, msg in pairs {
        ['{"path":'] = "invalid JSON in request message: unexpected token near end of file (line 1, column 8)",
        ["[1,2]"] = "invalid request message: expected a JSON object",
        [""] = false, ['{"path":5}'] = false,
      } do
        local st, h, b = unary("/filesystem.Filesystem/Stat", { J }, body)
        assert.equal(400, st, body)
        assert.equal("application/json", h["content-type"])
        assert.equal("invalid_argument", b.code, body)
        if msg then assert.equal(msg, b.message) else assert.is_true(#b.message > 0) end
        still_serving()
      end
    end)
  end)

  it("unknown fields are ignored", function()
    helpers.run(function()
      local st, _, b = unary("/filesystem.Filesystem/Stat", { J }, '{"path":"/tmp","bogus":[1,{"x":null}],"more":true}')
      assert.same({ 200, "/tmp", "FILE_TYPE_DIRECTORY" }, { st, b.entry.path, b.entry.type })
      still_serving()
    end)
  end)

  it("oversized bodies and envelopes: resource_exhausted", function()
    helpers.run(function()
      -- a Content-Length over the limit is answered at once, before any body
      local st, _, b = unary("/filesystem.Filesystem/Stat", { J, "Content-Length: 100000000" }, '{"pa')
      assert.same({ 429, { code = "resource_exhausted",
        message = "request body of 100000000 bytes exceeds the 67108864-byte limit" } }, { st, b })
      still_serving()
      -- an envelope that announces 2 GiB, on a stream: the end envelope says so
      local est, envs = stream("/filesystem.Filesystem/WatchDir", nil, "\0\127\255\255\255{}")
      assert.same({ 200, { { flags = 2, msg = { error = { code = "resource_exhausted",
        message = "envelope of 2147483647 bytes exceeds the 67108864-byte limit" } } } } }, { est, envs })
      still_serving()
    end)
  end)

  it("invalid base64 in input.stdin: invalid_argument, and the process is unaffected", function()
    helpers.run(function()
      local c = S:test_client()
      local p = assert(c:start { cmd = "cat", stdin = true })
      for _, bad in ipairs { "a b!", "@@@@", "YWJj=x" } do
        local st, _, b = unary("/process.Process/SendInput", { J },
          json.encode { process = { pid = p.pid }, input = { stdin = bad } })
        assert.equal(400, st, bad)
        assert.equal("invalid_argument", b.code, bad)
        assert.matches("base64", b.message)
        still_serving()
      end
      -- padded, unpadded and URL-safe base64 are all fine
      for _, good in ipairs { "YWI=", "Yw", "_-8" } do
        local st = unary("/process.Process/SendInput", { J },
          json.encode { process = { pid = p.pid }, input = { stdin = good } })
        assert.equal(200, st, good)
      end
      assert(c:close_stdin(p.pid))
      assert.equal("abc\255\239", assert(p:wait()).stdout)
      p:close()
      c:close()
    end)
  end)

  it("wrong content types: 415 invalid_argument", function()
    helpers.run(function()
      local st, _, b = unary("/filesystem.Filesystem/Stat", { "Content-Type: text/plain" }, '{"path":"/"}')
      assert.same({ 415, { code = "invalid_argument",
        message = 'unsupported content type "text/plain": expected application/json' } }, { st, b })
      still_serving()
      st, _, b = unary("/filesystem.Filesystem/WatchDir", { J }, D.envelope(0, '{"path":"/"}'))
      assert.same({ 415, { code = "invalid_argument",
        message = 'unsupported content type "application/json": expected application/connect+json' } }, { st, b })
      still_serving()
      st, _, b = unary("/filesystem.Filesystem/Stat", {}, '{"path":"/"}')
      assert.equal(415, st)
      assert.equal("invalid_argument", b.code)
      still_serving()
      -- a charset parameter is fine
      st = unary("/filesystem.Filesystem/Stat", { "Content-Type: application/json; charset=utf-8" }, '{"path":"/"}')
      assert.equal(200, st)
    end)
  end)

  it("huge headers: 431", function()
    helpers.run(function()
      local r = D.raw(addr, D.request("POST", "/filesystem.Filesystem/Stat",
        { T, J, "X-Big: " .. ("a"):rep(300000), "Connection: close" }, '{"path":"/"}'))
      assert.equal(431, (D.parse_response(r)))
      still_serving()
    end)
  end)

  it("truncated bodies and clients that go away mid-request", function()
    helpers.run(function()
      -- the client closes in the middle of a body
      D.raw(addr, D.request("POST", "/filesystem.Filesystem/Stat", { T, J, "Content-Length: 100" }, '{"pa'),
        { close = true })
      still_serving()
      D.raw(addr, D.request("POST", "/process.Process/Start", { T, "Content-Type: application/connect+json",
        "Content-Length: 50" }, "\0\0"), { close = true })
      still_serving()
      D.raw(addr, D.request("POST", "/files?path=/tmp/trunc.txt", { T, "Content-Type: application/octet-stream",
        "Transfer-Encoding: chunked" }, "5\r\nhello\r\n"), { close = true })
      still_serving()
      -- a complete body holding a cut envelope
      local st, envs = stream("/filesystem.Filesystem/WatchDir", nil, D.envelope(0, '{"path":"/"}'):sub(1, 8))
      assert.same({ 200, { { flags = 2, msg = { error = { code = "invalid_argument",
        message = "protocol error: incomplete envelope" } } } } }, { st, envs })
      still_serving()
      -- two envelopes where one is expected
      st, envs = stream("/filesystem.Filesystem/WatchDir", nil, D.envelope(0, '{"path":"/"}') .. D.envelope(0, "{}"))
      assert.equal(200, st)
      assert.equal("invalid_argument", envs[1].msg.error.code)
      still_serving()
      -- garbage instead of HTTP: the connection is dropped, nothing else
      D.raw(addr, "GARBAGE\r\n\r\n")
      D.raw(addr, ("\0\1\2\3"):rep(1000))
      still_serving()
    end)
  end)

  it("compressed envelopes and encodings: refused", function()
    helpers.run(function()
      local st, envs = stream("/filesystem.Filesystem/WatchDir", nil, D.envelope(1, '{"path":"/"}'))
      assert.same({ 200, { { flags = 2, msg = { error = { code = "invalid_argument",
        message = "compressed envelopes are not supported" } } } } }, { st, envs })
      still_serving()
      local ust, _, b = unary("/filesystem.Filesystem/Stat", { J, "Content-Encoding: gzip" }, '{"path":"/"}')
      assert.same({ 501, { code = "unimplemented",
        message = 'unknown compression "gzip": supported encodings are identity' } }, { ust, b })
      still_serving()
      st, envs = stream("/filesystem.Filesystem/WatchDir", { "Connect-Timeout-Ms: abc" }, D.envelope(0, '{"path":"/"}'))
      assert.same({ 200, { { flags = 2, msg = { error = { code = "invalid_argument",
        message = 'protocol error: invalid Connect-Timeout-Ms header "abc"' } } } } }, { st, envs })
      still_serving()
    end)
  end)

  it("GET on an RPC path: 405; an unknown path: 404", function()
    helpers.run(function()
      local st, h, b = unary("/filesystem.Filesystem/Stat", {}, nil, "GET")
      assert.same({ 405, "POST", { code = 405, message = "method GET not allowed" } }, { st, h.allow, b })
      still_serving()
      for _, path in ipairs { "/nope", "/process.Process/NoSuchMethod", "/filesystem.Filesystem" } do
        local r = D.raw(addr, D.request("POST", path, { T, J, "Connection: close" }, "{}"))
        local rst, rh, rb = D.parse_response(r)
        assert.same({ 404, "404 page not found\n" }, { rst, rb }, path)
        assert.matches("^text/plain", rh["content-type"])
        still_serving()
      end
    end)
  end)
end)
