-- make poc's program, bin/dsh poc, on a real local sandbox: the world is
-- composed by one ctx:use(overlay), the reference's live composition (§6.2,
-- steps A and 1-17) runs in order, every step passes, stderr stays empty and
-- the sandbox is gone afterwards; and a failing step is named and the run
-- exits 1 (here: a state directory that cannot be created).
local helpers = require "helpers"
local proc = require "dsh.core.proc"

local ORDER = { "A", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17" }

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

--- Every step line of a poc run's output: {n=, total=, label=, title=, ok=}.
local function step_lines(out)
  local steps = {}
  for n, total, title, verdict in out:gmatch("\n  %[ *(%d+)/(%d+)%] (.-) +(ok) +[%d.]+ ms\n") do
    steps[#steps + 1] = { n = tonumber(n), total = tonumber(total), title = title, ok = verdict == "ok",
      label = title:match("^(%w+)%. ") }
  end
  return steps
end

describe("dsh poc", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("runs §6.2 A and 1-17 in order on a local sandbox through the overlay, then leaves nothing", function()
    local dir = helpers.tmpdir()
    helpers.run(function()
      local code, out, err = run_poc(dir)
      assert.equal(0, code, out .. err)
      assert.equal("", err)
      assert.matches("\npoc: all 19 steps passed in [%d.]+ ms\n$", out)
      local steps = step_lines(out)
      assert.equal(19, #steps, out)
      assert.matches("^compose the world: one ctx:use%(overlay%)", steps[1].title)
      for i, label in ipairs(ORDER) do
        assert.equal(label, steps[i + 1].label, out)
        assert.equal(i + 1, steps[i + 1].n)
      end
      assert.matches('bash printed "written%-by%-fs\\n"', out)
      assert.matches('readFrom%(0%) = tail "6789" at 10, lossy, no spill kept', out)
      assert.matches("source \"big.c\" is 4000001 bytes, over the 4000000%-byte limit", out)
      assert.matches("printed PTY%-你好; stdin_read; running", out)
      assert.matches("value {doubled = 42, typed = true}, logs \"remote%-log 你好", out)
      local id = out:match("sandbox (%w+), cwd " .. helpers.root:gsub("%p", "%%%0") .. ":")
      assert.is_string(id, out)
      assert.matches("sandbox " .. id .. " not found\n", out)
      assert.is_nil(io.open(dir .. "/sandboxes/" .. id .. "/meta.json"), "the sandbox's state is still there")
      for _, f in ipairs { "from-fs.txt", "from-bash.txt", "multibyte # file.c", "big.c" } do
        assert.is_nil(helpers.read_file(helpers.root .. "/" .. f), f .. " is in the host's cwd")
      end
    end)
    helpers.rm_rf(dir)
  end)

  it("names the failing step and exits 1", function()
    helpers.run(function()
      local code, out = run_poc("/proc/nonexistent/dsh")
      assert.equal(1, code, out)
      assert.matches("%[ 1/19%] compose the world[^\n]- FAILED", out)
      assert.matches("cannot create the sandbox state directory /proc/nonexistent/dsh/sandboxes", out)
      assert.matches("\npoc: step 1 failed: compose the world: one ctx:use%(overlay%) on one sandbox\n$", out)
      assert.not_matches("%[ 2/19%]", out)
    end)
  end)
end)
