-- The pty contract on this machine's PTYs (pty-local), plus its config.
local context = require "dsh.context"
local helpers = require "helpers"
local pty = require "dsh.pty"

local SECRETS = { NPM_TOKEN = "sentinel-secret", DSH_STALE = "sentinel-stale", db_password = "sentinel-pw" }
local VISIBLE = { KEEP = "visible" }

-- Shell command on the host: exit code and stdout.
local function sh(cmd)
  local p = io.popen("(" .. cmd .. ") 2>/dev/null; echo \"__rc=$?\"")
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("__rc=(%d+)\n?$"))
  return rc, (out:gsub("__rc=%d+\n?$", ""))
end

local function factory_new(cfg)
  local base = helpers.tmpdir()
  local ambient = { PATH = os.getenv("PATH") or "/usr/bin:/bin", HOME = base, LANG = "C.UTF-8" }
  for k, v in pairs(SECRETS) do ambient[k] = v end
  for k, v in pairs(VISIBLE) do ambient[k] = v end
  cfg.cwd, cfg.ambientEnv = base, ambient
  local ctx = helpers.start_context { pty.provider, { require "dsh.providers.pty_local", cfg } }
  return {
    ctx = ctx, sh = sh, secrets = SECRETS, visible = VISIBLE, base = base,
    dispose = function()
      local ok, err = ctx:dispose()
      helpers.rm_rf(base)
      assert(ok, tostring(err))
    end,
  }
end

require("helpers.pty_contract")("pty-local", { new = factory_new, prefix = "pty-local", label = "local PTY" })

describe("pty-local", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("reports misuse at the caller's line, however deep the check sits", function()
    local HERE = debug.getinfo(1, "S").short_src
    local function raises_here(want, fn) -- fn written on one line
      local info = debug.getinfo(fn, "S")
      local ok, err = pcall(fn)
      assert.is_false(ok, "no error raised: " .. want)
      assert.equal(HERE .. ":" .. info.linedefined .. ": " .. want, err)
    end
    helpers.run(function()
      local env = factory_new { pollIntervalMs = 25, idleSilenceMs = 1000, timeoutMs = 5000, disposeGraceMs = 1000 }
      local ok, err = pcall(function()
        local pty_ = env.ctx.pty
        local a = { id = "a" }
        local s = assert(pty_:spawn(a, { type = "shell" }))
        raises_here("dsh.pty: read: count must be a positive safe integer",
          function() pty_:read(a, s.id, { count = 0 }) end)
        raises_here("dsh.pty: signal: expected SIGINT, SIGTERM, SIGKILL, SIGTSTP or SIGHUP, got QUIT",
          function() pty_:signal(a, s.id, "QUIT") end)
        raises_here("dsh.pty: resize: rows must be an integer in [1, 1000]", function() pty_:resize(a, s.id, 0, 80) end)
        raises_here('dsh.pty: spawn: env name "A=B" is not a valid variable name',
          function() pty_:spawn(a, { type = "shell", env = { ["A=B"] = "x" } }) end)
        assert.same({ s.id }, { pty_:list(a)[1].id }) -- a refused spawn reserved nothing
        raises_here("pty-local: rows must be a positive safe integer",
          function() context.new():use(require "dsh.providers.pty_local", { rows = 0 }) end)
      end)
      env.dispose()
      assert(ok, err)
    end)
  end)

  it("takes this process's environment, through the scrub, when no ambientEnv is given", function()
    local sys = require "dsh.core.sysutil"
    helpers.run(function()
      assert(sys.setenv("PTY_SPEC_KEEP", "kept-value"))
      assert(sys.setenv("PTY_SPEC_TOKEN", "sentinel-host-secret"))
      local dir = helpers.tmpdir()
      local ok, err = pcall(helpers.with_context, {
        pty.provider,
        { require "dsh.providers.pty_local", { cwd = dir, pollIntervalMs = 25, idleSilenceMs = 1000,
          timeoutMs = 5000, disposeGraceMs = 1000 } },
      }, function(ctx)
        local a = { id = "a" }
        local s = assert(ctx.pty:spawn(a, { type = "shell" }))
        local r = assert(assert(ctx.pty:startSend(a, s.id, {
          text = 'echo "K=<$PTY_SPEC_KEEP> T=<$PTY_SPEC_TOKEN> P=<$PWD>"', submit = true })):wait())
        assert.truthy(r.viewport:find("K=<kept-value> T=<> P=<" .. dir .. ">", 1, true), r.viewport)
        assert.is_true(ctx.pty:kill(a, s.id))
      end)
      sys.setenv("PTY_SPEC_KEEP", nil)
      sys.setenv("PTY_SPEC_TOKEN", nil)
      helpers.rm_rf(dir)
      assert(ok, err)
    end)
  end)

  it("starts shells from outside any task (the REPL's way): the first prompt counts", function()
    local env = factory_new { pollIntervalMs = 25, idleSilenceMs = 1000, timeoutMs = 5000, disposeGraceMs = 1000 }
    local owner = { id = "repl" }
    local ok, perr = pcall(function()
      for _ = 1, 5 do
        local t0 = require("dsh.core.loop").now_ms()
        local s, err = env.ctx.pty:spawn(owner, { type = "shell" })
        assert.is_truthy(s, tostring(err))
        assert.is_true(require("dsh.core.loop").now_ms() - t0 < 1000)
        assert.equal("dsh> ", s.motd)
        assert.is_true(env.ctx.pty:kill(owner, s.id))
      end
    end)
    env.dispose()
    assert(ok, perr)
  end)

  it("a startup that prints but never shows a prompt settles after the silence, not the timeout", function()
    helpers.run(function()
      local env = factory_new { shell = { "/bin/bash", "-c", "echo banner; exec sleep 30" }, idleSilenceMs = 300,
        timeoutMs = 20000, disposeGraceMs = 1000 }
      local ok, err = pcall(function()
        local t0 = require("dsh.core.loop").now_ms()
        local s = assert(env.ctx.pty:spawn({ id = "a" }, { type = "shell" }))
        assert.equal("banner\n", s.motd)
        assert.is_true(require("dsh.core.loop").now_ms() - t0 < 5000)
      end)
      env.dispose()
      assert(ok, err)
    end)
  end)

  it("validates its config with the reference's messages", function()
    local p = require "dsh.providers.pty_local"
    for cfg, msg in pairs {
      [{ backendType = "" }] = "pty-local: backendType must be a non-empty string",
      [{ rows = 0 }] = "pty-local: rows must be a positive safe integer",
      [{ rows = 1.5 }] = "pty-local: rows must be a positive safe integer",
      [{ idleSilenceMs = -1 }] = "pty-local: idleSilenceMs must be a positive safe integer",
      [{ maxReadBytes = 129, scrollbackMaxBytes = 128 }] = "pty-local: maxReadBytes must be at most scrollbackMaxBytes",
      [{ cwd = "relative" }] = "pty-local: cwd must be an absolute path",
      [{ scrollbackLine = 1 }] = 'pty-local: unknown config key "scrollbackLine" (did you mean "scrollbackLines"?)',
    } do
      assert.has_error(function() context.new():use(p, cfg) end, msg)
    end
    local d = p.validate {}
    assert.same({ "shell", 40, 160, 10000, 4194304, 262144, 50, 3000, 30000, 3000 },
      { d.backendType, d.rows, d.cols, d.scrollbackLines, d.scrollbackMaxBytes, d.maxReadBytes,
        d.pollIntervalMs, d.idleSilenceMs, d.timeoutMs, d.disposeGraceMs })
  end)
end)
