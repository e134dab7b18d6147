-- The live composition of reference §6.2 B (steps 1-5 and 17): ctx.e2b,
-- ctx.fs (fs-e2b), ctx.subprocess (subprocess-e2b) and ctx.bash on one real
-- sandbox whose cwd is the host's cwd string — the same string naming two
-- unrelated directories. On a local sandbox (dshd in bubblewrap, under a
-- temporary $DSH_STATE_DIR), then on a cloud sandbox through the E2B
-- stand-in (spec/fixtures/e2b-api.mjs, a real dshd behind E2B's API and
-- router), with `dsh poc --cloud` there too; then the faults: the sandbox
-- killed under live providers, and disposal while commands run.
local async = require "dsh.async"
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local errors = require "dsh.errors"
local helpers = require "helpers"
local loop = require "dsh.core.loop"
local sandbox = require "dsh.sandbox"
local sys = require "dsh.core.sysutil"

local S -- the stand-in

-- The sandbox's ambient environment: two secrets the seam must scrub, one to keep.
local AMBIENT = { NPM_TOKEN = "sentinel-secret", DSH_STALE = "sentinel-stale", KEEP = "visible" }
local FILES = { "from-fs.txt", "from-bash.txt" }

local function compose(e2b_cfg)
  return helpers.start_context {
    { require "dsh.providers.e2b", e2b_cfg }, require "dsh.providers.fs_e2b", require "dsh.providers.subprocess_e2b",
    { require "dsh.providers.bash", { timeoutMs = 30000 } },
  }
end

local function local_cfg(extra)
  local cfg = { cwd = helpers.root, envs = AMBIENT, timeoutMs = 180000, onTimeout = "kill", onDispose = "kill" }
  for k, v in pairs(extra or {}) do cfg[k] = v end
  return cfg
end

-- Run fn(ctx) on a started composition; dispose it afterwards unless fn did.
local function with_composition(cfg, fn)
  local ctx = compose(cfg)
  local ok, err = xpcall(fn, debug.traceback, ctx)
  ctx:dispose()
  if not ok then error(err, 0) end
end

local function step(name, fn)
  local ok, err = xpcall(fn, debug.traceback)
  if not ok then error("step " .. name .. ": " .. tostring(err), 0) end
end

local function ps(ctx)
  local r = assert(ctx.e2b:exec { "ps", "-eo", "args=" })
  return r.stdout
end

local function collect(n)
  return { maxBytes = n }
end

-- §6.2 steps 1-3 (the shared world and the environment scrub).
local function steps_1_to_3(ctx)
  step("1: fs writes, Bash reads", function()
    local w = assert(ctx.fs:writeText("from-fs.txt", "written-by-fs\n", { createIfAbsent = true }))
    assert.equal("create", w.operation)
    local r = assert(ctx.bash:run { command = "cat from-fs.txt" })
    assert.same({ 0, "written-by-fs\n", "" }, { r.exitCode, r.stdout.text, r.stderr.text })
  end)
  step("2: Bash writes, fs reads", function()
    local r = assert(ctx.bash:run { command = "printf 'written-by-bash\\n' > from-bash.txt" })
    assert.equal(0, r.exitCode)
    assert.equal("written-by-bash\n", assert(ctx.fs:readText("from-bash.txt")).text)
  end)
  step("3: explicit env kept, ambient secrets scrubbed", function()
    local h = assert(ctx.subprocess:spawn {
      argv = { "env" }, env = { ["FOO-BAR"] = "a", DSH_EXPLICIT = "b", TOKEN_EXPLICIT = "c" },
      stdio = { stdin = "ignore", stdout = collect(65536), stderr = collect(4096) },
    })
    assert.same({ exitCode = 0 }, h.done:await())
    assert.is_true(h:waitForExit())
    local env = {}
    for line in h.stdout:readFrom(0).text:gmatch("[^\n]+") do
      local k, v = line:match("^([^=]+)=(.*)$")
      if k then env[k] = v end
    end
    assert.same({ "a", "b", "c", "visible" }, { env["FOO-BAR"], env.DSH_EXPLICIT, env.TOKEN_EXPLICIT, env.KEEP })
    assert.is_nil(env.NPM_TOKEN)
    assert.is_nil(env.DSH_STALE)
    local text = h.stdout:readFrom(0).text
    assert.is_falsy(text:find("sentinel", 1, true))
  end)
end

describe("the composition e2b + fs + subprocess + bash", function()
  D.use_state()
  S = E.use_standin()

  it("on one local sandbox: §6.2 steps 1-5, then 17 after dispose", function()
    helpers.run(function()
      local ctx = compose(local_cfg())
      local id = assert(ctx.e2b:sandboxId())
      local ok, err = xpcall(function()
        assert.equal(helpers.root, ctx.e2b.cwd)
        assert.equal(helpers.root, ctx.fs.cwd)
        steps_1_to_3(ctx)
        step("4: a publication failure leaves no survivor", function()
          local sub = ctx.subprocess
          sub:injectFault("afterStart", function()
            -- fails once the payload has forked its background child (so there is one to roll back)
            assert(helpers.eventually(function()
              return ("\n" .. ps(ctx)):find("\ndsh-publication-survivor 30", 1, true)
            end, 30000, 20), "the payload never started its child")
            return nil, errors.new("INJECTED", "injected publication failure")
          end)
          local h = assert(sub:spawn { argv = { "bash", "-c", "exec -a dsh-publication-survivor sleep 30 & wait" } })
          local okd, derr = h.done:await()
          sub:injectFault("afterStart", nil)
          assert.is_nil(okd)
          assert.equal("INJECTED", derr.code)
          assert.equal("injected publication failure", derr.message)
          assert.equal(-1, h.pid)
          assert.is_true(h:waitForExit())
          assert.is_falsy(ps(ctx):find("dsh-publication-survivor", 1, true))
        end)
        step("5: output cut to its tail, the incomplete spill dropped", function()
          local h = assert(ctx.subprocess:spawn {
            argv = { "bash", "-c", "printf 0123456789; sleep 30" },
            stdio = { stdin = "ignore", stdout = { maxBytes = 4, spill = { maxBytes = 6 } }, stderr = collect(100) },
          })
          assert.is_truthy(helpers.eventually(function() return h.stdout:readFrom(0).nextOffset >= 10 end))
          local spill = h.stateDir .. "/stdout.log"
          -- the spill holds exactly its bound (reference §6.2.5: 6 bytes)
          local size = tonumber(assert(ctx.e2b:exec { "stat", "-c", "%s", spill }).stdout)
          assert.equal(6, size)
          assert.is_true(h:terminate())
          assert.same({ signal = "SIGTERM" }, h.done:await())
          local signal, stop = (function()
            local c = async.controller()
            local t = loop.timer(function() c:abort("5 s") end)
            t:start(5000)
            return c.signal, function() t:close() end
          end)()
          assert.is_true(h:waitForExit(signal))
          stop()
          assert.same({ text = "6789", nextOffset = 10, lossy = true }, h.stdout:readFrom(0))
          assert.is_nil(h.stdout.spillPath)
          local r = assert(ctx.e2b:exec { "test", "-e", spill })
          assert.equal(1, r.exit_code) -- the incomplete spill was deleted
        end)
        step("the files are in the sandbox's cwd", function()
          for _, f in ipairs(FILES) do
            assert.equal(0, assert(ctx.e2b:exec { "test", "-f", helpers.root .. "/" .. f }).exit_code)
          end
        end)
      end, debug.traceback)
      local pids = E.local_pids(id)
      local dok, derr = ctx:dispose()
      if not ok then error(err, 0) end
      step("17: nothing on the host; the sandbox is gone", function()
        assert.is_true(dok, tostring(derr))
        for _, f in ipairs(FILES) do
          assert.is_nil(helpers.read_file(helpers.root .. "/" .. f), f .. " exists in the host cwd")
        end
        assert.is_false(sandbox.exists(id))
        local sb, cerr = sandbox.connect(id)
        assert.is_nil(sb)
        assert.equal("not_found", cerr.code)
        assert.same({}, E.survivors(pids, 0)) -- gone when dispose returned
      end)
    end)
  end)

  it("on a cloud sandbox through the E2B stand-in: steps 1-3, streaming, and dispose", function()
    helpers.run(function()
      local mark, rmark = S:mark(), select(2, S:routed())
      local ctx = compose(S:config(local_cfg()))
      local id = assert(ctx.e2b:sandboxId())
      assert.equal("cloud", ctx.e2b.backend)
      local ok, err = xpcall(function()
        steps_1_to_3(ctx)
        step("a long-lived stream through the router, terminated", function()
          local h = assert(ctx.subprocess:spawn {
            argv = { "bash", "-c", "for i in 1 2 3; do echo line$i; sleep 0.05; done; exec sleep 30" },
            stdio = { stdin = "pipe", stdout = "pipe", stderr = collect(100) },
          })
          local got = ""
          while not got:find("line3\n", 1, true) do got = got .. assert(h.stdout:read()) end
          assert.equal("line1\nline2\nline3\n", got)
          h:terminate()
          assert.same({ signal = "SIGTERM" }, h.done:await())
          assert.is_true(h:waitForExit())
        end)
        step("stdin through the router", function()
          local h = assert(ctx.subprocess:spawn { argv = { "cat" },
            stdio = { stdin = "pipe", stdout = collect(100), stderr = collect(100) } })
          assert(h.stdin:write("through the router\n"))
          assert(h.stdin:close())
          assert.same({ exitCode = 0 }, h.done:await())
          assert.equal("through the router\n", h.stdout:readFrom(0).text)
        end)
        step("a 5 MB file both ways through the router (a chunked upload)", function()
          local big = string.rep("0123456789abcdef\n", 300000)
          assert(ctx.fs:writeText("big.txt", big))
          local r = assert(ctx.bash:run { command = "wc -c < big.txt; sha256sum < big.txt" })
          assert.equal(#big .. "\n" .. require("dsh.core.sha256").hex(big) .. "  -\n", r.stdout.text)
          assert.equal(big, assert(ctx.fs:readText("big.txt")).text)
        end)
      end, debug.traceback)
      local pids = S:pids(id)
      local mark2 = S:mark()
      local dok, derr = ctx:dispose()
      if not ok then error(err, 0) end
      assert.is_true(dok, tostring(derr))
      local calls = S:calls(mark)
      assert.equal("POST", calls[1].method)
      assert.equal("/sandboxes", calls[1].path)
      -- the names the scrub drops never leave the host, not even to E2B
      assert.same({ KEEP = "visible" }, calls[1].body.envVars)
      local after = S:calls(mark2)
      assert.equal(1, #after)
      assert.same({ "DELETE", "/sandboxes/" .. id, 204 }, { after[1].method, after[1].path, after[1].status })
      assert.equal(404, S:request("GET", "/sandboxes/" .. id).status) -- getInfo: not found
      assert.same({}, E.survivors(pids, 0))
      for _, f in ipairs { "from-fs.txt", "from-bash.txt", "big.txt" } do
        assert.is_nil(helpers.read_file(helpers.root .. "/" .. f))
      end
      local routed = S:routed(rmark)
      assert.is_true(#routed > 10)
      local chunked = 0
      for _, r in ipairs(routed) do
        assert.equal(id, r.sandboxId)
        if r.chunked and r.method == "POST" and r.path:match("^/files") then chunked = chunked + 1 end
      end
      assert.equal(1, chunked) -- the 5 MB upload streamed through as a chunked body
    end)
  end)

  it("runs the proof of concept (dsh poc --cloud) on the stand-in, configured by E2B's environment variables",
    function()
      helpers.run(function()
        local mark = S:mark()
        local p = assert(require("dsh.core.proc").spawn {
          argv = { "luajit", "-e", 'os.exit(require("dsh.app.poc").main { "--cloud" })' },
          env = { PATH = os.getenv("PATH"), LUA_PATH = package.path, LUA_CPATH = package.cpath,
            DSH_BUILD_DIR = helpers.build, E2B_API_KEY = S.key, E2B_API_URL = S.api_url,
            E2B_SANDBOX_URL = S.router_url },
          stdout = "pipe", stderr = "pipe",
        })
        local out, err = p:read_all(), p:read_all("stderr")
        local st = p:wait()
        p:close()
        assert.equal(0, st.exit_code, out .. err)
        assert.matches("\npoc: all %d+ steps passed in ", out)
        local calls = S:calls(mark)
        assert.same({ "POST", "/sandboxes", S.key }, { calls[1].method, calls[1].path, calls[1].key })
        local delete -- the last call but step 17's look for the deleted sandbox
        for _, c in ipairs(calls) do
          if c.method == "DELETE" then delete = c end
        end
        assert.same({ "DELETE", 204 }, { delete.method, delete.status })
        assert.is_nil(S:state(delete.path:match("[^/]+$")))
      end)
    end)

  it("a sandbox killed under live providers: calls fail within seconds, nothing hangs, dispose returns", function()
    helpers.run(function()
      local ctx = compose(local_cfg())
      local id = assert(ctx.e2b:sandboxId())
      local ok, err = xpcall(function()
        local sub = ctx.subprocess
        local h = assert(sub:spawn { argv = { "bash", "-c", "echo up; exec sleep 30" },
          stdio = { stdin = "pipe", stdout = "pipe" } })
        assert.equal("up\n", h.stdout:read())
        local run = async.run(function() return ctx.bash:run { command = "echo started > bash.txt; sleep 30" } end)
        assert.is_truthy(helpers.eventually(function()
          return ctx.fs:readText("bash.txt") ~= nil
        end))
        local pids = E.local_pids(id)
        assert.is_true(#pids >= 5)
        local t0 = loop.now_ms()
        assert(sandbox.kill(id)) -- from the host, behind the providers' backs
        assert.same({}, E.survivors(pids, 0))
        -- one code, saying why and when, from what waited and from every later call
        local gone = "sandbox " .. id .. " is gone: killed at %d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$"
        local okd, derr = h.done:await()
        assert.is_nil(okd)
        assert.equal("SANDBOX_GONE", derr.code)
        assert.matches("^" .. gone, derr.message)
        local r, rerr = run:await()
        assert.is_nil(r)
        assert.equal("SANDBOX_GONE", rerr.code)
        assert.is_true(loop.now_ms() - t0 < 6000, "the loss took too long to report")
        local t1 = loop.now_ms()
        local text, ferr = ctx.fs:readText("bash.txt")
        assert.is_nil(text)
        assert.equal("SANDBOX_GONE", ferr.code)
        assert.matches('^cannot read "' .. helpers.root:gsub("%p", "%%%0") .. '/bash.txt": ' .. gone, ferr.message)
        local w, werr = ctx.fs:writeText("late.txt", "x")
        assert.is_nil(w)
        assert.equal("SANDBOX_GONE", werr.code)
        local b, berr = ctx.bash:run { command = "true" }
        assert.is_nil(b)
        assert.equal("SANDBOX_GONE", berr.code)
        local x, xerr = ctx.e2b:exec { "true" }
        assert.is_nil(x)
        assert.equal("SANDBOX_GONE", xerr.code)
        assert.matches("^" .. gone, xerr.message)
        local wrote, serr = h.stdin:write("x")
        assert.is_nil(wrote)
        -- the handle was let go once its group was known gone (with the sandbox)
        assert.is_truthy(serr.code == "SUBPROCESS_CLOSED" or serr.code == "SANDBOX_GONE", serr.code)
        assert.is_true(loop.now_ms() - t1 < 3000, "calls on a dead sandbox took too long")
      end, debug.traceback)
      local t2 = loop.now_ms()
      local dok, derr = ctx:dispose()
      if not ok then error(err, 0) end
      assert.is_true(dok, tostring(derr)) -- the sandbox was already gone: nothing left to kill
      assert.is_true(loop.now_ms() - t2 < 8000, "dispose hung on a dead sandbox")
      assert.is_false(sandbox.exists(id))
    end)
  end)

  for _, mode in ipairs { "kill", "leave" } do
    it("disposal while commands run (onDispose " .. mode .. "): every process is gone when dispose returns",
      function()
        helpers.run(function()
          local ctx = compose(local_cfg { onDispose = mode })
          local id = assert(ctx.e2b:sandboxId())
          local sub = ctx.subprocess
          local hs, run
          local ok, err = xpcall(function()
            hs = {
              assert(sub:spawn { argv = { "sleep", "31" } }),
              assert(sub:spawn { argv = { "bash", "-c", "trap '' TERM; echo ready; sleep 32 & wait" }, graceMs = 300,
                stdio = { stdout = collect(100) } }),
              assert(sub:spawn { argv = { "yes" }, stdio = { stdout = "pipe" } }), -- nobody reads
              assert(sub:spawn { argv = { "bash", "-c", "cat" }, stdio = { stdin = "pipe", stdout = collect(10) } }),
            }
            run = async.run(function() return ctx.bash:run { command = "sleep 33" } end)
            assert.is_truthy(helpers.eventually(function()
              return hs[2].stdout:readFrom(0).text == "ready\n" and hs[1].pid > 0 and hs[3].pid > 0
                and hs[4].pid > 0 and ps(ctx):find("sleep 33", 1, true)
            end))
          end, debug.traceback)
          local inside = E.local_pids(id)
          local t0 = loop.now_ms()
          local dok, derr = ctx:dispose()
          local took = loop.now_ms() - t0
          if not ok then error(err, 0) end
          assert.is_true(dok, tostring(derr))
          assert.is_true(took < 8000, "dispose took " .. took .. " ms")
          for _, h in ipairs(hs) do assert.is_true(h.done:done()) end
          assert.is_true(run:done())
          assert.same({ signal = "SIGKILL" }, hs[2].done:await()) -- it ignored TERM
          if mode == "kill" then
            assert.same({}, E.survivors(inside, 0))
            assert.is_false(sandbox.exists(id))
          else
            -- the sandbox stays, its dshd too, but no process any provider started
            assert.equal("running", sandbox.list()[1].state)
            local sb = assert(sandbox.connect(id))
            local r = assert(sb.envd:start { cmd = "ps", args = { "-eo", "args=" } }):wait()
            sb:close()
            for _, name in ipairs { "sleep", "yes", "cat", "bash" } do
              for line in r.stdout:gmatch("[^\n]+") do
                assert.is_falsy(line:match("^" .. name .. "%f[%s%z]") or line:match("^/%S*/" .. name .. "%f[%s%z]"),
                  "still running: " .. line)
              end
            end
            assert(sandbox.kill(id))
          end
        end)
      end)
  end

  it("keeps the host's files out of the sandbox (the same cwd string names two directories)", function()
    helpers.run(function()
      local marker = "dsh-composition-marker-" .. sys.random_hex(4)
      helpers.write_file(helpers.root .. "/" .. marker, "host only\n")
      local ok, err = pcall(with_composition, local_cfg(), function(ctx)
        local text, rerr = ctx.fs:readText(marker)
        assert.is_nil(text)
        assert.equal("FS_NOT_FOUND", rerr.code)
        local r = assert(ctx.bash:run { command = "ls -A" })
        assert.equal(0, r.exitCode)
        assert.is_falsy(r.stdout.text:find(marker, 1, true))
        assert.is_falsy(r.stdout.text:find("CMakeLists.txt", 1, true))
      end)
      os.remove(helpers.root .. "/" .. marker)
      assert(ok, err)
    end)
  end)
end)
