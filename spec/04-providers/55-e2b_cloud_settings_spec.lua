-- What ctx.e2b's config becomes on E2B's cloud (issue 19 §3), through the
-- E2B stand-in: network = false is allow_internet_access: false (and the
-- sandbox then reaches nothing), autoResume is sent only when asked (and a
-- sandbox created with it is woken by traffic, not by a connect), and a
-- template whose envd is older than what dsh needs is refused, saying which
-- features need which version.
local cloud = require "dsh.providers.e2b.cloud_backend"
local context = require "dsh.context"
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local e2b = require "dsh.providers.e2b"
local helpers = require "helpers"

local S

local function creates(calls)
  local out = {}
  for _, c in ipairs(calls) do
    if c.method == "POST" and c.path == "/sandboxes" then out[#out + 1] = c end
  end
  return out
end

local function with_ctx(cfg, fn)
  return helpers.with_context({ { e2b, cfg } }, fn)
end

local function sh(svc, cmd)
  return assert(svc:exec { "/bin/bash", "-c", cmd })
end

describe("ctx.e2b's settings on E2B's cloud", function()
  D.use_state()
  S = E.use_standin()

  it("network = false creates with allow_internet_access: false, and the sandbox reaches nothing", function()
    helpers.run(function()
      local port = S.api_url:match(":(%d+)$")
      local probe = "exec 3<>/dev/tcp/127.0.0.1/" .. port .. " && echo reached"
      local mark = S:mark()
      with_ctx(S:config { network = false }, function(ctx)
        local body = creates(S:calls(mark))[1].body
        assert.is_false(body.allow_internet_access)
        local info = assert(ctx.e2b:info())
        assert.is_false(info.network)
        local r = sh(ctx.e2b, probe)
        assert.is_true(r.exit_code ~= 0)
        -- its loopback is its own: the stand-in's port there has nobody behind it
        assert.matches("Connection refused", r.stderr, 1, true)
      end)
      -- the same probe from a sandbox with its network: the stand-in answers
      mark = S:mark()
      with_ctx(S:config {}, function(ctx)
        assert.is_nil(creates(S:calls(mark))[1].body.allow_internet_access)
        assert.is_nil(assert(ctx.e2b:info()).network) -- not set: E2B's default
        assert.equal("reached\n", sh(ctx.e2b, probe).stdout)
      end)
    end)
  end)

  it("sends autoResume only when asked, as the SDK does", function()
    helpers.run(function()
      for _, case in ipairs { { nil, nil }, { true, { enabled = true } }, { false, { enabled = false } } } do
        local mark = S:mark()
        with_ctx(S:config { autoResume = case[1] }, function(ctx)
          assert.same(case[2], creates(S:calls(mark))[1].body.autoResume)
          assert.equal(case[1] == true, assert(ctx.e2b:info()).autoResume)
        end)
      end
      assert.has_error(function() context.new():use(e2b, S:config { autoResume = true, onTimeout = "kill" }) end,
        'dsh-e2b: autoResume can only be true when onTimeout is "pause"')
      assert.has_error(function() context.new():use(e2b, { autoResume = true }) end,
        "dsh-e2b: autoResume applies only to the cloud backend (a local sandbox is resumed by the next call"
          .. " through its context)")
      assert.has_error(function() context.new():use(e2b, S:config { autoResume = "yes" }) end,
        "dsh-e2b: autoResume must be a boolean")
    end)
  end)

  it("with autoResume, traffic wakes a paused sandbox: no connect is needed", function()
    helpers.run(function()
      with_ctx(S:config { autoResume = true }, function(ctx)
        local id = ctx.e2b:sandboxId()
        assert.equal("0\n", sh(ctx.e2b, "printf kept > f; echo $?").stdout)
        assert.equal(204, S:request("POST", "/sandboxes/" .. id .. "/pause").status)
        assert.equal("paused", S:state(id))
        local mark = S:mark()
        local _, rmark = S:routed()
        assert.equal("kept", sh(ctx.e2b, "cat f").stdout)
        assert.equal("running", S:state(id))
        for _, c in ipairs(S:calls(mark)) do assert.is_nil(c.path:match("/connect$"), "dsh asked connect") end
        assert.is_true(S:routed(rmark)[1].autoResumed)
      end)
    end)
  end)

  it("refuses a template whose envd is older than dsh needs, naming each feature, and kills it", function()
    helpers.run(function()
      local mark, before = S:mark(), #S:sandboxes()
      local ctx = context.new():use(e2b, S:config { template = "old-envd" })
      local ok, err = ctx:start()
      assert.is_nil(ok)
      assert.equal("failed_precondition", err.code)
      assert.equal('template "old-envd" runs envd 0.2.0, too old for dsh: starting a process without stdin (the'
        .. " stdin flag) needs envd >= 0.3.0; closing a process's stdin (commands fed on stdin) needs envd >= 0.5.2;"
        .. " file writes as application/octet-stream (ctx.fs writes) needs envd >= 0.5.7; rebuild the template on a"
        .. " current E2B base image", err.message)
      assert.equal("0.2.0", err.envdVersion)
      assert.is_true(ctx:dispose())
      local calls = S:calls(mark)
      assert.same({ { "POST", 201 }, { "DELETE", 204 } },
        { { calls[1].method, calls[1].status }, { calls[2].method, calls[2].status } })
      assert.equal(2, #calls)
      assert.equal(before, #S:sandboxes())
      -- one it did not create is refused too, and left alone
      local r = S:request("POST", "/sandboxes", { templateID = "old-envd", timeout = 60, secure = true })
      assert.equal(201, r.status)
      ctx = context.new():use(e2b, S:config { sandboxId = r.body.sandboxID })
      ok, err = ctx:start()
      assert.is_nil(ok)
      assert.equal("failed_precondition", err.code)
      assert.matches("^the sandbox runs envd 0%.2%.0, too old for dsh: ", err.message)
      assert.is_true(ctx:dispose())
      assert.equal("running", S:state(r.body.sandboxID))
      S:request("DELETE", "/sandboxes/" .. r.body.sandboxID)
    end)
  end)

  it("compares envd versions as numbers and names the optional features a version lacks", function()
    assert.same({ -1, 0, 1, -1 }, { cloud.compare_versions("0.5.10", "0.6.0"), cloud.compare_versions("0.6.4", "0.6.4"),
      cloud.compare_versions("0.10.0", "0.9.9"), cloud.compare_versions("0.5.7", "0.5.10") })
    assert.is_nil(cloud.compare_versions("latest", "0.1.0"))
    local required, optional = cloud.envd_missing("0.6.2")
    assert.same({}, required)
    assert.same({ "watch events with entry info (includeEntry)" }, { optional[1].feature })
    assert.equal(1, #optional)
    required = cloud.envd_missing("0.5.6")
    assert.same({ "0.5.7" }, { required[1].version })
    local refusal = cloud.envd_refusal("nightly", "x")
    assert.same({ "failed_precondition", 'template "x" runs envd "nightly", a version dsh cannot read' },
      { refusal.code, refusal.message })
    assert.is_nil(cloud.envd_refusal("0.6.4"))
  end)
end)
