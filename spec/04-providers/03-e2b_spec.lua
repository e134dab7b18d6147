-- ctx.e2b (dsh-e2b), the pins of reference §6.1 in Lua, against real
-- sandboxes: local ones (dshd in bubblewrap, under a temporary
-- $DSH_STATE_DIR) and cloud ones through the E2B stand-in
-- (spec/fixtures/e2b-api.mjs: E2B's REST control plane and sandbox router,
-- with a real dshd behind each sandbox). What the SDK mocks of the reference
-- observed is observed here on the sandboxes themselves (local: dsh.sandbox;
-- cloud: the stand-in's record of every API call).
local async = require "dsh.async"
local context = require "dsh.context"
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local helpers = require "helpers"
local json = require "dsh.json"
local proc = require "dsh.core.proc"
local sandbox = require "dsh.sandbox"
local sys = require "dsh.core.sysutil"
local e2b = require "dsh.providers.e2b"

local S -- the stand-in, for the whole file

local DISPOSING = "E2B sandbox service is disposing"

local function new_ctx(cfg)
  return context.new():use(e2b, cfg)
end

-- Start a context with ctx.e2b only; raises (after disposing) when it fails.
local function started(cfg)
  return helpers.start_context { { e2b, cfg } }
end

-- Run fn(ctx) on a started context; dispose it afterwards unless fn did.
local function with_ctx(cfg, fn)
  local ctx = started(cfg)
  local ok, err = xpcall(fn, debug.traceback, ctx)
  ctx:dispose()
  if not ok then error(err, 0) end
end

local function sh(e2b_service, cmd)
  local r, err = e2b_service:exec { "/bin/bash", "-c", cmd }
  assert(r, tostring(err))
  return r
end

local function out(e2b_service, cmd)
  local r = sh(e2b_service, cmd)
  assert(r.exit_code == 0, cmd .. " exited " .. tostring(r.exit_code) .. ": " .. r.stderr)
  return r.stdout
end

local function only(calls, method, path_pattern)
  local hits = {}
  for _, c in ipairs(calls) do
    if c.method == method and c.path:match(path_pattern) then hits[#hits + 1] = c end
  end
  return hits
end

-- An envd client through the stand-in's router for sandbox id (no token).
local function envd_client_for(standin, id)
  return require("dsh.envd").client { url = standin.router_url, user = "user",
    headers = { ["E2b-Sandbox-Id"] = id, ["E2b-Sandbox-Port"] = "49983" } }
end

local function is_null(v)
  return v == nil or v == json.null
end

-- Each backend, seen from outside ctx.e2b.
local BACKENDS = {
  {
    name = "local sandboxes",
    cloud = false,
    config = function(extra) return extra or {} end,
    state = function(id)
      for _, s in ipairs(sandbox.list()) do
        if s.id == id then return s.state end
      end
    end,
    info = function(id)
      for _, s in ipairs(sandbox.list()) do
        if s.id == id then return s end
      end
    end,
    create = function()
      local sb = assert(sandbox.create {})
      sb:close()
      return sb.id
    end,
    pause = function(id) assert(sandbox.pause(id)) end,
    kill = function(id) sandbox.kill(id) end,
    pids = function(id) return E.local_pids(id) end,
    count = function() return #sandbox.list() end,
  },
  {
    name = "the E2B cloud (stand-in)",
    cloud = true,
    config = function(extra) return S:config(extra) end,
    state = function(id) return S:state(id) end,
    create = function()
      local r = S:request("POST", "/sandboxes", { templateID = "base", timeout = 300, secure = true })
      assert(r.status == 201, "create answered " .. tostring(r.status))
      return r.body.sandboxID
    end,
    pause = function(id) assert.equal(204, S:request("POST", "/sandboxes/" .. id .. "/pause").status) end,
    kill = function(id) S:request("DELETE", "/sandboxes/" .. id) end,
    pids = function(id) return S:pids(id) end,
    count = function() return #S:sandboxes() end,
  },
}

describe("dsh-e2b", function()
  D.use_state()
  S = E.use_standin()

  it("quotes shell arguments as the reference does (§6.1.13)", function()
    assert.equal([['a'"'"'b $HOME']], e2b.quote("a'b $HOME"))
    assert.equal("''", e2b.quote(""))
    assert.equal(e2b.quote, e2b.E2B.quote)
  end)

  for _, B in ipairs(BACKENDS) do
    describe("on " .. B.name, function()
      it("rejects bad config at ctx:use, before any sandbox is created (§6.1.11)", function()
        helpers.run(function()
          local before, mark = B.count(), S:mark()
          local function rejects(cfg, msg)
            assert.has_error(function() new_ctx(B.config(cfg)) end, msg)
          end
          rejects({ cwd = "work" }, "dsh-e2b: cwd must be an absolute Linux path: work")
          rejects({ cwd = "" }, "dsh-e2b: cwd must be an absolute Linux path: ")
          for _, root in ipairs { "tmp/x", "/", "//", "/a\0b" } do
            rejects({ runtimeRoot = root },
              "dsh-e2b: runtimeRoot must be an absolute Linux path other than /: " .. root)
          end
          rejects({ runtimeRoot = "/srv/w/", cwd = "/srv/w" }, "dsh-e2b: runtimeRoot must not be cwd (/srv/w)")
          for _, t in ipairs { 0, -1, 0 / 0, math.huge, "1000" } do
            local ok, err = pcall(new_ctx, B.config { timeoutMs = t })
            assert.is_false(ok)
            -- positioned at the caller's line, never inside the library
            assert.matches("^[^:]*03%-e2b_spec%.lua:%d+: dsh%-e2b: timeoutMs must be a positive finite number", err)
          end
          rejects({ sandboxId = "" }, "dsh-e2b: sandboxId must be non-empty when provided")
          rejects({ sandboxId = "existing", template = "agent-template" },
            "dsh-e2b: template applies only when creating; omit it when sandboxId reconnects")
          rejects({ onTimeout = "stop" }, 'dsh-e2b: onTimeout must be "kill" or "pause"')
          rejects({ onDispose = "close" }, 'dsh-e2b: onDispose must be "kill", "pause" or "leave"')
          assert.equal(before, B.count())
          assert.same({}, S:calls(mark)) -- not one API call
        end)
      end)

      it("creates with the defaults, makes cwd and a 0700 runtime root, and disposes by killing once (§6.1.1-3)",
        function()
          helpers.run(function()
            local mark = S:mark()
            local ctx = started(B.config {})
            local svc = ctx.e2b
            assert.equal("/home/user/workspace", svc.cwd)
            assert.equal("/tmp/.dsh-e2b", svc.runtimeRoot) -- outside the workspace
            assert.is_true(svc.created)
            assert.equal("pause", svc.timeoutMode)
            assert.equal("kill", svc.disposeMode)
            assert.equal(B.cloud and "cloud" or "local", svc.backend)
            local id = assert(svc:sandboxId())
            assert.matches("^[a-z0-9]+$", id)
            assert.equal(id, assert(svc:getSandbox()).id)
            assert.equal("running", B.state(id))
            -- setup made cwd, then the runtime root, then chmod 700; nothing of
            -- dsh's is in the workspace
            assert.equal("directory 755\ndirectory 700\n",
              out(svc, "stat -c '%F %a' /home/user/workspace /tmp/.dsh-e2b"))
            assert.equal("", out(svc, "ls -A /home/user/workspace"))
            if B.cloud then
              local calls = S:calls(mark)
              assert.equal(1, #calls)
              assert.same({
                method = "POST", path = "/sandboxes", key = S.key, status = 201,
                body = { templateID = "base", timeout = 300, secure = true, autoPause = true },
              }, calls[1])
            else
              local info = B.info(id)
              assert.same({ 300000, "pause", true }, { info.timeout_ms, info.on_timeout, info.network })
            end
            local pids = B.pids(id)
            assert.is_true(#pids > 0)
            local mark2 = S:mark()
            assert.is_true(ctx:dispose())
            assert.is_nil(B.state(id))
            assert.same({}, E.survivors(pids))
            local h, err = svc:getSandbox()
            assert.is_nil(h)
            assert.equal("DISPOSED", err.code)
            assert.equal(DISPOSING, err.message)
            local sid, serr = svc:sandboxId()
            assert.is_nil(sid)
            assert.equal(DISPOSING, serr.message)
            local r, xerr = svc:exec { "true" }
            assert.is_nil(r)
            assert.equal(DISPOSING, xerr.message)
            assert.is_true(ctx:dispose()) -- again: nothing more happens
            if B.cloud then
              local calls = S:calls(mark2)
              assert.same({ { method = "DELETE", path = "/sandboxes/" .. id, key = S.key, status = 204,
                body = json.null } },
                calls)
            else
              local sb, cerr = sandbox.connect(id)
              assert.is_nil(sb)
              assert.equal("not_found", cerr.code)
            end
          end)
        end)

      it("keeps its runtime files out of the workspace: a long output spills under /tmp/.dsh-e2b", function()
        helpers.run(function()
          local ctx = helpers.start_context { { e2b, B.config {} }, require "dsh.providers.subprocess_e2b",
            { require "dsh.providers.bash", { maxOutputBytes = 1000 } } }
          local ok, err = pcall(function()
            local r = assert(ctx.bash:run { command = "head -c 200000 /dev/zero | tr '\\0' x" })
            assert.same({ 0, 200000, 1000 }, { r.exitCode, r.stdout.total, #r.stdout.text })
            assert.matches("^/tmp/%.dsh%-e2b/processes/[^/]+/stdout%.log$", r.stdout.spillPath)
            assert.equal("200000\n", out(ctx.e2b, "wc -c < " .. r.stdout.spillPath))
            -- nothing of dsh's is in the workspace for `git add -A` to pick up
            assert.equal("", out(ctx.e2b, "find /home/user/workspace -mindepth 1"))
            assert.equal("700\n", out(ctx.e2b, "stat -c %a /tmp/.dsh-e2b"))
          end)
          ctx:dispose()
          assert(ok, err)
        end)
      end)

      it("carries timeout, envs, metadata and onTimeout to the sandbox; onDispose pause pauses only and keeps"
        .. " the files; a later sandboxId resumes it (§6.1.5, §6.1.7)", function()
        helpers.run(function()
          local cwd = "/home/user/projects/a b"
          -- the reference's layout, asked for: the runtime root inside cwd
          local cfg = { cwd = cwd .. "/", runtimeRoot = cwd .. "/.dsh-e2b/", timeoutMs = 60000, onTimeout = "kill",
            onDispose = "pause",
            envs = { SPEC_VALUE = "from-create" }, metadata = { purpose = "e2b-spec" } }
          if B.cloud then
            cfg.template = "agent-template"
            cfg.apiKey = false -- the key comes from the environment
            sys.setenv("E2B_API_KEY", S.key)
          end
          local mark = S:mark()
          local ok_new, ctx = pcall(new_ctx, B.config(cfg))
          sys.setenv("E2B_API_KEY", nil)
          assert(ok_new, ctx)
          local ok, err = ctx:start()
          assert(ok, tostring(err))
          local svc = ctx.e2b
          local id = assert(svc:sandboxId())
          assert.same({ cwd, cwd .. "/.dsh-e2b", "kill", "pause" },
            { svc.cwd, svc.runtimeRoot, svc.timeoutMode, svc.disposeMode })
          assert.equal("from-create\n", out(svc, "printenv SPEC_VALUE"))
          assert.equal("700\n", out(svc, "stat -c %a " .. e2b.quote(svc.runtimeRoot)))
          out(svc, "cd " .. e2b.quote(cwd) .. " && printf kept > notes.txt")
          if B.cloud then
            local calls = S:calls(mark)
            assert.equal(1, #calls)
            assert.same({
              method = "POST", path = "/sandboxes", key = S.key, status = 201,
              body = { templateID = "agent-template", timeout = 60, secure = true, autoPause = false,
                metadata = { purpose = "e2b-spec" },
                envVars = { SPEC_VALUE = "from-create" } },
            }, calls[1])
          else
            local info = B.info(id)
            assert.same({ 60000, "kill", { purpose = "e2b-spec" } },
              { info.timeout_ms, info.on_timeout, info.metadata })
          end
          local pids = B.pids(id)
          local mark2 = S:mark()
          assert.is_true(ctx:dispose())
          assert.equal("paused", B.state(id))
          assert.same({}, E.survivors(pids)) -- paused: no process of it runs
          if B.cloud then
            assert.same({ { method = "POST", path = "/sandboxes/" .. id .. "/pause", key = S.key, status = 204,
              body = {} } }, S:calls(mark2))
          end
          -- reconnect: the files, the runtime root and the envs are back
          local mark3 = S:mark()
          with_ctx(B.config { sandboxId = id, cwd = cwd, timeoutMs = 90000 }, function(again)
            assert.is_false(again.e2b.created)
            assert.equal(id, again.e2b:sandboxId())
            assert.equal("running", B.state(id))
            assert.equal("kept", out(again.e2b, "cat " .. e2b.quote(cwd .. "/notes.txt")))
            assert.equal("from-create\n", out(again.e2b, "printenv SPEC_VALUE"))
            if B.cloud then
              assert.same({ { method = "POST", path = "/sandboxes/" .. id .. "/connect", key = S.key,
                status = 201, body = { timeout = 90 } } }, S:calls(mark3))
            end
          end)
          assert.is_nil(B.state(id)) -- that context's onDispose was the default: kill
        end)
      end)

      it("counts a pause answered 'already paused' as a successful dispose (§6.1.6)", function()
        helpers.run(function()
          local ctx = started(B.config { onDispose = "pause" })
          local id = assert(ctx.e2b:sandboxId())
          B.pause(id) -- behind the provider's back
          assert.equal("paused", B.state(id))
          local mark = S:mark()
          assert.is_true(ctx:dispose())
          assert.equal("paused", B.state(id))
          if B.cloud then
            -- 409 is "already paused" or "changing state": the record says which
            assert.same({ { method = "POST", path = "/sandboxes/" .. id .. "/pause", key = S.key, status = 409,
              body = {} },
              { method = "GET", path = "/sandboxes/" .. id, key = S.key, status = 200, body = json.null } },
              S:calls(mark))
          end
          B.kill(id)
        end)
      end)

      it("reconnects with sandboxId and onDispose leave: created false, dispose neither kills nor pauses (§6.1.7)",
        function()
          helpers.run(function()
            local id = B.create()
            local mark = S:mark()
            local ctx = started(B.config { sandboxId = id, onDispose = "leave", timeoutMs = 90000 })
            assert.is_false(ctx.e2b.created)
            assert.equal("leave", ctx.e2b.disposeMode)
            assert.equal(id, ctx.e2b:sandboxId())
            assert.equal("700\n", out(ctx.e2b, "stat -c %a /tmp/.dsh-e2b"))
            if B.cloud then
              assert.same({ { method = "POST", path = "/sandboxes/" .. id .. "/connect", key = S.key,
                status = 200, body = { timeout = 90 } } }, S:calls(mark))
            end
            local pids = B.pids(id)
            local mark2 = S:mark()
            assert.is_true(ctx:dispose())
            assert.same({}, S:calls(mark2))
            assert.equal("running", B.state(id))
            for _, p in ipairs(pids) do assert.is_true(helpers.pid_alive(p)) end
            B.kill(id)
          end)
        end)

      it("disposed while the create is pending: dispose resolves, the sandbox is killed, nothing runs (§6.1.4)",
        function()
          helpers.run(function()
            local before, mark = B.count(), S:mark()
            local ctx = new_ctx(B.config {})
            local start = async.run(function() return ctx:start() end)
            -- wait until the create is under way (local: its state directory
            -- exists; cloud: the stand-in has the request)
            assert.is_truthy(helpers.eventually(function()
              if B.cloud then return #only(S:calls(mark), "POST", "^/sandboxes$") == 1 end
              return B.count() > before
            end))
            assert.is_false(start:done())
            assert.is_true(ctx:dispose())
            assert.is_true(start:done())
            local ok, err = start:await()
            assert.is_nil(ok)
            assert.equal("DISPOSED", err.code)
            assert.has_error(function() return ctx.e2b end,
              "dsh.context: ctx.e2b: DISPOSED: the context was disposed; its services went with it")
            assert.equal(before, B.count())
            if B.cloud then
              local calls = S:calls(mark)
              assert.equal(2, #calls)
              assert.equal("POST", calls[1].method)
              assert.equal("DELETE", calls[2].method)
              assert.equal(204, calls[2].status)
              assert.same({}, S:sandboxes())
            else
              assert.same({}, E.procs_with(helpers.state_dir, true))
            end
          end)
        end)

      it("kills a created sandbox whose setup fails, and returns the setup error (§6.1.8)", function()
        helpers.run(function()
          -- makeDir(cwd) fails for real: under a file, and in a read-only directory
          for cwd, why in pairs { ["/etc/hostname/x"] = ": not a directory$",
            ["/usr/dsh-e2b-spec"] = ": read%-only file system$" } do
            local before, mark = B.count(), S:mark()
            local ctx = new_ctx(B.config { cwd = cwd })
            local ok, err = ctx:start()
            assert.is_nil(ok)
            assert.equal("internal", err.code) -- envd's code for a failed mkdir/stat
            assert.matches(cwd, err.message, 1, true)
            assert.matches(why, err.message)
            assert.is_nil(ctx:get("e2b"))
            assert.equal(before, B.count())
            if B.cloud then
              local calls = S:calls(mark)
              assert.equal(2, #calls)
              assert.equal("POST", calls[1].method)
              assert.equal("DELETE", calls[2].method)
              assert.equal(204, calls[2].status)
            else
              assert.same({}, E.procs_with(helpers.state_dir, true))
            end
            assert.is_true(ctx:dispose())
          end
        end)
      end)

      it("a failed start kills the sandbox it created, whatever onDispose says; a reconnected one is let go",
        function()
          helpers.run(function()
            for _, mode in ipairs { "kill", "pause", "leave" } do
              local before, mark = B.count(), S:mark()
              -- bash injects ctx.subprocess, which nobody offers: the e2b setup succeeds, the start fails
              local ctx = new_ctx(B.config { onDispose = mode }):use(require "dsh.providers.bash")
              local ok, err = ctx:start()
              assert.is_nil(ok)
              assert.equal("DEPENDENCY_MISSING", err.code)
              assert.equal(before, B.count())
              assert.has_error(function() return ctx.e2b end, "dsh.context: ctx.e2b: not available: ctx:start() "
                .. 'failed (DEPENDENCY_MISSING: bash: injects "subprocess", which no provider offers)')
              if B.cloud then
                local calls = S:calls(mark)
                assert.same({ "POST", "DELETE" }, { calls[1].method, calls[2] and calls[2].method })
              else
                assert.same({}, E.procs_with(helpers.state_dir, true))
              end
              assert.is_true(ctx:dispose())
            end
            local id = B.create()
            local ctx = new_ctx(B.config { sandboxId = id }):use(require "dsh.providers.bash")
            assert.is_nil(ctx:start())
            assert.equal("running", B.state(id))
            assert.is_true(ctx:dispose())
            assert.equal("running", B.state(id))
            B.kill(id)
          end)
        end)

      it("never kills a reconnected sandbox whose setup fails (§6.1.10)", function()
        helpers.run(function()
          local id = B.create()
          local mark = S:mark()
          local ctx = new_ctx(B.config { sandboxId = id, cwd = "/etc/hostname/x" })
          local ok, err = ctx:start()
          assert.is_nil(ok)
          assert.matches("/etc/hostname/x", err.message, 1, true)
          assert.is_true(ctx:dispose())
          assert.equal("running", B.state(id))
          if B.cloud then
            local calls = S:calls(mark)
            assert.equal(1, #calls)
            assert.equal("/sandboxes/" .. id .. "/connect", calls[1].path)
          end
          B.kill(id)
          -- an unknown id: nothing to connect to, nothing killed
          local missing = "zzzzzzzzzzzzzzzzzzzz"
          ctx = new_ctx(B.config { sandboxId = missing })
          ok, err = ctx:start()
          assert.is_nil(ok)
          assert.equal("not_found", err.code)
          assert.equal("sandbox " .. missing .. " not found", err.message)
          assert.is_true(ctx:dispose())
        end)
      end)

      it("resolves executables in the sandbox (§6.1.14-15)", function()
        helpers.run(function()
          with_ctx(B.config {}, function(ctx)
            local svc = ctx.e2b
            assert.equal("/bin/bash", svc:resolveExecutable("/bin/bash"))
            local bash = assert(svc:resolveExecutable("bash"))
            assert.matches("^/.*/bash$", bash)
            assert.equal(0, sh(svc, "test -x " .. e2b.quote(bash)).exit_code)
            local cases = {
              { "", "E2B executable name must be non-empty" },
              { "dsh-no-such-command", 'E2B executable "dsh-no-such-command" did not resolve to one absolute path' },
              { "/bin/dsh-no-such-command", 'E2B executable "/bin/dsh-no-such-command" is not an executable file' },
              { "/usr", 'E2B executable "/usr" is not an executable file' },
              { "/etc/hostname", 'E2B executable "/etc/hostname" is not an executable file' },
            }
            for _, c in ipairs(cases) do
              local p, err = svc:resolveExecutable(c[1])
              assert.is_nil(p)
              assert.equal("E2B_EXECUTABLE", err.code)
              assert.equal(c[2], err.message)
            end
            -- quoting survives a real shell
            assert.equal("a'b $HOME", out(svc, "printf %s " .. e2b.quote("a'b $HOME")))
          end)
        end)
      end)
    end)
  end

  describe("on the E2B cloud (stand-in) only", function()
    it("needs an API key: none, or an empty one with an empty E2B_API_KEY (§6.1.11-12)", function()
      helpers.run(function()
        local mark, saved, before = S:mark(), os.getenv("E2B_API_KEY"), #S:sandboxes()
        local msg = "dsh-e2b: configure apiKey or set E2B_API_KEY"
        local ok, err = pcall(function()
          sys.setenv("E2B_API_KEY", nil)
          assert.has_error(function() new_ctx(S:config { apiKey = false }) end, msg)
          sys.setenv("E2B_API_KEY", "")
          assert.has_error(function() new_ctx(S:config { apiKey = false }) end, msg)
          assert.has_error(function() new_ctx(S:config { apiKey = "" }) end, msg)
        end)
        sys.setenv("E2B_API_KEY", saved)
        assert(ok, err)
        assert.same({}, S:calls(mark))
        assert.equal(before, #S:sandboxes())
      end)
    end)

    it("fails the start with the API's answer when the key is wrong", function()
      helpers.run(function()
        local mark, before = S:mark(), #S:sandboxes()
        local ctx = new_ctx(S:config { apiKey = "e2b_wrong_key" })
        local ok, err = ctx:start()
        assert.is_nil(ok)
        assert.equal("unauthenticated", err.code)
        assert.equal("E2B API create failed (401 Unauthorized): the API key was refused (check apiKey or"
          .. " E2B_API_KEY): Invalid API key, it must start with e2b_ prefix", err.message)
        assert.is_true(ctx:dispose())
        local calls = S:calls(mark)
        assert.equal(1, #calls)
        assert.same({ "e2b_wrong_key", 401 }, { calls[1].key, calls[1].status })
        assert.equal(before, #S:sandboxes())
      end)
    end)

    it("never lets the API key into the sandbox: only the envd token reaches it", function()
      helpers.run(function()
        local _, rmark = S:routed()
        with_ctx(S:config {}, function(ctx)
          local svc = ctx.e2b
          local seen = out(svc, "env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do"
            .. " tr '\\0' '\\n' < $f 2>/dev/null; done; ps -eo args=")
          assert.is_truthy(seen:find("PATH=", 1, true)) -- it did read environments
          assert.is_falsy(seen:find(S.key, 1, true))
          assert.equal(1, sh(svc, "grep -rqs -- " .. e2b.quote(S.key) .. " /home/user /tmp /run").exit_code)
        end)
        local routed = S:routed(rmark)
        assert.is_true(#routed > 3)
        for _, r in ipairs(routed) do
          assert.is_true(is_null(r.apiKey), "the API key was sent to envd: " .. r.path)
          if r.path ~= "/health" then assert.is_true(r.accessToken, "no envd token on " .. r.path) end
        end
      end)
    end)

    it("routes by E2b-Sandbox-Id, holds long-lived streams, and closes the upstream when the client goes away",
      function()
        helpers.run(function()
          with_ctx(S:config {}, function(ctx)
            local id = ctx.e2b:sandboxId()
            local port = assert(S:port(id))
            local envd = assert(ctx.e2b:getSandbox()).envd
            -- every earlier call is over (and its upstream connection closed)
            assert.is_truthy(helpers.eventually(function() return E.established(port) == 0 end, 2000))
            local streams = {}
            for i = 1, 3 do
              local p = assert(envd:start { cmd = "/bin/bash", args = { "-c", "echo up" .. i .. "; exec sleep 30" } })
              local got = ""
              while got ~= "up" .. i .. "\n" do
                local ev = assert(p:next())
                assert.equal("data", ev.type)
                got = got .. ev.data
              end
              streams[i] = p
            end
            -- three streams held open through the router
            assert.is_truthy(helpers.eventually(function() return E.established(port) == 3 end, 30000),
              "established: " .. E.established(port))
            for _, p in ipairs(streams) do p:close() end
            assert.is_truthy(helpers.eventually(function() return E.established(port) == 0 end, 3000),
              "the router kept upstream connections of clients that went away")
            -- a sandbox it does not know: E2B's 502
            local other = envd_client_for(S, "zzzzzzzzzzzzzzzzzzzz")
            local ok, err = other:health()
            other:close()
            assert.is_nil(ok)
            assert.equal("The sandbox was not found", err.message)
          end)
        end)
      end)

    it("the stand-in exits and stops its sandboxes when its parent dies", function()
      helpers.run(function()
        local dir = helpers.tmpdir()
        local key = "e2b_orphan_key"
        local parent = assert(proc.spawn {
          argv = { "bash", "-c", 'node "$0" --api-key "$1" --dshd "$2" --state-dir "$3" & wait',
            helpers.root .. "/spec/fixtures/e2b-api.mjs", key, helpers.bin("dshd"), dir .. "/sandboxes" },
          env = { PATH = os.getenv("PATH"), HOME = dir }, stdout = "pipe", stderr = "inherit",
        })
        local ok, err = xpcall(function()
          local line = ""
          while not line:find("\n", 1, true) do line = line .. assert(parent:read()) end
          local info = json.decode(line)
          local orphan = setmetatable({ key = key, api_url = "http://127.0.0.1:" .. info.api }, getmetatable(S))
          local r = orphan:request("POST", "/sandboxes", { templateID = "base", timeout = 300, secure = true })
          assert.equal(201, r.status)
          local pids = orphan:pids(r.body.sandboxID)
          assert.is_true(#pids >= 3) -- bubblewrap, its init, dshd
          pids[#pids + 1] = info.pid
          assert.is_true(parent:signal("SIGKILL", false)) -- the parent only, not node
          assert.same({}, E.survivors(pids, 5000))
          parent:wait_quiescent()
          assert.same({}, E.procs_with(dir))
        end, debug.traceback)
        if not ok then -- SIGTERM then: node stops what it started
          for _, p in ipairs(E.procs_with(dir)) do require("dsh.core.sysutil").kill(p, 15) end
          parent:terminate(1000)
          parent:wait_quiescent()
          E.survivors(E.procs_with(dir), 5000)
        end
        parent:close()
        helpers.rm_rf(dir)
        if not ok then error(err, 0) end
      end)
    end)
  end)
end)
