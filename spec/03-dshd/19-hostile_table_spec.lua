-- docs/hostile-requests.md is executable: every row's request is sent to a
-- real dshd (a local sandbox, or a bare dshd without a token) exactly as the
-- table writes it, and the answer must be the one the table writes — status,
-- message, and whether the connection is closed. Afterwards dshd is the same
-- process and still serves. A row whose request is words, not bytes, has its
-- procedure here (CUSTOM), and still its answer from the table.
local async = require "dsh.async"
local D = require "helpers.dshd"
local helpers = require "helpers"
local json = require "dsh.json"
local loop = require "dsh.core.loop"
local sys = require "dsh.core.sysutil"

local TABLE = helpers.root .. "/docs/hostile-requests.md"
local FIFO = "/home/user/h-fifo"

--- The rows: {n=, daemon=, request=<raw code span or nil>, words=, status=, message=, closed=}.
local function read_table()
  local rows = {}
  for line in assert(helpers.read_file(TABLE), "no " .. TABLE):gmatch("[^\n]+") do
    local n, daemon, request, answer = line:match("^| (%d+) | (%w+) | (.-) | (.-) |$")
    if n then
      local spans = {}
      for s in answer:gmatch("`(.-)`") do spans[#spans + 1] = s end
      rows[#rows + 1] = { n = tonumber(n), daemon = daemon, request = request:match("^`(.-)`"), words = request,
        status = spans[1], message = spans[2], closed = answer:find("closed", 1, true) ~= nil }
    end
  end
  return rows
end

--- The request's bytes: escapes, then the table's macros.
local function expand(req, token)
  local s = req:gsub("\\r", "\r"):gsub("\\n", "\n")
  s = s:gsub("\\x(%x%x)", function(h) return string.char(tonumber(h, 16)) end)
  s = s:gsub("{token}", token or ""):gsub("{fifo}", FIFO)
  s = s:gsub("{(%d+)%*(.)}", function(n, c) return c:rep(tonumber(n)) end)
  local at = s:find("{envelope ", 1, true)
  if at then
    local body = s:sub(at + #"{envelope ", #s - 1)
    assert(json.decode(body), "envelope JSON")
    s = s:sub(1, at - 1) .. D.envelope(0, body)
  end
  -- {len}: the length of the body (what follows the blank line)
  local head_end = s:find("\r\n\r\n", 1, true)
  if head_end and s:find("{len}", 1, true) then
    local n = #s - head_end - 3
    s = s:gsub("{len}", tostring(n))
  end
  return s
end

--- The answer as the table writes it: status ("none") and message.
local function answer_of(raw)
  if raw == "" then return "none", "" end
  local st, h, body = D.parse_response(raw)
  if not st then return "unparsable", raw:sub(1, 60) end
  local ct = (h["content-type"] or ""):lower()
  local msg = ""
  if ct:find("^text/plain") then
    msg = (body or ""):gsub("\n$", "")
  elseif ct:find("^application/connect%+json") then
    local envs = D.envelopes(body or "")
    local e = envs[#envs] and envs[#envs].msg.error
    msg = e and (e.code .. ": " .. e.message) or ""
  elseif ct:find("^application/json") then
    local o = json.decode(body)
    msg = type(o.code) == "string" and (o.code .. ": " .. o.message) or o.message
  end
  return tostring(st), msg
end

describe("docs/hostile-requests.md", function()
  local S = D.use_sandbox()

  local function still_serving(addr)
    local st = D.parse_response(D.raw(addr, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"))
    assert.equal(204, st)
  end

  -- Requests described in words.
  local CUSTOM = {
    [10] = function(c)
      assert(c:start { cmd = "/bin/sh", args = { "-c", "head -c 64M /dev/zero > /home/user/h-big" } }):wait()
      local f = assert(c:open_file("/home/user/h-big"))
      local p = assert(c:start { cmd = "truncate", args = { "-s", "4096", "/home/user/h-big" } })
      assert.equal(0, assert(p:wait()).exit_code)
      p:close()
      local n, err = 0
      while true do
        local chunk, e = f:read()
        if not chunk then
          err = e
          break
        end
        n = n + #chunk
      end
      f:close()
      assert(c:remove("/home/user/h-big"))
      assert.is_true(n < f.size, "the whole file arrived")
      -- libcurl reports the early end as a transport error: the connection was closed
      return "200", err and "the body ends before Content-Length" or "complete", err ~= nil
    end,
  }

  it("lists each request once, numbered in order", function()
    local rows = read_table()
    assert.is_true(#rows >= 40, #rows .. " rows")
    for i, r in ipairs(rows) do
      assert.equal(i, r.n)
      assert.truthy(r.daemon == "sandbox" or r.daemon == "tokenless", r.daemon)
      assert.truthy(r.status and r.message, "row " .. i .. ": no answer")
      assert.truthy(r.request or CUSTOM[r.n], "row " .. i .. ": neither bytes nor a procedure here")
    end
  end)

  for _, row in ipairs(read_table()) do
    it(string.format("#%d answers %s %q%s", row.n, row.status, row.message, row.closed and ", closed" or ""), function()
      helpers.run(function()
        local c = S:client()
        local bare = row.daemon == "tokenless" and D.bare({}, {}) or nil
        finally(function()
          c:close()
          if bare then bare.stop() end
        end)
        local addr = bare and bare.addr or S:addr()
        local status, message, closed
        if row.request then
          local sh = assert(c:start { cmd = "/bin/sh", args = { "-c", "rm -f " .. FIFO .. " && mkfifo " .. FIFO } })
          assert.equal(0, assert(sh:wait()).exit_code)
          sh:close()
          local t = loop.now_ms()
          local raw = D.raw(addr, expand(row.request, S.token), { timeout_ms = 8000 })
          local ms = loop.now_ms() - t
          status, message = answer_of(raw)
          -- closed by dshd: well before rawhttp's 8 s of quiet
          closed = ms < 7000
          if row.status ~= "none" and closed then
            assert.is_true(ms < 3000, "closed only after " .. ms .. " ms")
          end
        else
          status, message, closed = CUSTOM[row.n](c)
        end
        assert.equal(row.status, status)
        if row.message ~= "" then assert.equal(expand(row.message), message) end
        assert.equal(row.closed, closed, "closed")
        still_serving(addr)
        async.sleep(0)
        local rm = assert(c:start { cmd = "rm", args = { "-f", FIFO, "/home/user/h.txt" } })
        rm:wait()
        rm:close()
        if sys.exists("/tmp/h.txt") then os.remove("/tmp/h.txt") end
      end)
    end)
  end
end)
