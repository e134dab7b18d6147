-- POST /init validates envVars as Start validates envs (issue 7, item 9): a
-- name that is empty or holds '=' is refused with 400 and changes nothing,
-- so later Starts keep working; a refused /init applies none of its fields.
-- Against a real sandbox's dshd.
local D = require "helpers.dshd"
local helpers = require "helpers"

describe("dshd POST /init", function()
  local S = D.use_sandbox()

  local function env_of(c, name)
    local p = assert(c:start { cmd = "/bin/sh", args = { "-c", 'printf %s "${' .. name .. '-unset}"' } })
    local r = assert(p:wait())
    p:close()
    assert.equal(0, r.exit_code)
    return r.stdout
  end

  it("refuses variable names Start would refuse, and Starts keep working", function()
    helpers.run(function()
      local c = S:test_client()
      for _, case in ipairs {
        { { ["A=B"] = "x" }, "envVars: invalid variable name 'A=B'" },
        { { [""] = "x" }, "envVars: invalid variable name ''" },
        { { OK1 = "fine", ["=X"] = "y" }, "envVars: invalid variable name '=X'" },
        { { OK1 = 5 }, "envVars.OK1: expected a string" },
      } do
        local ok, err = c:init { envVars = case[1] }
        assert.is_nil(ok)
        assert.same({ "invalid_argument", case[2] }, { err.code, err.message })
        assert.equal("unset", env_of(c, "OK1"))
      end
      -- the same names in a Start's envs get the same answer
      local p, err = c:start { cmd = "true", envs = { ["A=B"] = "x" } }
      assert.is_nil(p)
      assert.same({ "invalid_argument", "process.envs: invalid variable name 'A=B'" }, { err.code, err.message })
      assert(c:init { envVars = { GOOD_ONE = "yes" } })
      assert.equal("yes", env_of(c, "GOOD_ONE"))
    end)
  end)

  it("applies nothing of a request it refuses", function()
    helpers.run(function()
      local c = S:test_client()
      local ok, err = c:init { envVars = { NOT_APPLIED = "1" }, defaultUser = "no-such-user" }
      assert.is_nil(ok)
      assert.equal("invalid_argument", err.code)
      assert.matches("^defaultUser: ", err.message)
      assert.equal("unset", env_of(c, "NOT_APPLIED"))
      ok, err = c:init { envVars = { NOT_APPLIED = "1" }, defaultWorkdir = "/" .. ("d"):rep(5000) }
      assert.is_nil(ok)
      assert.same({ "invalid_argument", "defaultWorkdir: path too long" }, { err.code, err.message })
      assert.equal("unset", env_of(c, "NOT_APPLIED"))
    end)
  end)
end)
