-- make poc's program, bin/dsh poc, on a real local sandbox: every step passes
-- and the sandbox is gone afterwards; and a failing step is named and the run
-- exits non-zero (here: a state directory that cannot be created).
local helpers = require "helpers"
local proc = require "dsh.proc"

local function run_poc(state_dir)
  local p = assert(proc.spawn {
    argv = { "luajit", helpers.root .. "/bin/dsh", "poc" },
    env = { PATH = os.getenv("PATH"), HOME = os.getenv("HOME"), LUA_PATH = package.path,
      LUA_CPATH = package.cpath, DSH_BUILD_DIR = helpers.build, DSH_STATE_DIR = state_dir },
    stdout = "pipe", stderr = "pipe",
  })
  local out, err = p:read_all(), p:read_all("stderr")
  local st = p:wait()
  p:close()
  return st.exit_code, out, err
end

describe("dsh poc", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("shows the shared world step by step on a local sandbox, then leaves nothing", function()
    local dir = helpers.tmpdir()
    helpers.run(function()
      local code, out, err = run_poc(dir)
      assert.equal(0, code, out .. err)
      local ok = 0
      for _ in out:gmatch("%[%d/9%] [^\n]- ok +[%d.]+ ms\n") do ok = ok + 1 end
      assert.equal(9, ok, out)
      assert.matches("\npoc: all 9 steps passed in ", out)
      assert.matches('bash printed "written%-by%-fs\\n"', out)
      assert.matches('tail "6789" %(lossy%)', out)
      local id = out:match("sandbox (%w+), cwd /home/user/workspace")
      assert.is_string(id)
      assert.is_nil(io.open(dir .. "/sandboxes/" .. id .. "/meta.json"), "the sandbox's state is still there")
    end)
    helpers.rm_rf(dir)
  end)

  it("names the failing step and exits non-zero", function()
    helpers.run(function()
      local code, out = run_poc("/proc/nonexistent/dsh")
      assert.equal(1, code, out)
      assert.matches("%[1/9%] create the sandbox[^\n]- FAILED", out)
      assert.matches("cannot create the sandbox state directory /proc/nonexistent/dsh/sandboxes", out)
      assert.matches("\npoc: step 1 failed\n", out)
      assert.not_matches("%[2/8%]", out)
    end)
  end)
end)
