-- The access token of a local sandbox: with it every call works; without it,
-- or with a wrong one, every RPC (unary and streaming, extensions included),
-- /files, /init and unknown paths get envd's 401 JSON, while /health stays
-- open; /files also takes envd's v1 URL signature. The token never shows up
-- in the sandbox's log, nor in any command line or environment inside the
-- sandbox, nor in a verbose dshd's log, nor in argv after --access-token.
local base64 = require "dsh.core.base64"
local D = require "helpers.dshd"
local helpers = require "helpers"
local http = require "dsh.core.http"
local json = require "dsh.json"
local sha256 = require "dsh.core.sha256"
local state = require "dsh.sandbox.state"
local sys = require "dsh.core.sysutil"

local UNAUTHORIZED = {
  code = 401,
  message = "unauthorized access, please provide a valid access token or method signing if supported",
}

local UNARY = {
  "/process.Process/List", "/process.Process/SendInput", "/process.Process/SendSignal",
  "/process.Process/CloseStdin", "/process.Process/Update", "/process.Process/GroupStatus",
  "/filesystem.Filesystem/Stat", "/filesystem.Filesystem/MakeDir", "/filesystem.Filesystem/Move",
  "/filesystem.Filesystem/ListDir", "/filesystem.Filesystem/Remove", "/filesystem.Filesystem/CreateWatcher",
  "/filesystem.Filesystem/GetWatcherEvents", "/filesystem.Filesystem/RemoveWatcher",
}
local STREAMS = {
  "/process.Process/Start", "/process.Process/Connect", "/process.Process/WatchGroup",
  "/process.Process/StreamInput", "/filesystem.Filesystem/WatchDir",
}

describe("dshd access token", function()
  local S = D.use_sandbox()

  local function fetch(h, method, path, token, ctype, body)
    local headers = {}
    if token then headers["X-Access-Token"] = token end
    if ctype then headers["Content-Type"] = ctype end
    return assert(h:fetch { method = method, url = (S.url or "http://localhost") .. path, unix_socket = S.unix_socket,
      headers = headers, body = body })
  end

  it("lets every kind of call through with the sandbox's token", function()
    helpers.run(function()
      local c = S:test_client()
      assert.is_true(#S.token >= 32)
      assert(c:health())
      assert(c:list())
      assert(c:write_file("/tmp/tok.txt", "ok"))
      assert.equal("ok", assert(c:read_file("/tmp/tok.txt")))
      assert.equal("file", assert(c:stat("/tmp/tok.txt")).type)
      local p = assert(c:start { cmd = "/bin/echo", args = { "hi" } })
      assert.equal("hi\n", assert(p:wait()).stdout)
      p:close()
      assert(c:init { envVars = { TOKEN_SPEC = "1" } })
      assert(c:remove("/tmp/tok.txt"))
      c:close()
    end)
  end)

  it("answers 401 with envd's JSON to every call without the token or with a wrong one", function()
    helpers.run(function()
      local h = http.client()
      finally(function() h:close() end)
      local rotated = S.token:sub(2) .. S.token:sub(1, 1)
      for _, token in ipairs { false, "", "wrong", S.token .. "x", S.token:sub(1, -2), rotated } do
        local what = "token " .. tostring(token)
        for _, path in ipairs(UNARY) do
          local r = fetch(h, "POST", path, token or nil, "application/json", "{}")
          assert.equal(401, r.status, path .. " " .. what)
          assert.matches("^application/json", r.headers["content-type"])
          assert.same(UNAUTHORIZED, json.decode(r.body), path)
        end
        for _, path in ipairs(STREAMS) do
          local r = fetch(h, "POST", path, token or nil, "application/connect+json", D.envelope(0, "{}"))
          assert.equal(401, r.status, path .. " " .. what)
          assert.same(UNAUTHORIZED, json.decode(r.body), path)
        end
        for _, req in ipairs {
          { "POST", "/init", "application/json", "{}" },
          { "GET", "/nowhere" }, { "POST", "/process.Process/NoSuchMethod", "application/json", "{}" },
        } do
          local r = fetch(h, req[1], req[2], token or nil, req[3], req[4])
          assert.same({ 401, UNAUTHORIZED }, { r.status, json.decode(r.body) }, req[2] .. " " .. what)
        end
        -- /files: the header, when present, must match; otherwise a signature is required
        local want_msg = token and token ~= "" and "access token present in header but does not match"
          or "missing signature query parameter"
        local g = fetch(h, "GET", "/files?path=/etc/hostname", token or nil)
        assert.same({ 401, { code = 401, message = want_msg } }, { g.status, json.decode(g.body) }, what)
        local p = fetch(h, "POST", "/files?path=/tmp/x", token or nil, "application/octet-stream", "x")
        assert.same({ 401, { code = 401, message = want_msg } }, { p.status, json.decode(p.body) }, what)
        -- health stays open
        local hr = fetch(h, "GET", "/health", token or nil)
        assert.same({ 204, "" }, { hr.status, hr.body })
      end
      -- nothing was written
      local c = S:test_client()
      local ok, err = c:stat("/tmp/x")
      assert.is_nil(ok)
      assert.equal("not_found", err.code)
      c:close()
      h:close()
    end)
  end)

  it("accepts envd's v1 URL signature on /files instead of the header", function()
    helpers.run(function()
      local h = http.client()
      finally(function() h:close() end)
      local function sig(path, op, user, exp)
        local raw = path .. ":" .. op .. ":" .. user .. ":" .. S.token .. (exp and (":" .. exp) or "")
        return "v1_" .. base64.encode(sha256.digest(raw)):gsub("=+$", "")
      end
      local function q(s) return (s:gsub("[^%w%-%._~]", function(ch) return ("%%%02X"):format(ch:byte()) end)) end
      local path = "/tmp/signed.txt"
      local w = fetch(h, "POST", "/files?path=" .. q(path) .. "&signature=" .. q(sig(path, "write", "")), nil,
        "application/octet-stream", "signed")
      assert.same({ 200, { { path = path, name = "signed.txt", type = "file" } } }, { w.status, json.decode(w.body) })
      local r = fetch(h, "GET", "/files?path=" .. q(path) .. "&signature=" .. q(sig(path, "read", "")))
      assert.same({ 200, "signed" }, { r.status, r.body })
      local exp = os.time() + 60
      r = fetch(h, "GET", "/files?path=" .. q(path) .. "&username=user&signature_expiration=" .. exp ..
        "&signature=" .. q(sig(path, "read", "user", exp)))
      assert.same({ 200, "signed" }, { r.status, r.body })
      -- a read signature does not allow a write, an expired one nothing, a wrong header overrides a good signature
      for _, case in ipairs {
        { "POST", "/files?path=" .. q(path) .. "&signature=" .. q(sig(path, "read", "")), nil, "invalid signature" },
        { "GET", "/files?path=" .. q(path) .. "&signature_expiration=" .. (os.time() - 5) .. "&signature=" ..
          q(sig(path, "read", "", os.time() - 5)), nil, "signature is already expired" },
        { "GET", "/files?path=" .. q(path) .. "&signature=" .. q(sig("/tmp/other", "read", "")), nil,
          "invalid signature" },
        { "GET", "/files?path=" .. q(path) .. "&signature=" .. q(sig(path, "read", "")), "wrong",
          "access token present in header but does not match" },
      } do
        local res = fetch(h, case[1], case[2], case[3], case[1] == "POST" and "application/octet-stream" or nil,
          case[1] == "POST" and "overwritten" or nil)
        assert.same({ 401, { code = 401, message = case[4] } }, { res.status, json.decode(res.body) }, case[2])
      end
      local c = S:test_client()
      assert.equal("signed", assert(c:read_file(path)))
      assert(c:remove(path))
      c:close()
      h:close()
    end)
  end)

  it("never leaks the token into the sandbox's log or into processes inside", function()
    helpers.run(function()
      local c = S:test_client()
      -- some traffic, rejected and accepted, first
      local bad = S:client { access_token = "wrong" }
      assert.is_nil((bad:list()))
      bad:close()
      assert(c:list())
      local log = assert(helpers.read_file(state.dir(S.id) .. "/sandbox.log"))
      assert.is_truthy(log:find("sandbox " .. S.id .. " started", 1, true)) -- the right log
      assert.is_nil(log:find(S.token, 1, true))
      -- inside: no command line, environment or file under the writable trees holds it
      -- (the pattern comes on stdin, so grep's own command line does not hold it)
      local script = [[
        pat=$(cat)
        for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do
          [ -r "$f" ] && grep -qaF -e "$pat" "$f" && echo "FOUND $f"
        done
        grep -rlaF -e "$pat" /home/user /tmp /run/dsh 2>/dev/null | sed 's/^/FOUND /'
        # the same search finds what is there: dshd's own command line
        for f in /proc/[0-9]*/cmdline; do grep -qaF /opt/dsh/bin/dshd "$f" && echo "CONTROL $f"; done
        true]]
      local p = assert(c:start { cmd = "/bin/bash", args = { "-c", script }, stdin = true })
      assert(c:send_stdin(p.pid, S.token))
      assert(c:close_stdin(p.pid))
      local r = assert(p:wait())
      p:close()
      assert.equal(0, r.exit_code)
      assert.is_nil(r.stdout:find("FOUND", 1, true), r.stdout)
      assert.matches("CONTROL /proc/%d+/cmdline", r.stdout)
      c:close()
    end)
  end)
end)

describe("dshd access token (bare dshd)", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("keeps the token out of its verbose log and out of argv", function()
    helpers.run(function()
      local token = "tok-" .. sys.random_hex(16)
      local d = D.bare({ "-v" }, { token = token, stderr = "pipe" })
      local good, bad = d.client(), d.client { access_token = "wrong-" .. token }
      assert(good:list())
      assert.is_nil((bad:list()))
      assert(good:write_file("/tmp/dsh-token-spec-" .. token, "x"))
      assert(good:remove("/tmp/dsh-token-spec-" .. token))
      good:close()
      bad:close()
      local cmdline = assert(helpers.read_file("/proc/" .. d.proc.pid .. "/cmdline"))
      assert.is_nil(cmdline:find(token, 1, true))
      local st, log = d.stop()
      assert.equal(0, st.exit_code)
      assert.matches("POST /process.Process/List %-> 200", log)
      assert.matches("POST /process.Process/List %-> 401", log)
      assert.is_nil(log:find(token, 1, true))

      -- --access-token on the command line is wiped from argv at once
      local d2 = D.bare({ "--access-token", token })
      local c2 = d2.client { access_token = token }
      assert(c2:list())
      c2:close()
      assert.is_nil(assert(helpers.read_file("/proc/" .. d2.proc.pid .. "/cmdline")):find(token, 1, true))
      d2.stop()
    end)
  end)
end)
