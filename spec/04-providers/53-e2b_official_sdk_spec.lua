-- The official E2B JavaScript SDK (npm "e2b", pinned in
-- spec/03-dshd/compat/package.json) in its normal mode against the E2B
-- stand-in: spec/03-dshd/compat/standin_test.mjs creates, connects, sets
-- timeouts, pauses (pause and betaPause), kills, lists with a metadata and a
-- state filter, reads info and metrics, runs commands and moves files
-- through the envd URL it derives itself (https://49983-<id>.<domain>, the
-- stand-in's TLS router), wakes an autoResume sandbox by traffic, and drives
-- the unversioned create and connect dsh uses through its own API client.
-- If the official client works against the stand-in and dsh does too, they
-- speak the same API: this spec is what keeps the stand-in from drifting.
-- Every call must be one of the contract's routes (the helper's teardown
-- fails otherwise), and this spec checks which the SDK drove, with which
-- answers.
local async = require "dsh.async"
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local helpers = require "helpers"
local json = require "dsh.json"
local proc = require "dsh.core.proc"
local sys = require "dsh.core.sysutil"

local COMPAT = helpers.root .. "/spec/03-dshd/compat"
local DOMAIN = "e2b.test"

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

describe("the official E2B SDK against the E2B stand-in, in its normal mode", function()
  D.use_state()
  local S = E.use_standin { args = { "--tls-domain", DOMAIN } }
  setup(function()
    assert(sys.which("node"), "node is not installed (scripts/install-deps installs it)")
    if not sys.exists(COMPAT .. "/node_modules/e2b/package.json") then
      helpers.run(function()
        local code, out, err = run({ "npm", "ci", "--no-audit", "--no-fund" }, COMPAT, base_env())
        assert(code == 0, "npm ci failed in " .. COMPAT .. ":\n" .. out .. err)
      end)
    end
  end)

  it("passes every case of standin_test.mjs, through the calls E2B's contract has", function()
    helpers.run(function()
      local env = base_env()
      env.E2B_API_KEY = S.key
      env.E2B_API_URL = S.api_url
      env.E2B_DOMAIN = DOMAIN .. ":" .. S.tls_port
      env.NODE_EXTRA_CA_CERTS = S.ca
      local mark = S:mark()
      local _, rmark = S:routed()
      local run_id = "sdk" .. sys.random_hex(4)
      local code, out, err = run({ "node", "standin_test.mjs", run_id }, COMPAT, env)
      local report = out:match("\nREPORT (%b{})\n$")
      assert(report, "no report from standin_test.mjs (exit " .. tostring(code) .. "):\n" .. out .. err)
      report = json.decode(report)
      local fails = {}
      for line in out:gmatch("FAIL [^\n]*") do fails[#fails + 1] = line end
      assert.same({}, report.failed, table.concat(fails, "\n"))
      assert.equal(0, code, err)
      local script = assert(helpers.read_file(COMPAT .. "/standin_test.mjs"))
      local cases = 0
      for _ in script:gmatch("\nawait check%(") do cases = cases + 1 end
      assert.is_true(cases >= 13)
      assert.equal(cases, #report.passed)

      -- what the SDK asked E2B, route by route, and what it was answered
      local seen = {}
      local all = S:request("GET", "/__calls").body
      for i = mark, #all do
        local c = all[i]
        seen[c.method .. " " .. tostring(c.route) .. " " .. c.status] = true
      end
      local want = {
        "POST /v2/sandboxes 201", "POST /v2/sandboxes 400", "POST /v2/sandboxes 404", "POST /v2/sandboxes 401",
        "POST /v2/sandboxes/{sandboxID}/connect 201", "POST /v2/sandboxes/{sandboxID}/connect 200",
        "POST /v2/sandboxes/{sandboxID}/connect 404",
        "POST /sandboxes/{sandboxID}/timeout 204", "POST /sandboxes/{sandboxID}/timeout 400",
        "POST /sandboxes/{sandboxID}/pause 204", "POST /sandboxes/{sandboxID}/pause 409",
        "DELETE /sandboxes/{sandboxID} 204", "DELETE /sandboxes/{sandboxID} 404",
        "GET /v2/sandboxes 200", "GET /sandboxes/{sandboxID} 200", "GET /sandboxes/{sandboxID} 404",
        "GET /sandboxes/{sandboxID}/metrics 200",
        "POST /sandboxes 201", "POST /sandboxes/{sandboxID}/connect 400", "POST /sandboxes/{sandboxID}/connect 200",
      }
      local missing = {}
      for _, w in ipairs(want) do
        if not seen[w] then missing[#missing + 1] = w end
      end
      assert.same({}, missing)

      -- envd through the URL the SDK derived: the TLS router, by host name, with the token
      local routed = S:routed(rmark)
      local by_host, auto = 0, false
      for _, r in ipairs(routed) do
        assert.is_true(r.tls, "the SDK reached envd through another way in: " .. tostring(r.host))
        assert.equal("49983-" .. r.sandboxId .. "." .. DOMAIN .. ":" .. S.tls_port, r.host)
        if r.path ~= "/health" then assert.is_true(r.accessToken, "no envd token on " .. r.path) end
        assert.is_true(r.apiKey == nil or r.apiKey == json.null, "the API key was sent to envd")
        by_host = by_host + 1
        if r.autoResumed == true then auto = true end
      end
      assert.is_true(by_host > 10)
      assert.is_true(auto, "no request woke the autoResume sandbox")
      assert.same({}, S:sandboxes()) -- the script killed every sandbox it made
    end)
  end)
end)
