-- `dsh poc --cloud`: the same program as `make poc` (the reference's live
-- composition, §6.2 A and 1-17, composed by one ctx:use(overlay)) against
-- E2B's control plane, here its stand-in (spec/fixtures/e2b-api.mjs, a real
-- dshd behind E2B's API and router), configured by E2B's environment
-- variables. Every step passes in order, the sandbox is created with the
-- ambient environment and deleted at the end, and nothing of it is left; a
-- control plane that refuses the key fails the first step, named.
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local helpers = require "helpers"
local proc = require "dsh.core.proc"

local function run_poc(S, key)
  local p = assert(proc.spawn {
    argv = { "luajit", helpers.root .. "/bin/dsh", "poc", "--cloud" },
    env = { PATH = os.getenv("PATH"), LUA_PATH = package.path, LUA_CPATH = package.cpath,
      DSH_BUILD_DIR = helpers.build, E2B_API_KEY = key or S.key, E2B_API_URL = S.api_url,
      E2B_SANDBOX_URL = S.router_url },
    stdout = "pipe", stderr = "pipe",
  })
  local out, err = p:read_all(), p:read_all("stderr")
  local st = p:wait()
  p:close()
  return st.exit_code, out, err
end

describe("dsh poc --cloud on the E2B stand-in", function()
  D.use_state()
  local S = E.use_standin()

  it("runs every step in order on one cloud sandbox, which is deleted at the end", function()
    helpers.run(function()
      local mark = S:mark()
      local code, out, err = run_poc(S)
      assert.equal(0, code, out .. err)
      assert.equal("", err)
      assert.matches("the reference's live composition on an E2B cloud sandbox\n", out)
      assert.matches("\npoc: all 19 steps passed in [%d.]+ ms\n$", out)
      local labels = {}
      for title in out:gmatch("\n  %[ *%d+/19%] (.-) +ok +[%d.]+ ms\n") do
        labels[#labels + 1] = title:match("^(%w+)%. ") or ""
      end
      assert.same({ "", "A", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
        "17" }, labels)
      local id = out:match("sandbox (%w+), cwd ")
      assert.is_string(id)
      local calls = S:calls(mark)
      assert.same({ "POST", "/sandboxes", S.key }, { calls[1].method, calls[1].path, calls[1].key })
      -- the names the scrub drops never leave the host, not even to E2B
      assert.same({ KEEP = "visible" }, calls[1].body.envVars)
      local delete
      for _, c in ipairs(calls) do
        if c.method == "DELETE" then delete = c end
      end
      assert.same({ "/sandboxes/" .. id, 204 }, { delete.path, delete.status })
      -- step 17 asked the control plane after the delete: not found
      assert.same({ "POST", "/sandboxes/" .. id .. "/connect", 404 },
        { calls[#calls].method, calls[#calls].path, calls[#calls].status })
      assert.is_nil(S:state(id))
      assert.matches("sandbox " .. id .. " not found\n", out)
    end)
  end)

  it("names the first step when the control plane refuses the key, and exits 1", function()
    helpers.run(function()
      local code, out = run_poc(S, "e2b_wrong_key")
      assert.equal(1, code, out)
      assert.matches("%[ 1/19%] compose the world[^\n]- FAILED", out)
      assert.matches("E2B API create failed %(401 Unauthorized%): the API key was refused", out)
      assert.matches("\npoc: step 1 failed: compose the world", out)
    end)
  end)
end)
