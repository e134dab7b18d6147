-- dsh.core.http when the core cancels a transfer that no Lua abort signal stopped
-- (as dsh_http_free does for a client's live requests): the response maps the
-- core's DSH_ECANCELED to ABORTED with the core's message. Driven through the
-- binding (dsh.core._ffi) because no public call cancels without a signal, which
-- takes its own branch first.
local F = require "dsh.core._ffi"
local helpers = require "helpers"
local http = require "dsh.core.http"
local proc = require "dsh.core.proc"

describe("dsh.core.http, a transfer canceled by the core", function()
  local dir, server, base

  setup(function()
    dir = helpers.tmpdir()
  end)

  teardown(function()
    helpers.rm_rf(dir)
  end)

  before_each(function()
    helpers.snapshot()
    local p = assert(proc.spawn { argv = { helpers.fixture("httpd"), dir .. "/httpd.sock" }, stderr = "inherit" })
    local out = ""
    while not out:match("^%d+\n%d+\n") do
      local chunk, err = p:read()
      assert(chunk, "fixture-httpd did not start: " .. tostring(err))
      out = out .. chunk
    end
    server = p
    base = "http://127.0.0.1:" .. out:match("^(%d+)\n")
  end)

  after_each(function()
    server:terminate(2000)
    server:wait()
    server:close()
    helpers.assert_clean()
  end)

  it("ends a response being read with ABORTED", function()
    local c = http.client()
    finally(function() c:close() end)
    local url = base .. "/slow?n=100&delay_ms=20"
    local res = assert(c:request { url = url })
    assert(res:read())
    assert.equal(0, F.C.dsh_http_cancel(res._ptr))
    local chunk, err = res:read()
    assert.is_nil(chunk)
    assert.equal("ABORTED", err.code)
    assert.equal("GET " .. url .. ": canceled", err.message)
    assert.is_nil(err.status) -- not reported as a transport failure
    assert.matches("done%)$", tostring(res))
    chunk, err = res:body()
    assert.is_nil(chunk)
    assert.equal("ABORTED", err.code)
    res:close()
    c:close()
  end)

  it("ends a streamed request body with ABORTED", function()
    local c = http.client()
    finally(function() c:close() end)
    local url = base .. "/echo"
    local res = assert(c:request { method = "POST", url = url, body_stream = true })
    assert.is_true(res:write("part one"))
    assert.equal(0, F.C.dsh_http_cancel(res._ptr))
    local ok, err = res:write("part two")
    assert.is_nil(ok)
    assert.equal("ABORTED", err.code)
    assert.equal("POST " .. url .. ": canceled", err.message)
    ok, err = res:head()
    assert.is_nil(ok)
    assert.equal("ABORTED", err.code)
    res:close()
    c:close()
  end)
end)
