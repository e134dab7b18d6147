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
  local ctx = context.new()
  ctx:use(pty.provider)
  ctx:use(require "dsh.providers.pty_local", cfg)
  assert(ctx:start())
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
  it("validates its config with the reference's messages", function()
    local p = require "dsh.providers.pty_local"
    for cfg, msg in pairs {
      [{ backendType = "" }] = "pty-local: backendType must be a non-empty string",
      [{ rows = 0 }] = "pty-local: rows must be a positive safe integer",
      [{ rows = 1.5 }] = "pty-local: rows must be a positive safe integer",
      [{ idleSilenceMs = -1 }] = "pty-local: idleSilenceMs must be a positive safe integer",
      [{ maxReadBytes = 129, scrollbackMaxBytes = 128 }] = "pty-local: maxReadBytes must be at most scrollbackMaxBytes",
      [{ cwd = "relative" }] = "pty-local: cwd must be an absolute path",
      [{ bogus = 1 }] = "pty-local: unknown config key bogus",
    } do
      assert.has_error(function() context.new():use(p, cfg) end, msg)
    end
    local d = p.validate {}
    assert.same({ "shell", 40, 160, 10000, 4194304, 262144, 50, 3000, 30000, 3000 },
      { d.backendType, d.rows, d.cols, d.scrollbackLines, d.scrollbackMaxBytes, d.maxReadBytes,
        d.pollIntervalMs, d.idleSilenceMs, d.timeoutMs, d.disposeGraceMs })
  end)
end)
