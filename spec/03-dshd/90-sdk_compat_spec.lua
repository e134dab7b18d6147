-- The official E2B JavaScript SDK against dshd in a real local sandbox:
-- spec/03-dshd/compat/sdk_test.mjs (npm "e2b" 2.51.0, debug mode, envd URL
-- from E2B_SANDBOX_URL, here spec/fixtures/unix-bridge.mjs in front of the
-- sandbox's unix socket) covers commands, background commands with stdin,
-- kill, list, connect, timeouts, PTYs and every files API. The sandbox has an
-- access token; the script hands it to the SDK's own `envdAccessToken`
-- option (see the script's header), through the environment, never argv.
--
-- Needs node and the SDK in spec/03-dshd/compat/node_modules: installed here
-- with `npm ci` (the committed lock) when missing (CI does it in .ci/run before the tests).
local async = require "dsh.async"
local D = require "helpers.dshd"
local helpers = require "helpers"
local json = require "dsh.json"
local proc = require "dsh.core.proc"
local sys = require "dsh.core.sysutil"

local COMPAT = helpers.root .. "/spec/03-dshd/compat"

-- Run argv in dir with env; returns exit code, stdout, stderr.
local function run(argv, dir, env)
  local p = assert(proc.spawn { argv = argv, cwd = dir, env = env })
  local err_task = async.run(function() return p:read_all("stderr") end)
  local out = p:read_all()
  local err = err_task:await()
  local st = p:wait()
  p:wait_quiescent()
  p:close()
  return st.exit_code, out, err
end

local function base_env()
  return { PATH = os.getenv("PATH") or "/usr/local/bin:/usr/bin:/bin", HOME = os.getenv("HOME") or "/root",
    LANG = "C.UTF-8" }
end

describe("official E2B SDK against dshd", function()
  local S = D.use_sandbox()
  setup(function()
    assert(sys.which("node"), "node is not installed (scripts/install-deps installs it)")
    if not sys.exists(COMPAT .. "/node_modules/e2b/package.json") then
      helpers.run(function()
        local code, out, err = run({ "npm", "ci", "--no-audit", "--no-fund" }, COMPAT, base_env())
        assert(code == 0, "npm ci failed in " .. COMPAT .. ":\n" .. out .. err)
      end)
    end
  end)

  it("uses the pinned SDK version", function()
    local pkg = json.decode(assert(helpers.read_file(COMPAT .. "/package.json")))
    assert.same({ e2b = "2.51.0" }, pkg.dependencies)
    local installed = json.decode(assert(helpers.read_file(COMPAT .. "/node_modules/e2b/package.json")))
    assert.equal("2.51.0", installed.version)
  end)

  it("passes every case of sdk_test.mjs", function()
    helpers.run(function()
      local env = base_env()
      -- the SDK takes an http:// URL; the host reaches a local sandbox's dshd
      -- through its unix socket only
      local bridge = assert(proc.spawn { argv = { "node", helpers.root .. "/spec/fixtures/unix-bridge.mjs",
        S.unix_socket }, env = base_env(), stdin = "pipe", stderr = "inherit" })
      finally(function() bridge:close() end)
      local port = assert(bridge:read(), "unix-bridge.mjs printed no port"):match("^(%d+)\n")
      env.E2B_SANDBOX_URL = "http://127.0.0.1:" .. assert(port, "unix-bridge.mjs printed no port")
      env.DSH_ENVD_TOKEN = S.token
      local code, out, err = run({ "node", "sdk_test.mjs", S.id, "/home/user/sdk-compat" }, COMPAT, env)
      local report = out:match("\nREPORT (%b{})\n$")
      assert(report, "no report from sdk_test.mjs (exit " .. tostring(code) .. "):\n" .. out .. err)
      report = json.decode(report)
      local fails = {}
      for line in out:gmatch("FAIL [^\n]*") do fails[#fails + 1] = line end
      assert.same({}, report.failed, table.concat(fails, "\n"))
      assert.equal(0, code, err)
      -- every case in the script ran and passed, each printed once as "ok"
      local script = assert(helpers.read_file(COMPAT .. "/sdk_test.mjs"))
      local cases = 0
      for _ in script:gmatch("\nawait check%(") do cases = cases + 1 end
      assert.is_true(cases >= 30)
      assert.equal(cases, #report.passed)
      for _, name in ipairs(report.passed) do
        local n = 0
        for _ in out:gmatch("\nok +" .. name:gsub("%p", "%%%0") .. "\n") do n = n + 1 end
        if out:sub(1, 3) == "ok " and out:match("^ok +([^\n]*)") == name then n = n + 1 end
        assert.equal(1, n, name)
      end
      -- it cleaned up after itself
      local c = S:test_client()
      local ok, serr = c:stat("/home/user/sdk-compat")
      assert.is_nil(ok)
      assert.equal("not_found", serr.code)
      c:close()
      bridge:close_stdin()
      bridge:wait()
      bridge:close()
    end)
  end)
end)
