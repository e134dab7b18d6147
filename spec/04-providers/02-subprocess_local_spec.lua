-- The subprocess contract on this machine (subprocess-local over dsh.core.proc),
-- with the bash provider on top; plus what only the host backend does.
local context = require "dsh.context"
local helpers = require "helpers"
local proc = require "dsh.core.proc"
local sys = require "dsh.core.sysutil"

-- Real ambient secrets in this process's environment, for the scrub.
local SECRETS = { NPM_TOKEN = "sentinel-secret", DSH_STALE = "sentinel-stale", db_password = "sentinel-pw" }
local VISIBLE = { DSH_SPEC_KEEP_ME = nil, KEEP_VISIBLE = "visible" }

local function set_ambient()
  for k, v in pairs(SECRETS) do sys.setenv(k, v) end
  for k, v in pairs(VISIBLE) do sys.setenv(k, v) end
end

local function clear_ambient()
  for k in pairs(SECRETS) do sys.setenv(k, nil) end
  for k in pairs(VISIBLE) do sys.setenv(k, nil) end
end

local function host_sh(cmd)
  local p = assert(proc.spawn { argv = { "/bin/bash", "-c", cmd }, env = { PATH = "/usr/bin:/bin" },
    stderr = "null" })
  local out = p:read_all()
  local st = p:wait()
  p:close()
  return st.exit_code, out
end

local function factory_new(cfg)
  set_ambient()
  local ctx = helpers.start_context {
    { require "dsh.providers.subprocess_local", cfg or {} },
    { require "dsh.providers.bash", { maxOutputBytes = 200, timeoutMs = 20000 } },
  }
  return {
    ctx = ctx, sh = host_sh, secrets = SECRETS, visible = VISIBLE,
    dispose = function()
      clear_ambient()
      assert(ctx:dispose())
    end,
  }
end

require("helpers.subprocess_contract")("subprocess-local", {
  new = factory_new, prefix = "subprocess-local",
})

describe("subprocess-local", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("validates its config before anything runs", function()
    local p = require "dsh.providers.subprocess_local"
    assert.equal("subprocess", p.provides)
    assert.has_error(function() context.new():use(p, { bogus = 1 }) end,
      'subprocess-local: unknown config key "bogus" (known keys: ambientEnv, cwd, spillDir)')
    assert.has_error(function() context.new():use(p, { cwd = "rel" }) end,
      "subprocess-local: cwd must be an absolute path")
    assert.has_error(function() context.new():use(p, { ambientEnv = { A = 1 } }) end,
      "subprocess-local: ambientEnv must map strings to strings")
  end)

  it("uses pid == pgid == the leader's pid, a private spill directory, and removes it on dispose", function()
    helpers.run(function()
      local env = factory_new()
      local ok, err = pcall(function()
        local h = assert(env.ctx.subprocess:spawn { argv = { "bash", "-c", "echo $$; printf 0123456789" },
          stdio = { stdout = { maxBytes = 4, spill = { maxBytes = 100 } } } })
        assert.same({ exitCode = 0 }, h.done:await())
        local r = h.stdout:readFrom(0)
        assert.is_truthy(r.spillPath)
        assert.equal(h.pid .. "\n0123456789", helpers.read_file(r.spillPath))
        local dir = r.spillPath:match("^(.*)/[^/]+/[^/]+$")
        assert.equal("rwx------", require("lfs").attributes(dir:match("^(.*)/[^/]+$"), "permissions"))
        assert.equal("rw-------", require("lfs").attributes(r.spillPath, "permissions"))
        assert.is_true(h:waitForExit())
        env.root = dir
      end)
      env.dispose()
      if not ok then error(err, 0) end
      assert.is_nil(require("lfs").attributes(env.root))
    end)
  end)

  it("takes its ambient environment from config when given", function()
    helpers.run(function()
      local env = factory_new { ambientEnv = { PATH = "/usr/bin:/bin", ONLY = "this", API_KEY = "k" } }
      local ok, err = pcall(function()
        local h = assert(env.ctx.subprocess:spawn { argv = { "env" },
          stdio = { stdout = { maxBytes = 1000 } } })
        assert.same({ exitCode = 0 }, h.done:await())
        local lines = {}
        for l in h.stdout:readFrom(0).text:gmatch("[^\n]+") do lines[#lines + 1] = l end
        table.sort(lines)
        assert.same({ "ONLY=this", "PATH=/usr/bin:/bin" }, lines)
        assert.is_true(h:waitForExit())
      end)
      env.dispose()
      if not ok then error(err, 0) end
    end)
  end)
end)
