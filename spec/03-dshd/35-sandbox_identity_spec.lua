-- Code in a sandbox cannot become its dshd (issue 18, item 1). dshd runs as
-- the sandbox's root and is non-dumpable; commands run as `user`, another
-- host uid. So from inside, as model-written code would try it: taking
-- dshd's descriptors with pidfd_getfd (its listening socket would let the
-- code answer the host's next request), tracing it, reading its memory and
-- stopping it all fail; a line pushed into the sandbox's stderr never shows
-- as the host's words; and a value the host scrubs from the environment is
-- not in the sandbox at all, not even in dshd's memory (read from the host).
local D = require "helpers.dshd"
local helpers = require "helpers"
local state = require "dsh.sandbox.state"
local sys = require "dsh.core.sysutil"

local function sh(client, script, opts)
  local p = assert(client:start { cmd = "/bin/bash", args = { "-c", script }, user = opts and opts.user })
  local r = assert(p:wait())
  p:close()
  return r.exit_code, r.stdout, r.stderr
end

-- The probe fixture (spec/fixtures/probe.c) uploaded into the sandbox.
local function probe(client)
  local bin = assert(helpers.read_file(helpers.build .. "/bin/fixture-probe"))
  assert(client:write_file("/tmp/probe", bin))
  assert.equal(0, (sh(client, "chmod 0755 /tmp/probe")))
  return function(...)
    local code, out, err = sh(client, "/tmp/probe " .. table.concat({ ... }, " "))
    assert.same({ 0, "" }, { code, err })
    local res = {}
    for what, result in out:gmatch("(%S+) (%S+)\n") do res[what] = result end
    return res, out
  end
end

-- dshd's pid inside (its comm is dshd).
local function dshd_pid(client)
  local code, out = sh(client, "for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = dshd ] && "
    .. "echo ${p#/proc/}; done; true")
  assert.equal(0, code)
  return assert(tonumber(out:match("^(%d+)")), "no dshd in " .. out)
end

describe("a sandbox's code against its dshd", function()
  if sys.getuid() ~= 0 then
    it("needs separate identities (root, or subordinate ids) to hold", function()
      local uids = require "dsh.sandbox.uids"
      print("\n  [35-sandbox_identity] run as root for the full spec; this host gives sandboxes "
        .. uids.mode() .. " identities")
    end)
  end
  local S = D.use_sandbox { envs = { PROJECT = "demo" } }

  it("cannot take dshd's descriptors, trace it, read its memory or stop it", function()
    helpers.run(function()
      local c = S:test_client()
      local run = probe(c)
      local pid = dshd_pid(c)
      assert.equal(2, pid)
      local r, out = run("getfd", pid)
      -- pidfd_open works on any visible process; taking its fds needs ptrace rights
      assert.equal("ok", r.pidfd_open, out)
      assert.equal("0", r.taken, out)
      assert.is_nil(out:find(" ok\n", out:find("pidfd_open ok\n", 1, true) + 14, true), out)
      assert.matches("getfd 3 EPERM", out) -- the listening socket
      assert.equal("EPERM", run("ptrace", pid).ptrace_attach)
      assert.equal("EACCES", run("mem", pid).open_mem)
      assert.equal("EPERM", run("signal", pid).kill_stop)
      -- the bash way of the same
      local code, _, err = sh(c, "kill -STOP " .. pid)
      assert.equal(1, code)
      assert.matches("Operation not permitted", err)
      -- and dshd still answers
      assert.same({ 0, "alive\n", "" }, { sh(c, "echo alive") })
      -- the sandbox's root is not dumpable dshd's ptracer either (no CAP_SYS_PTRACE)
      local root = S:client { user = "root" }
      assert.equal("EACCES", select(2, sh(root, "/tmp/probe mem " .. pid)):match("open_mem (%S+)"))
      assert.equal(1, (sh(root, "cat /proc/" .. pid .. "/environ")))
      root:close()
    end)
  end)

  it("cannot put words in the host's mouth through the sandbox's stderr", function()
    helpers.run(function()
      -- neither `user` nor the sandbox's root reaches the stderr of dshd or of
      -- the sandbox's first process: a pipe of the host's
      for _, who in ipairs { "user", "root" } do
        local c = S:client { user = who }
        for _, pid in ipairs { 1, 2 } do
          local code, _, err = sh(c, "echo FORGED > /proc/" .. pid .. "/fd/2")
          assert.equal(1, code, who .. " " .. pid)
          assert.matches("Permission denied", err, who .. " " .. pid)
        end
        c:close()
      end
      -- what the sandbox does write there (dshd's own lines) is marked as the
      -- sandbox's and never quoted as the host's words
      local log = helpers.read_file(state.dir(S.id) .. "/sandbox.log") or ""
      assert.matches("\n%S+ %[sandbox%] dshd: listening on fd:3", log)
      assert.is_nil(state.log_tail(S.id, 100):find("dshd: listening", 1, true))
      assert.matches("sandbox " .. S.id .. " started", state.log_tail(S.id, 100))
    end)
  end)
end)

describe("the supervisor's log of a sandbox's stderr", function()
  D.use_state()

  it("marks, escapes and bounds each line, and error messages never quote it", function()
    helpers.run(function()
      local proc = require "dsh.core.proc"
      local supervisor = require "dsh.sandbox.supervisor"
      local id = "logspec" .. sys.random_id(8)
      local dir = state.dir(id)
      assert(sys.mkdir_p(dir, "700"))
      finally(function() sys.rm_rf(dir) end)
      local path = dir .. "/sandbox.log"
      local out = assert(io.open(path, "ab"))
      out:write(state.now(), " sandbox ", id, " started (by the host)\n")
      -- what a daemon taken over could print: a line shaped like the host's,
      -- terminal escapes, a flood past the bound
      local forged = state.now() .. " sandbox " .. id .. " failed to start: FORGED"
      local p = assert(proc.spawn { argv = { "sh", "-c",
        "{ printf '%s\\n' \"$1\"; printf 'esc\\033[2J\\r\\n'; head -c 600000 /dev/zero | tr '\\0' y; } >&2", "sh",
        forged },
        stdout = "null", stderr = "pipe" })
      supervisor.drain(p, id, out)
      p:wait()
      p:close()
      out:close()
      local log = assert(helpers.read_file(path))
      assert.matches("\n%S+ %[sandbox%] [^\n]*FORGED\n", log)
      assert.matches("\n%S+ %[sandbox%] esc\\x1b%[2J\\x0d\n", log)
      for line in log:gmatch("[^\n]+") do
        if line:find("FORGED", 1, true) or line:find("yyy", 1, true) then assert.matches("^%S+ %[sandbox%] ", line) end
        assert.is_true(#line <= 1100, "a line of " .. #line .. " bytes")
      end
      assert.is_true(#log < supervisor.MAX_SANDBOX_LOG_BYTES + 4096, #log .. " bytes logged")
      assert.matches("further output of the sandbox dropped", log)
      local tail = state.log_tail(id, 100)
      assert.is_nil(tail:find("FORGED", 1, true))
      assert.is_nil(tail:find("yyy", 1, true))
      assert.matches("further output of the sandbox dropped", tail) -- the host's own line
      assert.is_nil(tail:find("[sandbox]", 1, true))
    end)
  end)
end)

describe("a value the host scrubs", function()
  D.use_state()

  it("never reaches the sandbox, not even dshd's memory", function()
    if sys.getuid() ~= 0 then return end -- reading dshd's memory from the host needs root
    helpers.run(function()
      local context = require "dsh.context"
      local secret = "t0k-" .. sys.random_hex(12)
      local ctx = context.new()
      ctx:use(require "dsh.providers.e2b", { cwd = "/home/user/workspace", onDispose = "kill",
        envs = { PROJECT = "demo", MY_API_TOKEN = secret } })
      ctx:use(require "dsh.providers.subprocess_e2b")
      ctx:use(require "dsh.providers.bash")
      assert(ctx:start())
      finally(function() ctx:dispose() end)
      local r = ctx.bash:run { command = "echo project=$PROJECT token=$MY_API_TOKEN" }
      assert.equal("project=demo token=\n", r.stdout.text)
      -- passed on purpose for one call, it reaches that call only
      r = ctx.bash:run { command = "echo $MY_API_TOKEN", env = { MY_API_TOKEN = "on-purpose" } }
      assert.equal("on-purpose\n", r.stdout.text)
      -- dshd's whole memory and environment, read from the host, hold no trace of it
      local id = ctx.e2b:sandboxId()
      local rt = assert(state.read_runtime(id))
      local init = tonumber(rt.init:match("^(%d+)"))
      local dshd
      for _, pid in ipairs(D.descendants(init)) do
        if (sys.read_file("/proc/" .. pid .. "/comm") or ""):match("^dshd") then dshd = pid end
      end
      assert(dshd, "dshd's host pid")
      local mem = D.memory_of(dshd)
      assert.is_true(#mem > 100000, "read " .. #mem .. " bytes of dshd's memory")
      assert.is_truthy(mem:find("PROJECT", 1, true), "the memory read is dshd's (its /init envVars)")
      assert.is_nil(mem:find(secret, 1, true), "the scrubbed value is in dshd's memory")
      assert.is_nil((sys.read_file("/proc/" .. dshd .. "/environ") or ""):find(secret, 1, true))
      local meta = assert(state.read_meta(id))
      assert.is_nil(meta.envs.MY_API_TOKEN)
    end)
  end)
end)
