-- The LuaJIT that runs dsh iterates a table whole under the JIT.
--
-- bookworm's luajit package (git 2022-03-20) ends a pairs() loop early once
-- the loop's trace is blacklisted and ITERN is patched back to ITERC while a
-- loop is running (LuaJIT issue 827, fixed after that snapshot): a table
-- copied with pairs() then silently lacks keys. It showed as a start request
-- whose options had lost `cmd` after hours of load. scripts/install-deps
-- installs luajit2 (the OpenResty-maintained branch) instead; this spec runs
-- the issue's reduced case in the interpreter on PATH, the one dsh runs under.
local helpers = require "helpers"
local proc = require "dsh.core.proc"

local SCRIPT = [[
local t = { 1, 2, 3, 4, 5 }
local tab = { a = t, b = t, c = t, d = t, e = t }
local function f(...) for _ = 1, 100 do end end -- a vararg call: back to the interpreter each round
for i = 1, 100000 do
  f()
  local c = 0
  for _, v in pairs(tab) do -- blacklisted in time, and patched while it runs
    for _ in pairs(v) do end
    c = c + 1
  end
  if c ~= 5 then
    io.stdout:write("round ", i, ": pairs() gave ", c, " of 5 keys\n")
    os.exit(1)
  end
end
io.stdout:write("whole\n")
]]

describe("the LuaJIT dsh runs under", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("never ends a pairs() loop early (LuaJIT issue 827)", function()
    helpers.run(function()
      local p = assert(proc.spawn { argv = { "luajit", "-e", SCRIPT }, env = { PATH = os.getenv("PATH") },
        stdout = "pipe", stderr = "pipe" })
      local out, err = p:read_all(), p:read_all("stderr")
      local st = p:wait()
      p:close()
      assert.equal("whole\n", out, "this luajit loses table keys under the JIT (install luajit2: "
        .. "scripts/install-deps): " .. out .. tostring(err))
      assert.equal(0, st.exit_code)
    end)
  end)
end)
