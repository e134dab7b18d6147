-- helpers.assert_clean, the check every spec ends each test with, catches
-- what it promises to catch: each kind of leftover is made on purpose here
-- and the check must fail naming it (then the leftover is cleaned up).
local D = require "helpers.dshd"
local helpers = require "helpers"
local loop = require "dsh.core.loop"
local proc = require "dsh.core.proc"
local sys = require "dsh.core.sysutil"

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

-- The process-group probe assert_clean and the specs rely on: a probe that
-- always said "gone" would let every leftover group pass unseen.
describe("helpers.group_alive", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  -- "true" or "false": group_alive(pgid) asked by a process running as uid.
  local function probe_as(uid, pgid)
    local p = assert(proc.spawn {
      argv = { "setpriv", "--reuid=" .. uid, "--regid=" .. uid, "--clear-groups", "--", "luajit", "-e",
        "io.write(tostring(require('helpers').group_alive(" .. pgid .. ")))" },
      env = { PATH = os.getenv("PATH"), LUA_PATH = package.path, DSH_BUILD_DIR = helpers.build, PWD = helpers.root },
      stdout = "pipe", stderr = "pipe",
    })
    local out, err = p:read_all(), p:read_all("stderr")
    p:wait()
    p:close()
    return out .. err
  end

  it("is true while a group has members, also after its leader exited, and false once it is gone", function()
    helpers.run(function()
      local p = assert(proc.spawn { argv = { "/bin/sh", "-c", "sleep 30 >/dev/null & echo started" }, stdout = "pipe" })
      assert.equal("started\n", p:read_all())
      assert.equal(0, p:wait().exit_code) -- the leader is gone; its background sleep keeps the group
      assert.is_true(helpers.group_alive(p.pid))
      assert.is_false(p:quiescent())
      p:close() -- kills what is left of the group
      assert.is_truthy(helpers.eventually(function() return not helpers.group_alive(p.pid) end))
      assert.is_true(p:status().closed)
    end)
  end)

  it("is true for a group whose members it may not signal (another user's)", function()
    if sys.getuid() ~= 0 then
      return -- without root there is no other user to ask as; the group below would be our own
    end
    helpers.run(function()
      local p = assert(proc.spawn { argv = { "sleep", "30" } })
      assert.equal("true", probe_as(65534, p.pid)) -- refused (EPERM), yet alive
      p:close()
      assert.is_truthy(helpers.eventually(function() return not helpers.group_alive(p.pid) end))
      assert.equal("false", probe_as(65534, p.pid))
    end)
  end)
end)
