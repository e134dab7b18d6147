-- E2B's debug mode, dsh's way (issue 19 §5): a ctx.e2b config that attaches
-- to an envd URL directly, with no control plane, for a self-hosted envd or
-- a dshd. The daemons here are real: the dshd of a stand-in sandbox, reached
-- on its own port (never through the stand-in's API or router, which record
-- that nothing was asked of them).
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local context = require "dsh.context"
local e2b = require "dsh.providers.e2b"
local helpers = require "helpers"
local sys = require "dsh.core.sysutil"

local S

-- A stand-in sandbox: its id, the URL of its dshd, its envd token (nil unless secure).
local function daemon(secure)
  local r = S:request("POST", "/sandboxes", { templateID = "base", timeout = 600, secure = secure })
  assert.equal(201, r.status)
  local id = r.body.sandboxID
  return id, "http://127.0.0.1:" .. assert(S:port(id)), r.body.envdAccessToken
end

local function composition(cfg)
  return { { e2b, cfg }, require "dsh.providers.fs_e2b", require "dsh.providers.subprocess_e2b",
    require "dsh.providers.bash" }
end

describe("ctx.e2b on an envd URL, without a control plane", function()
  D.use_state()
  S = E.use_standin()

  it("works on the daemon at envdUrl: commands, files; it neither creates, pauses nor kills", function()
    helpers.run(function()
      local id, url, token = daemon(true)
      local mark = S:mark()
      local _, rmark = S:routed()
      helpers.with_context(composition { backend = "envd", envdUrl = url, envdAccessToken = token }, function(ctx)
        assert.same({ "envd", false, "envd" }, { ctx.e2b.backend, ctx.e2b.created, ctx.e2b:sandboxId() })
        local r = assert(ctx.bash:run { command = "printf 'hello from %s' $(id -un)" })
        assert.same({ 0, "hello from user" }, { r.exitCode, r.stdout.text })
        assert(ctx.fs:writeText("notes.txt", "direct"))
        assert.equal("direct", assert(ctx.fs:readText("notes.txt")).text)
        local info = assert(ctx.e2b:info())
        assert.same({ "envd", url, "running" }, { info.backend, info.envdUrl, info.state })
        local m, err = ctx.e2b:metrics()
        assert.is_nil(m)
        assert.same({ "unimplemented", "the envd at " .. url .. " serves no /metrics" }, { err.code, err.message })
      end)
      assert.equal("running", S:state(id)) -- disposal left it as it was
      assert.same({}, S:calls(mark)) -- nothing asked of the control plane
      assert.same({}, S:routed(rmark)) -- nor of the router: envd was reached directly
      S:request("DELETE", "/sandboxes/" .. id)
    end)
  end)

  it("E2B_DEBUG: a cloud config in debug mode talks to sandboxUrl or E2B_SANDBOX_URL, never to the API", function()
    helpers.run(function()
      local id, url = daemon(false) -- as the SDK's debug mode: no token
      local mark = S:mark()
      -- debug = true, envd at sandboxUrl; the disposition does nothing, as the SDK's kill() in debug mode
      helpers.with_context(composition(S:config { debug = true, sandboxUrl = url, onDispose = "kill" }),
        function(ctx)
          assert.equal("envd", ctx.e2b.backend)
          assert.equal("debug", assert(ctx.bash:run { command = "printf debug" }).stdout.text)
        end)
      assert.equal("running", S:state(id))
      -- E2B_DEBUG=true in the environment, envd at E2B_SANDBOX_URL, no API key at all
      sys.setenv("E2B_DEBUG", "true")
      sys.setenv("E2B_SANDBOX_URL", url)
      local ok, err = pcall(function()
        helpers.with_context(composition { backend = "cloud" }, function(ctx)
          assert.equal("envd", ctx.e2b.backend)
          assert.equal("env", assert(ctx.bash:run { command = "printf env" }).stdout.text)
        end)
      end)
      sys.setenv("E2B_DEBUG", nil)
      sys.setenv("E2B_SANDBOX_URL", nil)
      assert(ok, err)
      assert.equal("running", S:state(id))
      assert.same({}, S:calls(mark))
      S:request("DELETE", "/sandboxes/" .. id)
    end)
  end)

  it("says so when nothing answers at envdUrl", function()
    helpers.run(function()
      local id, url = daemon(false)
      assert.equal(204, S:request("POST", "/sandboxes/" .. id .. "/pause").status) -- its dshd is gone
      local ctx = context.new():use(e2b, { backend = "envd", envdUrl = url })
      local ok, err = ctx:start()
      assert.is_nil(ok)
      assert.equal("unavailable", err.code)
      assert.matches("^the envd at " .. url:gsub("%p", "%%%0") .. " does not answer /health: ", err.message)
      assert.is_true(ctx:dispose())
      S:request("DELETE", "/sandboxes/" .. id)
    end)
  end)

  it("refuses what needs a control plane, before contacting anything", function()
    local function refused(cfg, msg)
      assert.has_error(function() context.new():use(e2b, cfg) end, "dsh-e2b: " .. msg)
    end
    local url = "http://127.0.0.1:49983"
    refused({ backend = "envd", envdUrl = url, onDispose = "kill" },
      'onDispose must be "leave" with the envd backend: there is no control plane to kill or pause it')
    refused({ backend = "envd", envdUrl = url, template = "base" }, "template needs a control plane: the envd"
      .. " backend attaches to a sandbox that exists (use the cloud or local backend)")
    refused({ backend = "envd", envdUrl = url, timeoutMs = 1000 }, "timeoutMs needs a control plane: the envd"
      .. " backend attaches to a sandbox that exists (use the cloud or local backend)")
    refused({ backend = "envd", envdUrl = url, apiKey = "k" },
      "apiKey applies only to the cloud backend (the envd backend takes envdUrl)")
    refused({ backend = "envd", envdUrl = "localhost:49983" },
      "envdUrl must be an http:// or https:// URL: localhost:49983")
    refused({ envdUrl = url }, "envdUrl applies only to the envd backend")
    refused({ backend = "local", debug = true }, "debug applies only to the cloud backend")
    refused({ backend = "nope" }, 'backend must be "local", "cloud" or "envd"')
    -- no envdUrl and no E2B_SANDBOX_URL: E2B's debug address
    assert.equal("http://localhost:49983", require("dsh.providers.e2b.schema").validate { backend = "envd" }.envdUrl)
  end)
end)
