-- The fs contract on the host filesystem (fs-local), in a fresh temp directory per test.
local context = require "dsh.context"
local helpers = require "helpers"
local lfs = require "lfs"

local function q(s)
  return "'" .. s:gsub("'", [['\'']]) .. "'"
end

-- Shell command on the host: exit code and stdout+stderr.
local function sh(cmd)
  local p = io.popen("(" .. cmd .. ") 2>&1; echo \"__rc=$?\"")
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("__rc=(%d+)\n?$"))
  return rc, (out:gsub("__rc=%d+\n?$", ""))
end

local function factory_new()
  local root = helpers.tmpdir()
  local ctx = helpers.start_context { { require "dsh.providers.fs_local", { root = root } } }
  local env = { fs = ctx.fs, root = root, sh = sh }
  env.put = helpers.write_file
  env.get = helpers.read_file
  -- root bypasses permission bits, so the immutable attribute makes rename and unlink fail
  env.lock = function(p)
    assert(sh("chattr +i -- " .. q(p)) == 0, "chattr +i needs root and ext4/xfs/btrfs")
  end
  env.unlock = function(p) sh("chattr -i -- " .. q(p)) end
  env.dispose = function()
    ctx:dispose()
    sh("chattr -R -i -- " .. q(root) .. " 2>/dev/null")
    helpers.rm_rf(root)
  end
  return env
end

require("helpers.fs_contract")("fs-local", { new = factory_new })

describe("fs-local", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("answers DISPOSED once its context was disposed", function()
    helpers.run(function()
      local ctx = helpers.start_context { require "dsh.providers.fs_local" }
      local fs = ctx.fs
      assert(fs:stat("."))
      assert(ctx:dispose())
      for _, call in ipairs { { "stat", "." }, { "readText", "x" }, { "writeText", "x", "y" }, { "makeDir", "d" },
        { "remove", "x" }, { "move", "a", "b" }, { "contains", "/", "/x" } } do
        local v, err = fs[call[1]](fs, unpack(call, 2))
        assert.is_nil(v)
        assert.same({ "DISPOSED", "dsh.fs: " .. call[1] .. ": ctx.fs is disposed" }, { err.code, err.message })
      end
      assert.equal("dsh.fs(local, cwd " .. fs.cwd .. ", disposed)", tostring(fs))
    end)
  end)

  it("validates its config and defaults root to the current directory", function()
    local p = require "dsh.providers.fs_local"
    assert.has_error(function() context.new():use(p, { root = 1 }) end,
      "fs-local: root must be a non-empty path string")
    assert.has_error(function() context.new():use(p, { cwd = "/" }) end,
      'fs-local: unknown config key "cwd" (known keys: root)')
    local ctx = context.new():use(p)
    assert(ctx:start())
    assert.equal(require("lfs").currentdir(), ctx.fs.cwd)
    assert.equal("local", ctx.fs.kind)
    ctx:dispose()
  end)

  it("resolves like realpath -m", function()
    local p = require "dsh.providers.fs_local"
    local root = helpers.tmpdir()
    finally(function() helpers.rm_rf(root) end)
    local links = {
      l = "d/e", ["d/e/up"] = "../../x", abs = "/nonexistent/a", la = "lb", lb = "la", dot = ".",
      self = "self", u = "d/e/up2", ["d/e/up2"] = "../../u/z",
    }
    os.execute("mkdir -p " .. root .. "/d/e")
    for link, target in pairs(links) do assert(lfs.link(target, root .. "/" .. link, true)) end
    -- coreutils never finishes this one (the remaining path grows every round); we stop
    local key, err = p.realpath_m(root .. "/u")
    assert.is_nil(key)
    assert.equal("realpath: Too many levels of symbolic links", err.message)
    for _, rel in ipairs { "l", "l/..", "l/up", "l/up/../y", "abs/b", "d/e/missing/../f", "d/./e", "la",
      "la/x/../y", "dot/dot/f", "dot/l/up", "self", "self/x", "lb/../la/./m" } do
      local path = root .. "/" .. rel
      local f = io.popen("realpath -m -- '" .. path .. "'")
      local want = f:read("*l")
      f:close()
      assert.equal(want, p.realpath_m(path), rel)
    end
  end)
end)
