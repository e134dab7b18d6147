-- The pty contract in a real local sandbox (dshd in bubblewrap, its
-- terminal-sessions extension used natively) and against a bare
-- `dshd --envd-compat` (stock envd: the subprocess backend's ps/pkill
-- fallback); then what only pty-e2b has: reconnection by byte offset with the
-- gap reported, and sessions that never outlive ctx.e2b.
local async = require "dsh.async"
local context = require "dsh.context"
local D = require "helpers.dshd"
local envd = require "dsh.envd"
local ffi = require "ffi"
local helpers = require "helpers"
local loop = require "dsh.core.loop"
local proc = require "dsh.core.proc"
local pty = require "dsh.pty"
local sandbox = require "dsh.sandbox"
local sys = require "dsh.core.sysutil"
local E = require "helpers.e2b"
local e2b_provider = require "dsh.providers.e2b"

local SECRETS = { NPM_TOKEN = "sentinel-secret", DSH_STALE = "sentinel-stale", db_password = "sentinel-pw" }
local VISIBLE = { KEEP = "visible" }

local function ambient()
  local envs = {}
  for k, v in pairs(SECRETS) do envs[k] = v end
  for k, v in pairs(VISIBLE) do envs[k] = v end
  return envs
end

local function shell_of(e2b)
  return function(cmd)
    local r, err = e2b:exec { "/bin/bash", "-c", cmd }
    if not r then return -1, tostring(err) end
    return r.exit_code, r.stdout
  end
end

-- ctx.e2b from `owner` (a provider, or {provider, config}), then subprocess-e2b, ctx.pty and pty-e2b.
local function compose(owner, cfg)
  return helpers.start_context {
    owner, require "dsh.providers.subprocess_e2b", pty.provider, { require "dsh.providers.pty_e2b", cfg },
  }
end

-- A real local sandbox whose ambient environment holds secrets.
local function sandbox_env(cfg, e2b_extra)
  local e2b_cfg = { envs = ambient() }
  for k, v in pairs(e2b_extra or {}) do e2b_cfg[k] = v end
  local ctx = compose({ e2b_provider, e2b_cfg }, cfg)
  return {
    ctx = ctx, sh = shell_of(ctx.e2b), secrets = SECRETS, visible = VISIBLE, base = ctx.e2b.cwd,
    dispose = function() assert(ctx:dispose()) end,
  }
end

-- A bare `dshd --envd-compat` on this host behind the real dsh.E2B service class.
local function compat_env(cfg)
  local dir = helpers.tmpdir()
  local daemon = assert(proc.spawn {
    argv = { helpers.bin("dshd"), "--envd-compat", "--listen", "127.0.0.1:0", "--ready-file", dir .. "/ready" },
    env = { PATH = "/usr/local/bin:/usr/bin:/bin", HOME = dir, LANG = "C.UTF-8" },
    stdout = "null", stderr = "null",
  })
  local addr = helpers.eventually(function()
    local s = helpers.read_file(dir .. "/ready")
    return s and s:sub(-1) == "\n" and (s:gsub("%s+$", ""))
  end, 5000, 5)
  assert(addr, "dshd --envd-compat did not become ready")
  local client = envd.client { url = "http://" .. addr }
  assert(client:init { envVars = ambient() })
  local cwd = dir .. "/workspace"
  local owner = E.envd_owner(client, cwd)
  local ctx = compose(owner, cfg)
  return {
    ctx = ctx, sh = shell_of(ctx.e2b), secrets = SECRETS, visible = VISIBLE, base = cwd,
    dispose = function()
      local ok, err = ctx:dispose()
      daemon:terminate(1000)
      daemon:wait_quiescent()
      daemon:close()
      helpers.rm_rf(dir)
      assert(ok, tostring(err))
    end,
  }
end

-- Local sandboxes of this file live under an isolated $DSH_STATE_DIR.
D.isolated_state()

require("helpers.pty_contract")("pty-e2b on dshd", { new = sandbox_env, prefix = "pty-e2b", label = "E2B PTY" })
require("helpers.pty_contract")("pty-e2b on stock envd (dshd --envd-compat)",
  { new = compat_env, prefix = "pty-e2b", label = "E2B PTY" })

ffi.cdef "int usleep(unsigned int usec);"

local function with(make, cfg, fn, extra)
  helpers.run(function()
    local env = make(cfg, extra)
    local ok, err = xpcall(fn, debug.traceback, env)
    env.dispose()
    if not ok then error(err, 0) end
  end)
end

local CFG = { pollIntervalMs = 25, idleSilenceMs = 1000, timeoutMs = 20000, disposeGraceMs = 1000 }

describe("pty-e2b", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("validates its config with the reference's messages and defaults", function()
    local p = require "dsh.providers.pty_e2b"
    assert.same({ "e2b", "subprocess", "pty" }, p.inject)
    for cfg, msg in pairs {
      [{ backendType = "" }] = "pty-e2b: backendType must be a non-empty string",
      [{ rows = 0 }] = "pty-e2b: rows must be a positive safe integer",
      [{ rows = 1.5 }] = "pty-e2b: rows must be a positive safe integer",
      [{ pollIntervalMs = 2 ^ 53 }] = "pty-e2b: pollIntervalMs must be a positive safe integer",
      [{ maxReadBytes = 129, scrollbackMaxBytes = 128 }] = "pty-e2b: maxReadBytes must be at most scrollbackMaxBytes",
      [{ shell = {} }] = "pty-e2b: shell must be a non-empty list of strings (the shell's argv)",
    } do
      assert.has_error(function() context.new():use(p, cfg) end, msg)
    end
    local d = p.validate {}
    assert.same({ "shell", 40, 160, 10000, 4194304, 262144, 50, 3000, 30000, 3000 },
      { d.backendType, d.rows, d.cols, d.scrollbackLines, d.scrollbackMaxBytes, d.maxReadBytes,
        d.pollIntervalMs, d.idleSilenceMs, d.timeoutMs, d.disposeGraceMs })
    assert.equal("/w/project", p.resolve("/w", "project"))
    assert.equal("/w", p.resolve("/w", nil))
    assert.equal("/abs", p.resolve("/w", "/abs/x/.."))
  end)

  it("on dshd: resumes a dropped connection by byte offset; nothing lost or repeated", function()
    with(sandbox_env, CFG, function(env)
      local owner = { id = "agent" }
      local s = assert(env.ctx.pty:spawn(owner, { type = "shell" }))
      local op = assert(env.ctx.pty:startSend(owner, s.id, { text = "seq 1 8000", submit = true }))
      local drops = 0
      while not op.settled do
        local bp = s._drv._t._bp
        if bp._stream then
          bp._stream:close() -- the connection goes away under the pump
          drops = drops + 1
        end
        async.sleep(20)
      end
      local r = assert(op:wait())
      assert.equal("stdin_read", r.waitReason)
      assert.is_true(drops >= 2)
      local page = env.ctx.pty:read(owner, s.id, { count = 8002 })
      local want = {}
      for i = 1, 8000 do want[i] = tostring(i) end
      assert.equal("seq 1 8000\n" .. table.concat(want, "\n") .. "\ndsh> ", page.text:match("seq 1 8000\n.*$"))
      assert.equal(0, s.lost)
    end)
  end)

  it("on dshd: reports the gap when a reconnect comes after the replay window", function()
    -- idleSilenceMs long enough not to end the send while the host stalls
    with(sandbox_env, { pollIntervalMs = 25, idleSilenceMs = 5000, timeoutMs = 20000 }, function(env)
      local owner = { id = "agent" }
      local s = assert(env.ctx.pty:spawn(owner, { type = "shell" }))
      local op = assert(env.ctx.pty:startSend(owner, s.id, { text = "sleep 0.2; head -c 3000000 /dev/zero | "
        .. "tr '\\0' x; echo; echo after-the-flood", submit = true }))
      assert.is_truthy(helpers.eventually(function() return op._buf:text():find("head %-c 3000000") end, 30000))
      local id = assert(env.ctx.e2b:sandboxId())
      s._drv._t._bp._stream:close()
      -- the host stalls (no loop turn, so no reconnect) while the shell prints 3 MB
      -- into dshd's 1 MiB replay ring, until the flood's writers are gone (read
      -- from /proc, at most 60 s); then the pump reconnects from its offset
      local function flooding() -- the command's sleep, head or tr still runs
        for _, p in ipairs(E.local_pids(id)) do
          local cmd = sys.read_file("/proc/" .. p .. "/cmdline") or ""
          if cmd:find("^sleep%z0%.2%z") or cmd:find("^head%z%-c%z3000000") or cmd:find("^tr%z") then return true end
        end
        return false
      end
      local stall_until, seen = os.time() + 60, false
      local now
      repeat
        ffi.C.usleep(20000)
        now = flooding()
        seen = seen or now
      until (seen and not now) or os.time() > stall_until
      local r = assert(op:wait())
      assert.equal("stdin_read", r.waitReason)
      assert.is_true(s.lost > 1000000, tostring(s.lost))
      local page = env.ctx.pty:read(owner, s.id, { count = 5 })
      assert.equal("after-the-flood\ndsh> ", page.text:sub(-21))
      assert.equal(s.lost, page.lost)
      local marker = "[dsh: " .. s.lost .. " bytes of terminal output were lost while reconnecting]"
      local found
      for off = 0, 10 do -- line by line: the flood's own line is longer than maxReadBytes
        if env.ctx.pty:read(owner, s.id, { offset = off, count = 1 }).text == marker then found = off end
      end
      assert.is_truthy(found)
    end)
  end)

  it("closes every session before ctx.e2b goes (no shell outlives a left sandbox)", function()
    local id
    with(sandbox_env, CFG, function(env)
      id = assert(env.ctx.e2b:sandboxId())
      local owner = { id = "agent" }
      local s = assert(env.ctx.pty:spawn(owner, { type = "shell" }))
      env.ctx.pty:startSend(owner, s.id, { text = "(trap '' TERM HUP; exec -a dsh-lifetime sleep 300) &",
        submit = true }):wait()
      local _, out = env.sh("ps -eo args=")
      assert.truthy(out:find("dsh-lifetime", 1, true))
    end, { onDispose = "leave" })
    helpers.run(function()
      local sb = assert(sandbox.connect(id))
      local r = assert(sb.envd:start { cmd = "ps", args = { "-eo", "args=" } }):wait()
      sb:close()
      assert.falsy(r.stdout:find("dsh-lifetime", 1, true), r.stdout)
      assert.falsy(("\n" .. r.stdout):find("\n[^\n]*/bin/bash --noprofile", 1), r.stdout)
      assert(sandbox.kill(id))
    end)
  end)

  it("a terminal's end is a session exit; disposal of the registry closes what is left", function()
    with(sandbox_env, CFG, function(env)
      local owner = { id = "agent", signal = async.controller().signal }
      local a = assert(env.ctx.pty:spawn(owner, { type = "shell" }))
      local b = assert(env.ctx.pty:spawn(owner, { type = "shell" }))
      local t0 = loop.now_ms()
      assert.is_true(env.ctx.pty:closeOwner(owner))
      assert.is_true(loop.now_ms() - t0 < 5000)
      for _, s in ipairs { a, b } do
        local code = env.sh("kill -0 " .. s.pid .. " 2>/dev/null")
        assert.equal(1, code)
      end
    end)
  end)
end)
