-- The cloud backend asks E2B only for paths E2B serves (issue 19, tests):
-- every operation of the backend, through the E2B stand-in, lands on a route
-- of E2B's contract (spec/fixtures/e2b-api/contract.mjs); the set of routes
-- it uses is pinned here, so a new one is added on purpose; and the guard
-- every stand-in spec ends with (helpers.e2b: Standin:stop) fails when a
-- client asks for a path the contract does not have.
local api = require "dsh.providers.e2b.cloud_api"
local cloud = require "dsh.providers.e2b.cloud_backend"
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local helpers = require "helpers"
local schema = require "dsh.providers.e2b.schema"

local S

describe("the paths the cloud backend asks for", function()
  D.use_state()
  S = E.use_standin()

  it("are all routes of E2B's contract, and exactly these", function()
    helpers.run(function()
      local cfg = schema.validate(S:config { metadata = { paths = "spec" } })
      local mark = S:mark()
      local h = assert(cloud.create(cfg))
      assert.is_true(h:set_timeout(120000))
      assert(h:info())
      assert(h:metrics())
      assert(cloud.list(cfg, { state = { "running" }, metadata = { paths = "spec" } }))
      assert.is_true(h:pause())
      assert.equal("resumed", h:recover())
      local again = assert(cloud.connect(cfg, h.id))
      again:close()
      assert.is_true(h:kill())
      h:close()
      local served = {}
      for _, r in ipairs(S:routes()) do served[r.method .. " " .. r.path] = true end
      local used, n = {}, 0
      local all = S:request("GET", "/__calls").body
      for i = mark, #all do
        local c = all[i]
        assert.is_true(type(c.route) == "string", c.method .. " " .. c.path .. " is no route of E2B's")
        assert.is_true(served[c.method .. " " .. c.route])
        used[c.method .. " " .. c.route] = true
        n = n + 1
      end
      local list = {}
      for k in pairs(used) do list[#list + 1] = k end
      table.sort(list)
      assert.same({
        "DELETE /sandboxes/{sandboxID}",
        "GET /sandboxes/{sandboxID}",
        "GET /sandboxes/{sandboxID}/metrics",
        "GET /v2/sandboxes",
        "POST /sandboxes",
        "POST /sandboxes/{sandboxID}/connect",
        "POST /sandboxes/{sandboxID}/pause",
        "POST /sandboxes/{sandboxID}/timeout",
      }, list)
      assert.is_true(n >= 9)
    end)
  end)

  it("a path E2B does not serve fails the spec that asked for it", function()
    local other = E.standin()
    local ok, err = pcall(function()
      helpers.run(function()
        local client = api.new(schema.validate(other:config {}))
        local res = assert(client:call("create", "POST", "/v3/sandboxes", { templateID = "base" }))
        client:close()
        assert.equal(404, res.status)
      end)
      other:stop()
    end)
    assert.is_false(ok)
    assert.matches("calls E2B's contract does not serve (or answers it does not allow):\nPOST /v3/sandboxes: no such"
      .. " route", tostring(err), 1, true) -- raised after everything the stand-in started was gone
  end)
end)
