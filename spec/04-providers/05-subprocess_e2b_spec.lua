-- The subprocess contract in a real local sandbox (dshd in bubblewrap, its
-- extensions used natively) and against a bare `dshd --envd-compat` (stock
-- envd behaviour: the setsid wrapper), with the bash provider on top of
-- each; plus reconnection, a daemon killed mid-command, and no secrets on
-- disk or in command lines. A fresh context (and sandbox or daemon) per test.
local async = require "dsh.async"
local context = require "dsh.context"
local envd = require "dsh.envd"
local D = require "helpers.dshd"
local helpers = require "helpers"
local json = require "dsh.json"
local lfs = require "lfs"
local loop = require "dsh.core.loop"
local proc = require "dsh.core.proc"
local state = require "dsh.sandbox.state"
local sys = require "dsh.core.sysutil"
local E = require "helpers.e2b"
local e2b_provider = require "dsh.providers.e2b"

local SECRETS = { NPM_TOKEN = "sentinel-secret", DSH_STALE = "sentinel-stale", db_password = "sentinel-pw" }
local VISIBLE = { KEEP = "visible" }

-- Local sandboxes of this file live under an isolated $DSH_STATE_DIR.
D.isolated_state()

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

-- ctx.e2b from `owner` (a provider, or {provider, config}), then subprocess-e2b and bash on it.
local function start_ctx(owner, sub_cfg)
  return helpers.start_context {
    owner, { require "dsh.providers.subprocess_e2b", sub_cfg or {} },
    { require "dsh.providers.bash", { maxOutputBytes = 200, timeoutMs = 20000 } },
  }
end

-- A real local sandbox, default config, its ambient environment holding secrets.
local function sandbox_env(sub_cfg)
  local ctx = start_ctx({ e2b_provider, { envs = ambient() } }, sub_cfg)
  return {
    ctx = ctx, sh = shell_of(ctx.e2b), secrets = SECRETS, visible = VISIBLE,
    dispose = function() assert(ctx:dispose()) end,
  }
end

-- A bare `dshd --envd-compat` on this host, reached through the real dsh.E2B
-- service class (no sandbox: the daemon runs as us, in a temporary directory).
local function compat_env()
  local dir = helpers.tmpdir()
  local daemon = assert(proc.spawn {
    argv = { helpers.bin("dshd"), "--envd-compat", "--listen", "127.0.0.1:0", "--ready-file",
      dir .. "/ready" },
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
  local ctx = start_ctx(owner)
  return {
    ctx = ctx, sh = shell_of(ctx.e2b), secrets = SECRETS, visible = VISIBLE, client = client,
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

require("helpers.subprocess_contract")("subprocess-e2b on dshd", {
  new = function() return sandbox_env() end, prefix = "subprocess-e2b",
})

require("helpers.subprocess_contract")("subprocess-e2b on stock envd (dshd --envd-compat)", {
  new = compat_env, prefix = "subprocess-e2b", exact_signals = false,
})

-- Host pid of the dshd serving a local sandbox (below its supervisor).
local function dshd_pid(id)
  local function children(pid, out)
    for tid in lfs.dir("/proc/" .. pid .. "/task") do
      if tid:match("^%d+$") then
        for c in (sys.read_file("/proc/" .. pid .. "/task/" .. tid .. "/children") or ""):gmatch("%d+") do
          out[#out + 1] = c
          children(c, out)
        end
      end
    end
    return out
  end
  for _, p in ipairs(children(assert(state.supervisor_pid(id)), {})) do
    local cmdline = sys.read_file("/proc/" .. p .. "/cmdline") or ""
    if cmdline:find("^/opt/dsh/bin/dshd") then return tonumber(p) end
  end
end

local function with(make, fn)
  helpers.run(function()
    local env = make()
    local ok, err = xpcall(fn, debug.traceback, env)
    env.dispose()
    if not ok then error(err, 0) end
  end)
end

describe("subprocess-e2b", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("validates its config and needs ctx.e2b", function()
    local p = require "dsh.providers.subprocess_e2b"
    assert.same({ "e2b" }, p.inject)
    assert.equal("subprocess", p.provides)
    assert.has_error(function() context.new():use(p, { protocol = "ssh" }) end,
      'subprocess-e2b: protocol must be "auto", "dshd" or "envd"')
    assert.has_error(function() context.new():use(p, { reconnectMs = -1 }) end,
      "subprocess-e2b: reconnectMs must be a whole number of milliseconds in [0, 600000]")
    local ctx = context.new():use(p)
    local ok, err = ctx:start()
    assert.is_nil(ok)
    assert.equal("DEPENDENCY_MISSING", err.code)
    ctx:dispose()
  end)

  it("on dshd: pid is the leader's pid, nothing of the env is on disk", function()
    with(sandbox_env, function(env)
      local sub = env.ctx.subprocess
      local h = assert(sub:spawn { argv = { "bash", "-c", "echo $$; cat" },
        env = { EXPLICIT = "value-on-the-wire-only" },
        stdio = { stdin = "pipe", stdout = { maxBytes = 100, spill = { maxBytes = 1000 } } } })
      assert.is_truthy(helpers.eventually(function() return h.stdout:readFrom(0).nextOffset > 0 end, 30000, 5))
      assert.equal(h.pid .. "\n", h.stdout:readFrom(0).text)
      local code = env.sh("grep -rqs value-on-the-wire-only " .. env.ctx.e2b.runtimeRoot)
      assert.equal(1, code) -- no file holds the value (grep found nothing)
      local _, mode = env.sh("stat -c %a " .. h.stateDir)
      assert.equal("700\n", mode)
      h.stdin:close()
      assert.same({ exitCode = 0 }, h.done:await())
      assert.is_true(h:waitForExit())
    end)
  end)

  it("on stock envd: the wrapper gets the env through stdin, never in its command or on disk", function()
    with(compat_env, function(env)
      local sub = env.ctx.subprocess
      local h = assert(sub:spawn { argv = { "bash", "-c", "env; exec sleep 30" },
        env = { EXPLICIT = "value-through-stdin" }, stdio = { stdout = { maxBytes = 10000,
          spill = { maxBytes = 100000 } } } })
      local seen
      helpers.eventually(function()
        seen = h.stdout:readFrom(0).text
        return seen:find("\n_=")
      end, 30000, 5)
      assert.is_truthy(("\n" .. seen):find("\nEXPLICIT=value-through-stdin\n", 1, true))
      local list = assert(env.client:list())
      local wrapper
      for _, p in ipairs(list) do
        local text = json.encode(p.config)
        if text:find("setsid --wait", 1, true) then wrapper = p end
        assert.is_falsy(text:find("value-through-stdin", 1, true))
        assert.is_falsy(text:find("EXPLICIT", 1, true))
      end
      assert.is_truthy(wrapper)
      assert.equal("/bin/bash", wrapper.config.cmd)
      assert.is_true(next(wrapper.config.envs or {}) == nil)
      local args = table.concat(wrapper.config.args, "\n")
      for _, essential in ipairs { "exec setsid --wait --", "env -0", "read -r -d ''", "env -i",
        "tee --output-error=warn-nopipe", "head -c", "umask 077", "[Tt][Oo][Kk][Ee][Nn]" } do
        assert.is_truthy(args:find(essential, 1, true), essential)
      end
      assert.equal(1, (env.sh("grep -rqs value-through-stdin " .. env.ctx.e2b.runtimeRoot)))
      h:terminate()
      assert.same({ signal = "SIGTERM" }, h.done:await())
      assert.is_true(h:waitForExit())
    end)
  end)

  it("on dshd: a dropped stream resumes by offset — nothing lost, nothing repeated", function()
    with(sandbox_env, function(env)
      local h = assert(env.ctx.subprocess:spawn {
        argv = { "bash", "-c",
          "for i in $(seq 1 3000); do echo $i; echo e$i >&2; [ $((i % 300)) = 0 ] && sleep 0.02; done" },
        stdio = { stdout = "pipe", stderr = { maxBytes = 100000 } },
      })
      local parts, n = {}, 0
      while true do
        local s = h.stdout:read()
        if not s then break end
        parts[#parts + 1] = s
        n = n + 1
        if n % 3 == 0 then h._bp._stream:close() end -- the connection goes away under the pump
      end
      local want_out, want_err = {}, {}
      for i = 1, 3000 do
        want_out[i] = i .. "\n"
        want_err[i] = "e" .. i .. "\n"
      end
      assert.is_true(n >= 6)
      assert.equal(table.concat(want_out), table.concat(parts))
      assert.same({ text = table.concat(want_err), nextOffset = #table.concat(want_err), lossy = false },
        h.stderr:readFrom(0))
      assert.same({ exitCode = 0 }, h.done:await())
      assert.is_true(h:waitForExit())
    end)
  end)

  it("reports a daemon killed mid-command within seconds, and nothing hangs", function()
    with(sandbox_env, function(env)
      local sub = env.ctx.subprocess
      local h = assert(sub:spawn { argv = { "bash", "-c", "echo up; exec sleep 30" },
        stdio = { stdout = "pipe" } })
      local w = assert(sub:spawn { argv = { "sleep", "30" }, stdio = { stdin = "pipe" } })
      assert.equal("up\n", h.stdout:read())
      local pid = assert(dshd_pid(assert(env.ctx.e2b:sandboxId())))
      local t0 = loop.now_ms()
      assert.is_true(sys.kill(pid, 9))
      local ok, err = h.done:await()
      assert.is_nil(ok)
      assert.equal("SUBPROCESS_LOST", err.code)
      assert.matches("^subprocess%-e2b: lost the connection to process %d+ and could not reconnect: ",
        err.message)
      assert.is_true(loop.now_ms() - t0 < 5000, "the loss took too long to report")
      local s, rerr = h.stdout:read()
      assert.is_nil(s)
      assert.equal("SUBPROCESS_LOST", rerr.code)
      -- the sandbox came back without it (dshd's death stops it; the
      -- reconnection resumed it): its group is known to be gone
      assert.is_true(h:waitForExit())
      local bad, werr = w.stdin:write("x")
      assert.is_nil(bad)
      assert.is_truthy(werr)
      local t1 = loop.now_ms()
      async.run(function() return sub:dispose() end):await()
      assert.is_true(loop.now_ms() - t1 < 8000, "dispose hung on a dead daemon")
      assert.equal(0, sub:live_count())
      local text, terr = require("dsh.tools.bash").run(env.ctx, { command = "true" })
      assert.is_nil(text)
      assert.equal("DISPOSED", terr.code)
    end)
  end)

  it("on stock envd: a command that ended before its stdin was closed reports its exit", function()
    with(function() return sandbox_env { protocol = "envd" } end, function(env)
      local class = envd.Client
      local close = class.close_stdin
      -- a slow host: the wrapper has read its environment, and it and its command end first
      class.close_stdin = function(c, pid, opts)
        helpers.eventually(function()
          for _, p in ipairs(assert(c:list())) do
            if p.pid == pid then return false end
          end
          return true
        end, 30000)
        return close(c, pid, opts)
      end
      local ok, h = pcall(env.ctx.subprocess.spawn, env.ctx.subprocess, { argv = { "echo", "quick" },
        stdio = { stdout = { maxBytes = 100 } } })
      local res, err
      if ok and h then res, err = h.done:await() end
      class.close_stdin = close
      assert(ok, h)
      assert.same({ { exitCode = 0 }, "quick\n" }, { res or tostring(err), h.stdout:readFrom(0).text })
      assert.is_true(h:waitForExit())
    end)
  end)

  it("uses the stock-envd wrapper on dshd when told to", function()
    with(function() return sandbox_env { protocol = "envd" } end, function(env)
      local h = assert(env.ctx.subprocess:spawn { argv = { "bash", "-c",
        "ps -o pgid=,sid= -p $$; echo $$ $PPID" },
        stdio = { stdout = { maxBytes = 100 } } })
      assert.same({ exitCode = 0 }, h.done:await())
      local pgid, sid, pid, ppid = h.stdout:readFrom(0).text:match("(%d+)%s+(%d+)%s+(%d+)%s+(%d+)")
      -- the payload leads its own session (setsid), the envd process waits for it
      assert.same({ h.pid, h.pid, h.pid }, { tonumber(pgid), tonumber(sid), tonumber(pid) })
      assert.are_not.equal(h.pid, tonumber(ppid))
      assert.is_true(h:waitForExit())
    end)
  end)
end)
