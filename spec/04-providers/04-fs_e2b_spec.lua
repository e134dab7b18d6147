-- The fs contract inside a real local sandbox (dshd in bubblewrap): ctx.e2b
-- with its default (local) backend plus fs-e2b, a fresh sandbox per test.
local context = require "dsh.context"
local D = require "helpers.dshd"
local helpers = require "helpers"
local sandbox = require "dsh.sandbox"

-- Local sandboxes of this file live under an isolated $DSH_STATE_DIR.
D.isolated_state()

local function q(s)
  return "'" .. s:gsub("'", [['\'']]) .. "'"
end

local function dirname(p)
  return p:match("^(.*)/[^/]*$")
end

local function factory_new()
  local ctx = helpers.start_context { { require "dsh.providers.e2b", {} }, require "dsh.providers.fs_e2b" }
  local e2b = ctx.e2b
  local envd = assert(e2b:getSandbox()).envd
  local function sh(cmd)
    local r, rerr = e2b:exec { "/bin/sh", "-c", cmd }
    if not r then return -1, tostring(rerr) end
    return r.exit_code, r.stdout .. r.stderr
  end
  local root = e2b.cwd .. "/t" .. require("dsh.core.sysutil").random_hex(4)
  assert(sh("mkdir -p -- " .. q(root)) == 0)
  local env = { fs = ctx.fs, root = root, sh = sh }
  env.run = function(cmd)
    local code, out = sh(cmd)
    assert(code == 0, cmd .. ": " .. out)
    return out
  end
  env.put = function(p, data) assert(envd:write_file(p, data)) end
  env.get = function(p)
    local data, gerr = envd:read_file(p)
    if not data and gerr.code ~= "not_found" then error(tostring(gerr), 2) end
    return data
  end
  -- dshd runs as the unprivileged sandbox user: a read-only directory refuses
  -- renames into it and removals from it
  env.lock = function(p) assert(sh("chmod 555 -- " .. q(dirname(p))) == 0) end
  env.unlock = function(p) sh("chmod 755 -- " .. q(dirname(p))) end
  env.tag = function(p)
    local e = assert(envd:stat(p))
    return e.metadata and e.metadata["dsh-version"]
  end
  -- a paused sandbox is resumed by the next call: pause it and spoil its
  -- record, so that it cannot be (its files stay, its daemon is gone)
  env.breakTransport = function()
    local id = assert(e2b:sandboxId())
    assert(sandbox.pause(id))
    helpers.write_file(require("dsh.sandbox.state").dir(id) .. "/meta.json", "{")
  end
  env.dispose = function() assert(ctx:dispose()) end
  return env
end

require("helpers.fs_contract")("fs-e2b", { new = factory_new, transport = true })

describe("fs-e2b", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("takes no config and injects ctx.e2b", function()
    local p = require "dsh.providers.fs_e2b"
    assert.has_error(function() context.new():use(p, { cwd = "/" }) end,
      'fs-e2b: unknown config key "cwd" (it takes no config)')
    assert.same({ "e2b" }, p.inject)
    assert.equal("fs", p.provides)
  end)

  it("is not set up when ctx.e2b is missing", function()
    local ctx = context.new():use(require "dsh.providers.fs_e2b")
    local ok, err = ctx:start()
    assert.is_nil(ok)
    assert.equal("DEPENDENCY_MISSING", err.code)
    ctx:dispose()
  end)

  it("stops a realpath that never ends (a growing symlink cycle) after its timeout", function()
    local p = require "dsh.providers.fs_e2b"
    helpers.run(function()
      local env = factory_new()
      local saved = p.REALPATH_TIMEOUT_MS
      p.REALPATH_TIMEOUT_MS = 300
      local ok, err = pcall(function()
        env.run("cd " .. q(env.root) .. " && mkdir -p d/e && ln -s d/e/up2 u && ln -s ../../u/z d/e/up2")
        local v, rerr = env.fs:stat(env.root .. "/u")
        assert.is_nil(v)
        assert.equal("FS_IO_ERROR", rerr.code)
        assert.equal('cannot stat "' .. env.root .. '/u": realpath did not finish within 300 ms'
          .. " (too many levels of symbolic links?)", rerr.message)
        -- the daemon kills it at the deadline; it may take a moment to be reaped
        local left
        helpers.eventually(function()
          left = env.run("pgrep -x realpath || true")
          return left == ""
        end, 30000)
        assert.equal("", left)
      end)
      p.REALPATH_TIMEOUT_MS = saved
      env.dispose()
      assert(ok, err)
    end)
  end)

  it("works relative to the sandbox cwd and sees what processes see", function()
    helpers.run(function()
      local env = factory_new()
      local fs = env.fs
      local ok, err = pcall(function()
        assert.equal("/home/user/workspace", fs.cwd)
        assert.equal("create", assert(fs:writeText("rel.txt", "from fs")).operation)
        local code, out = env.sh("cat /home/user/workspace/rel.txt")
        assert.same({ 0, "from fs" }, { code, out })
        assert.equal(0, (env.sh("printf 'from sh' > /home/user/workspace/sh.txt")))
        assert.equal("from sh", assert(fs:readText("sh.txt")).text)
        assert.equal("/home/user/workspace/rel.txt", fs:processPath("rel.txt"))
        assert.equal("file:///home/user/workspace/rel.txt", fs:fileUrl("rel.txt"))
      end)
      env.dispose()
      assert(ok, err)
    end)
  end)
end)
