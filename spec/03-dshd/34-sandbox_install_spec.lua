-- Local sandboxes work from an installed tree (cmake --install, the layout
-- luarocks deploys too: share/lua/5.1, lib/lua/5.1/libdsh.so, bin/dshd), with
-- no build directory and no DSH_* variable in sight; and dsh.sandbox finds
-- dshd without reaching into the FFI binding (issue 8, §1).
local helpers = require "helpers"
local lfs = require "lfs"
local proc = require "dsh.core.proc"

local function run(argv, env, cwd)
  local p = assert(proc.spawn { argv = argv, env = env, cwd = cwd })
  local err_task = require("dsh.async").run(function() return p:read_all("stderr") end)
  local out = p:read_all()
  local err = err_task:await()
  local st = p:wait()
  p:close()
  return st.exit_code, out, err
end

describe("dsh.sandbox installed", function()
  local prefix
  setup(function() prefix = helpers.tmpdir() end)
  teardown(function() helpers.rm_rf(prefix) end)
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("creates a sandbox from an installed tree with nothing of the build around", function()
    helpers.run(function()
      local code, out, err = run({ "cmake", "--install", helpers.build, "--prefix", prefix },
        { PATH = os.getenv("PATH") })
      assert.equal(0, code, out .. err)
      local lua = prefix .. "/share/lua/5.1"
      local script = [[
local sandbox = require "dsh.sandbox"
io.write(sandbox.dshd_path(), "\n")
local sb = assert(sandbox.create { network = false })
local p = assert(sb.envd:start { cmd = "/bin/echo", args = { "from the installed tree" } })
io.write(p:wait().stdout)
p:close()
assert(sb:kill())
]]
      code, out, err = run({ "luajit", "-e", script }, {
        PATH = "/usr/sbin:/usr/bin:/sbin:/bin", HOME = prefix, DSH_STATE_DIR = prefix .. "/state",
        LUA_PATH = lua .. "/?.lua;" .. lua .. "/?/init.lua;;", LUA_CPATH = prefix .. "/lib/lua/5.1/?.so;;",
      }, prefix)
      assert.same({ 0, prefix .. "/bin/dshd\nfrom the installed tree\n", "" }, { code, out, err })
    end)
  end)

  it("refuses a state directory too long for its socket path, saying so", function()
    helpers.run(function()
      local sandbox = require "dsh.sandbox"
      local sys = require "dsh.core.sysutil"
      local saved = os.getenv("DSH_STATE_DIR")
      local long = prefix .. "/" .. string.rep("d", 80)
      sys.setenv("DSH_STATE_DIR", long)
      local ok, err = sandbox.create { network = false }
      sys.setenv("DSH_STATE_DIR", saved)
      assert.is_nil(ok)
      assert.same({ "failed_precondition", "the sandbox state directory " .. long .. "/sandboxes is too long for a "
        .. "unix socket path (set DSH_STATE_DIR or XDG_STATE_HOME to a shorter one)" }, { err.code, err.message })
      assert.is_false(sys.exists(long))
    end)
  end)

  it("requires neither ffi nor dsh.core._ffi in lua/dsh/sandbox", function()
    local dir = helpers.root .. "/lua/dsh/sandbox"
    local n = 0
    for name in lfs.dir(dir) do
      if name:match("%.lua$") then
        n = n + 1
        local text = assert(helpers.read_file(dir .. "/" .. name))
        for mod in text:gmatch("require%s*%(?%s*[\"']([%w_.]+)[\"']") do
          assert.is_false(mod == "ffi" or mod:match("^dsh%.core%._ffi") ~= nil, name .. " requires " .. mod)
        end
      end
    end
    assert.is_true(n >= 8)
  end)
end)
