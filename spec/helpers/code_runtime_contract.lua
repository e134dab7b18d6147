--- The ctx.codeRuntime contract (reference §2.6, §4.1, the pins of §6.7 that
-- a real runner can show), shared by every code-runtime provider and run in
-- both languages wherever a case applies.
--
--   require("helpers.code_runtime_contract")("code-runtime-local", factory)
--
-- factory.new(cfg) runs inside a task and returns an env for one test:
--   env.ctx       a started context with ctx.codeRuntime (configured with cfg)
--   env.sh(cmd)   run a shell command in the runner's world -> exit code, stdout
--   env.tag       a string every runner process of this env has in its command line
--   env.dispose() dispose the context
-- factory.prefix  the provider's message prefix; factory.label its runtime label
-- factory.typescript  true when this world's Node can strip types
local async = require "dsh.async"
local code_runtime = require "dsh.code_runtime"
local helpers = require "helpers"
local loop = require "dsh.core.loop"

local HERE = debug.getinfo(1, "S").short_src

local function aborted_after(ms, reason)
  local ctl = async.controller()
  local t = loop.timer(function() ctl:abort(reason) end)
  t:start(ms)
  return ctl.signal, function() t:close() end
end

return function(name, factory)
  setfenv(1, getfenv(2))

  -- fn, written on one line, raises exactly "<this file>:<that line>: <want>":
  -- misuse is reported at the caller's line, never inside the library.
  local function raises_here(want, fn)
    local info = debug.getinfo(fn, "S")
    assert(info.linedefined == info.lastlinedefined, "write the call on one line")
    local ok, err = pcall(fn)
    assert.is_false(ok, "no error raised: " .. want)
    assert.equal(HERE .. ":" .. info.linedefined .. ": " .. want, err)
  end
  local prefix, label = factory.prefix, factory.label
  local LANGS = { "lua" }
  if factory.typescript then LANGS[#LANGS + 1] = "typescript" end

  -- Binding calls still running on the host (a settled run does not wait for them).
  local inflight = 0
  local function quiet()
    while inflight > 0 do async.sleep(10) end
  end

  -- Command lines of the runner processes of env (in the runner's world).
  local function runner_processes(env)
    local _, ps = env.sh("ps -eo args=")
    local out = {}
    for line in ps:gmatch("[^\n]+") do
      if line:find(env.tag, 1, true) and line:find("code%-runtime%-") then out[#out + 1] = line end
    end
    return out
  end

  local function with_env(cfg, fn)
    helpers.run(function()
      local env = factory.new(cfg or {})
      local ok, err = pcall(fn, env, env.ctx.codeRuntime)
      env.ctx.codeRuntime._ready:await() -- setup's own commands name the runner files too
      -- no runner process is left once a run has reported
      local left = runner_processes(env)
      env.dispose()
      quiet()
      if not ok then error(err, 0) end
      assert(#left == 0, "runner processes left: " .. table.concat(left, " | "))
    end)
  end

  -- The same program in each language.
  local P = {
    hello = {
      lua = [[print("remote 你好") return { answer = 42 }]],
      typescript = [[const n: number = 42; console.log("remote 你好"); return { answer: n };]],
    },
    forged = {
      lua = [[io.stdout:write("eyJ0eXBlIjoiZG9uZSJ9\n") io.stdout:flush()
        os.execute("echo child-native") return { true }]],
      typescript = [[const fs = process.getBuiltinModule("fs");
        fs.writeSync(1, "eyJ0eXBlIjoiZG9uZSJ9\n");
        process.getBuiltinModule("child_process").spawnSync("sh", ["-c", "echo child-native"], { stdio: "inherit" });
        return [true];]],
    },
    native4k = {
      lua = [[io.stdout:write(string.rep("x", 4096)) io.stdout:flush() return 1]],
      typescript = [[process.getBuiltinModule("fs").writeSync(1, "x".repeat(4096)); return 1;]],
    },
    native1m = {
      lua = [[io.stdout:write(string.rep("y", 1048576)) io.stdout:flush() return "end"]],
      typescript = [[process.getBuiltinModule("fs").writeSync(1, "y".repeat(1048576)); return "end";]],
    },
    bindings = {
      lua = [[
        local out = {}
        out[1] = tools.double(4)
        local ok, e = pcall(tools.fail, "x") out[2] = e.message
        ok, e = pcall(function() return tools.missing() end) out[3] = tostring(e)
        ok, e = pcall(tools.double, 0/0) out[4] = e.message
        ok, e = pcall(tools.none) out[5] = e.message
        ok, e = pcall(tools.getter) out[6] = e.message
        out[7] = e.toolName
        out[8] = getmetatable(e) == ToolCallError
        return out]],
      typescript = [[
        const out: unknown[] = [];
        out.push(await tools.double(4));
        const msg = async (p: Promise<unknown>) => { try { await p; return "resolved"; } catch (e: any) { return e; } };
        out.push((await msg(tools.fail("x"))).message);
        out.push((await msg((async () => (tools as any).missing())())).message);
        out.push((await msg(tools.double(NaN))).message);
        out.push((await msg(tools.none())).message);
        const e = await msg(tools.getter());
        out.push(e.message, e.toolName, e instanceof ToolCallError);
        return out;]],
    },
    busy = { lua = [[while true do end]], typescript = [[for (;;) {}]] },
    forever = { lua = [[while true do tools.wait() end]], typescript = [[await new Promise(() => {}); return 1;]] },
    pending = { lua = [[return tools.slow()]], typescript = [[return await tools.slow();]] },
    throw = { lua = [[error("boom")]], typescript = [[throw new Error("boom");]] },
    invalid = { lua = [[return function() end]], typescript = [[return () => 1;]] },
    big_value = { lua = [[return string.rep("v", 2000)]], typescript = [[return "v".repeat(2000);]] },
    mutate = {
      lua = [[string.format = nil table.concat = nil string.rep = nil pairs = nil
        print("post-mutation") return { doubled = tools.double(21) }]],
      typescript = [[Object.prototype.toJSON = () => "x"; Array.prototype.push = null; JSON.stringify = null;
        Map.prototype.get = null; Promise.prototype.then = Promise.prototype.then; String.prototype.slice = null;
        console.log("post-mutation"); return { doubled: await tools.double(21) };]],
    },
  }

  local function tools(extra)
    local fns = {
      double = function(x) return x * 2 end,
      fail = function() error("nope", 0) end,
      none = function() end,
      getter = function() return setmetatable({}, { __index = function() error("getter threw") end }) end,
      slow = function() async.sleep(300) return 1 end,
      wait = function() async.sleep(1500) end,
    }
    for k, v in pairs(extra or {}) do fns[k] = v end
    for k, fn in pairs(fns) do
      fns[k] = function(...)
        inflight = inflight + 1
        local res = { pcall(fn, ...) }
        inflight = inflight - 1
        if not res[1] then error(res[2], 0) end
        return unpack(res, 2, table.maxn(res))
      end
    end
    return { { global = "tools", functions = fns,
      errorClass = { name = "ToolCallError", memberNameProperty = "toolName" } } }
  end

  describe(name .. " (the code-runtime contract)", function()
    before_each(helpers.snapshot)
    after_each(helpers.assert_clean)

    for _, lang in ipairs(LANGS) do
      describe(lang, function()
        it("returns the value and the logs; descriptors say what it is", function()
          with_env({}, function(_, cr)
            local r = cr:run { language = lang, program = P.hello[lang] }
            assert.same({ logs = { "remote 你好" }, value = { answer = 42 } }, r)
            assert.equal(prefix, cr.name)
            assert.truthy(cr.isolation)
          end)
        end)

        it("forged frames on fd 1 and child output are only logs; one terminal frame, last", function()
          with_env({ luaLibraries = { "io", "os" } }, function(_, cr)
            local r = cr:run { language = lang, program = P.forged[lang] }
            assert.is_nil(r.error)
            assert.same({ true }, r.value)
            local all = table.concat(r.logs)
            assert.truthy(all:find("eyJ0eXBlIjoiZG9uZSJ9\n", 1, true))
            assert.truthy(all:find("child-native\n", 1, true))
          end)
        end)

        it("counts output exactly: a 4 KiB native write over a 64-byte cap is output-limit", function()
          with_env({ maxOutputBytes = 64, luaLibraries = { "io" } }, function(_, cr)
            local r = cr:run { language = lang, program = P.native4k[lang] }
            assert.equal("output-limit", r.error.kind)
            local cost = 2
            local ledger = require "dsh.core.ledger"
            for i, l in ipairs(r.logs) do cost = cost + ledger.string_cost(l) + (i > 1 and 1 or 0) end
            assert.is_true(cost <= 64)
            assert.equal(string.rep("x", 60), table.concat(r.logs)) -- ["x..."]: the whole budget, as a prefix
            assert.equal("", r.error.message) -- no room left for it
          end)
        end)

        it("delivers all of a 1 MiB native write as logs before the result", function()
          with_env({ luaLibraries = { "io" } }, function(_, cr)
            local r = cr:run { language = lang, program = P.native1m[lang] }
            assert.equal("end", r.value)
            assert.equal(string.rep("y", 1048576), table.concat(r.logs))
          end)
        end)

        it("serves bindings: values, failures, unknown names, non-lossless arguments and results", function()
          with_env({}, function(_, cr)
            local r = cr:run { language = lang, program = P.bindings[lang], bindings = tools() }
            assert.is_nil(r.error)
            local v = r.value
            assert.equal(8, v[1])
            assert.equal("nope", v[2])
            assert.truthy(tostring(v[3]):find("missing", 1, true))
            assert.equal("binding arguments must be lossless JSON", v[4])
            assert.equal("binding resolution must be lossless JSON", v[5])
            assert.equal("binding resolution must be lossless JSON", v[6])
            assert.equal("getter", v[7])
            assert.equal(true, v[8])
          end)
        end)

        it("gives a namespace without functions as an empty one", function()
          with_env({}, function(_, cr)
            local program = lang == "lua"
              and "local n = 0 for _ in pairs(tools) do n = n + 1 end return { type(tools), n }"
              or "return [typeof tools, Object.keys(tools).length];"
            local r = cr:run { language = lang, program = program, bindings = { { global = "tools", functions = {} } } }
            assert.same({ logs = {}, value = { lang == "lua" and "table" or "object", 0 } }, r)
          end)
        end)

        it("keeps working after the program mutates built-ins and globals", function()
          with_env({}, function(_, cr)
            local r = cr:run { language = lang, program = P.mutate[lang], bindings = tools() }
            assert.same({ logs = { "post-mutation" }, value = { doubled = 42 } }, r)
          end)
        end)

        it("reports exceptions, invalid output and over-budget values", function()
          with_env({ maxOutputBytes = 1000 }, function(_, cr)
            local r = cr:run { language = lang, program = P.throw[lang] }
            assert.equal("exception", r.error.kind)
            assert.truthy(r.error.message:find("boom", 1, true))
            r = cr:run { language = lang, program = P.invalid[lang] }
            assert.same({ kind = "invalid-output", message = "program completion must be lossless JSON" }, r.error)
            r = cr:run { language = lang, program = P.big_value[lang] }
            assert.same({ kind = "output-limit", message = "outer output exceeded 1000 bytes" }, r.error)
          end)
        end)

        it("stops a busy program at computeMs", function()
          with_env({ computeMs = 200, maxWallMs = 20000 }, function(_, cr)
            local r = cr:run { language = lang, program = P.busy[lang] }
            assert.same({ kind = "timeout", message = "compute budget exhausted (200ms busy)" }, r.error)
          end)
        end)

        it("stops a waiting program at maxWallMs", function()
          with_env({ maxWallMs = 300 }, function(_, cr)
            local r = cr:run { language = lang, program = P.forever[lang], bindings = tools() }
            assert.same({ kind = "timeout", message = "wall-clock ceiling reached (300ms)" }, r.error)
          end)
        end)

        it("aborts: before the run, live, and during a pending binding", function()
          with_env({}, function(_, cr)
            local ctl = async.controller()
            ctl:abort("already")
            local r = cr:run { language = lang, program = P.hello[lang], signal = ctl.signal }
            assert.same({ logs = {}, error = { kind = "abort", message = "already" } }, r)
            local sig, stop = aborted_after(100, "live abort")
            r = cr:run { language = lang, program = P.forever[lang], bindings = tools(), signal = sig }
            stop()
            assert.same({ kind = "abort", message = "live abort" }, r.error)
            -- the binding answers only once the run returned (or, as a ceiling, after a minute)
            local answer = async.future()
            local ceiling = loop.timer(function() answer:resolve(true) end)
            ceiling:start(60000)
            sig, stop = aborted_after(100, "stop")
            r = cr:run { language = lang, program = P.pending[lang], signal = sig,
              bindings = tools { slow = function() answer:await() return 1 end } }
            stop()
            local waited = answer:done()
            answer:resolve(true)
            ceiling:close()
            assert.same({ kind = "abort", message = "stop" }, r.error)
            assert.is_false(waited, "the abort waited for the binding")
          end)
        end)

        it("settles a run live during dispose as 'runtime disposed'; run() after dispose raises", function()
          helpers.run(function()
            local env = factory.new {}
            local cr = env.ctx.codeRuntime
            local f = async.run(function()
              return cr:run { language = lang, program = P.forever[lang], bindings = tools() }
            end)
            async.sleep(150)
            env.dispose()
            quiet()
            assert.is_true(f:done())
            assert.same({ kind = "abort", message = "runtime disposed" }, f:await().error)
            raises_here(prefix .. ": run() after disposal", function() cr:run { program = "return 1" } end)
          end)
        end)
      end)
    end

    it("sees a live run's processes, so the check that none is left can fail", function()
      with_env({}, function(env, cr)
        local look = function()
          local list = runner_processes(env)
          return #list == 2 and list[1]:find("code-runtime-supervisor.lua", 1, true) ~= nil
            and list[2]:find("code-runtime-worker.lua", 1, true) ~= nil
        end
        local r = cr:run { program = "return tools.look()", bindings = tools { look = look } }
        assert.same({ logs = {}, value = true }, r)
      end)
    end)

    it("bounds the Lua worker's memory (maxMemoryMb)", function()
      with_env({ maxMemoryMb = 32 }, function(_, cr)
        local r = cr:run { program = [[local t = {} for i = 1, 1e8 do t[i] = {i} end return #t]] }
        assert.equal("exception", r.error.kind)
        assert.truthy(r.error.message:find("not enough memory", 1, true), r.error.message)
      end)
    end)

    it("gives a Lua program no os.execute, io.popen, ffi, debug or require unless configured", function()
      with_env({}, function(_, cr)
        local r = cr:run { program = [[return { os.execute == nil, io.popen == nil, ffi == nil, debug == nil,
          require == nil, load == nil, getfenv == nil, string.dump == nil, type(print), type(json.null) }]] }
        assert.same({ true, true, true, true, true, true, true, true, "function", "table" }, r.value)
      end)
    end)

    it("kills children a Lua program started when the run settles", function()
      with_env({ luaLibraries = { "os" } }, function(env, cr)
        local r = cr:run { program = [[os.execute("sleep 31 >/dev/null 2>&1 &") return 1]] }
        assert.equal(1, r.value)
        local _, ps = env.sh("ps -eo args=")
        assert.is_nil(ps:find("sleep 31", 1, true))
      end)
    end)

    if factory.typescript then
      it("bounds a Node worker's heap (maxOldGenerationSizeMb)", function()
        with_env({ maxOldGenerationSizeMb = 32 }, function(_, cr)
          local r = cr:run { language = "javascript",
            program = "const keep = []; for (;;) keep.push(new Array(100000).fill(keep.length));" }
          assert.equal("worker-exit", r.error.kind)
          assert.truthy(r.error.message:find("^remote worker error: .*memory"), r.error.message)
        end)
      end)

      it("rejects TypeScript that is not erasable (enum) as an exception", function()
        with_env({}, function(_, cr)
          local r = cr:run { language = "typescript", program = "enum E { A } return E.A;" }
          assert.equal("exception", r.error.kind)
        end)
      end)
    end

    it("rejects bindings and config as the reference does", function()
      with_env({}, function(_, cr)
        local function rejects(b, msg, lang)
          raises_here(prefix .. ": run: " .. msg, function() cr:run { language = lang, program = "", bindings = b } end)
        end
        local f = { x = function() end }
        for _, lang in ipairs { "lua", "typescript" } do
          rejects({ { global = "not-valid!", functions = f } },
            'binding global "not-valid!" is not a usable identifier', lang)
          rejects({ { global = "a", functions = f }, { global = "a", functions = f } },
            'duplicate binding global "a"', lang)
          rejects({ { global = "a", functions = f, errorClass = { name = "a", memberNameProperty = "m" } } },
            'duplicate injected global "a"', lang)
          rejects({ { global = "a", functions = f, errorClass = { name = "E", memberNameProperty = "m" } },
            { global = "b", functions = f, errorClass = { name = "E", memberNameProperty = "m" } } },
            'duplicate injected global "E"', lang)
          rejects({ { global = "a", functions = f, errorClass = { name = "E", memberNameProperty = "" } } },
            'binding error member property "" is not usable', lang)
          rejects({ { global = "a", functions = f, errorClass = { name = "E", memberNameProperty = "message" } } },
            'binding error member property "message" is not usable', lang)
          rejects({ { global = "a", functions = f, errorClass = { name = "not valid", memberNameProperty = "m" } } },
            'binding error class "not valid" is not a usable identifier', lang)
        end
        rejects({ { global = "await", functions = f } },
          'binding global "await" is not a usable identifier', "typescript")
        rejects({ { global = "console", functions = f } }, 'duplicate binding global "console"', "typescript")
        rejects({ { global = "a", functions = f, errorClass = { name = "await", memberNameProperty = "m" } } },
          'binding error class "await" is not a usable identifier', "typescript")
        rejects({ { global = "end", functions = f } }, 'binding global "end" is not a usable identifier', "lua")
        rejects({ { global = "print", functions = f } }, 'duplicate binding global "print"', "lua")
        rejects({ { global = "__x__", functions = f } }, 'binding global "__x__" is not a usable identifier', "lua")
        raises_here(prefix .. ": run: options: expected table, got string", function() cr:run "return 1" end)
        raises_here(prefix .. ": run: program: expected string, got nil", function() cr:run {} end)
        raises_here(prefix .. ': run: language must be "lua", "typescript" or "javascript"',
          function() cr:run { program = "1", language = "py" } end)
        raises_here(prefix .. ": run: signal must be an abort signal",
          function() cr:run { program = "1", signal = {} } end)
      end)
      local p = factory.provider
      local function bad(cfg, msg)
        raises_here(prefix .. ": " .. msg, function() require("dsh.context").new():use(p, cfg) end)
      end
      bad({ computeMs = 0 }, "config.computeMs must be a positive safe integer")
      bad({ computeMs = 1.5 }, "config.computeMs must be a positive safe integer")
      bad({ maxOutputBytes = 3 }, "config.maxOutputBytes must be at least 4")
      bad({ maxWallMs = 2 ^ 31 }, "config.maxWallMs must be at most 2147483647")
      bad({ maxFrameBytes = 100, maxOutputBytes = 200 }, "config.maxFrameBytes must be at least maxOutputBytes")
      bad({ luaLibraries = { "net" } }, "config.luaLibraries: unknown library net (os, io, debug, ffi, require, load)")
      bad({ computeMS = 1 }, 'unknown config key "computeMS" (did you mean "computeMs"?)')
      bad({ luajit = "luajit" }, "config.luajit must be an absolute path")
      assert.equal(code_runtime.DEFAULTS.computeMs, 60000)
      assert.equal(67108864, code_runtime.DEFAULTS.maxFrameBytes) -- what a host can hold per run (docs/decisions.md)
    end)

    it("says when the frame bound is passed by the boot or by a reply", function()
      with_env({ maxFrameBytes = 512, maxOutputBytes = 64 }, function(_, cr)
        local r = cr:run { program = "return 1 --" .. string.rep("x", 600) }
        assert.same({ kind = "worker-exit", message = label .. " bridge failed: E2B frame exceeded its byte limit" },
          r.error)
        r = cr:run { program = "return tools.big()",
          bindings = tools { big = function() return string.rep("z", 600) end } }
        assert.same({ kind = "worker-exit", message = label .. " bridge failed: E2B frame exceeded its byte limit" },
          r.error)
      end)
    end)
  end)
end
