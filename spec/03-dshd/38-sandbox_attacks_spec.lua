-- The sandbox-side table of docs/hostile-requests.md is executable: each
-- row's command runs in a real local sandbox as the row says (`user`, or the
-- sandbox's root), and its exit status and output must be the table's. The
-- probe fixture is uploaded first; a listener on the host's loopback stands
-- for every host service a sandbox must not reach.
local D = require "helpers.dshd"
local helpers = require "helpers"
local sys = require "dsh.core.sysutil"

local TABLE = helpers.root .. "/docs/hostile-requests.md"

--- The rows: {n=, as=, command=, code=, text=}.
local function read_table()
  local rows = {}
  local text = assert(helpers.read_file(TABLE), "no " .. TABLE)
  for line in text:gmatch("[^\n]+") do
    local n, as, command, answer = line:match("^| (S%d+) | (%w+) | `(.-)` | (.-) |$")
    if n then
      local spans = {}
      for s in answer:gmatch("`(.-)`") do spans[#spans + 1] = s end
      rows[#rows + 1] = { n = n, as = as, command = command:gsub("\\|", "|"), code = tonumber(spans[1]),
        text = spans[2] }
    end
  end
  return rows
end

describe("docs/hostile-requests.md, attacks from inside a sandbox", function()
  local rows = read_table()
  it("has the rows the spec runs", function()
    assert.is_true(#rows >= 20, #rows .. " rows")
  end)
  if sys.getuid() ~= 0 then
    it("runs as root (the disk limit needs it)", function()
      print("\n  [38-sandbox_attacks] skipped: run as root, as make test does here")
    end)
    return
  end
  local S = D.use_sandbox {}

  for _, row in ipairs(rows) do
    it(row.n .. " as " .. row.as .. ": " .. row.command, function()
      helpers.run(function()
        local listener = D.bare() -- a host service on the host's loopback
        finally(listener.stop)
        local port = listener.addr:match(":(%d+)$")
        local c = S:client { user = row.as }
        assert(c:write_file("/tmp/probe", assert(helpers.read_file(helpers.build .. "/bin/fixture-probe"))))
        local cmd = row.command:gsub("{port}", port):gsub("{state}", sys.state_dir())
        local p = assert(c:start { cmd = "/bin/bash", args = { "-c", "chmod 0755 /tmp/probe; " .. cmd } })
        local r = assert(p:wait())
        p:close()
        c:close()
        local out = r.stdout .. r.stderr
        assert.equal(row.code, r.exit_code, out)
        assert.is_truthy(out:find(row.text, 1, true), "expected " .. row.text .. " in: " .. out)
        -- and dshd is still the sandbox's, serving
        local again = S:client()
        assert.same({ "alive\n" }, { assert(assert(again:start { cmd = "echo", args = { "alive" } }):wait()).stdout })
        again:close()
      end)
    end)
  end
end)
