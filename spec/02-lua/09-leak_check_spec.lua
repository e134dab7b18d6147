-- helpers.assert_clean, the check every spec ends each test with, catches
-- what it promises to catch: each kind of leftover is made on purpose here
-- and the check must fail naming it (then the leftover is cleaned up).
local D = require "helpers.dshd"
local helpers = require "helpers"
local loop = require "dsh.loop"
local proc = require "dsh.proc"

-- assert_clean's failure message (it must fail).
local function unclean()
  local ok, err = pcall(helpers.assert_clean)
  assert.is_false(ok, "assert_clean passed")
  return tostring(err)
end

describe("helpers.assert_clean", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("fails on a dsh object still open", function()
    local t = loop.timer(function() end)
    assert.matches("live dsh objects after the test: timer=1", unclean())
    t:close()
  end)

  it("fails on an object collected while still open, which the weak registry alone forgets", function()
    do
      local t = loop.timer(function() end)
      t:start(100000)
    end
    for _ = 1, 3 do collectgarbage() end
    assert.is_nil(loop.live().timer) -- gone from the registry...
    assert.matches("garbage%-collected while still open %(never closed%): dsh%.timer%(%d+%)", unclean())
  end)

  it("fails on an fd left open", function()
    local f = assert(io.open(helpers.root .. "/README.md", "rb"))
    assert.matches("leaked fds: %d+", unclean())
    f:close()
  end)

  it("fails on a process group left with members, naming it", function()
    helpers.run(function()
      local p = assert(proc.spawn { argv = { "/bin/sh", "-c", "sleep 30 & exec sleep 30" } })
      loop.untrack(p) -- as if it had been closed without its group being killed
      local msg = unclean()
      assert.matches("process groups started by the test still have members: " .. p.pid, msg, 1, true)
      loop.track(p, "proc")
      p:close()
      assert.is_truthy(helpers.eventually(function() return not helpers.group_alive(p.pid) end))
    end)
  end)

  it("fails on an error code missing from the catalogue, made by the library", function()
    local lib = debug.getinfo(require("dsh.errors").new, "S").source:match("^@(.*/)[^/]*$")
    local chunk = assert(loadstring([[local e = require("dsh.errors").new("NOT_CATALOGUED", "m") return e]],
      "@" .. lib .. "imagined_module.lua"))
    chunk()
    assert.matches("missing from dsh.errors.CATALOGUE: NOT_CATALOGUED %(made at .*imagined_module%.lua:1%)",
      unclean())
  end)
end)

describe("helpers.assert_clean with a sandbox (helpers.dshd.use_sandbox)", function()
  local S = D.use_sandbox()

  it("fails on a process left running in the sandbox, and kills it", function()
    helpers.run(function()
      local c = S:client()
      local p = assert(c:start { cmd = "/bin/sleep", args = { "30" } })
      p:close() -- disconnects; the process keeps running in the sandbox
      c:close()
    end)
    assert.matches('processes left in the sandbox: .*"args":%["30"%]', unclean())
    helpers.run(function()
      local c = S:client()
      assert.same({}, assert(c:list()))
      c:close()
    end)
  end)
end)
