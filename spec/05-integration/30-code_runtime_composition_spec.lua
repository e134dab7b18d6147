-- Composition steps 12–16 of the reference (§6.2) on one real local sandbox:
-- ctx.e2b, fs, subprocess, bash and code runtime composed as make poc does,
-- with the reference's code config (compute 500, wall 5000, output 4096,
-- heap 128, frame 32768, kill grace 500). Each step in TypeScript (as the
-- reference) and, where it applies, in Lua.
local async = require "dsh.async"
local helpers = require "helpers"
local loop = require "dsh.core.loop"
local node = require "dsh.node"

local CODE = { computeMs = 500, maxWallMs = 5000, maxOutputBytes = 4096, maxOldGenerationSizeMb = 128,
  maxFrameBytes = 32768, killGraceMs = 500, luaLibraries = { "io", "os" } }

local ctx

local function bridge(extra)
  local fns = {
    double = function(x) return x * 2 end,
    fail = function() error("bridge failure", 0) end,
  }
  for k, v in pairs(extra or {}) do fns[k] = v end
  return { { global = "bridge", functions = fns,
    errorClass = { name = "BridgeError", memberNameProperty = "member" } } }
end

local function run(o)
  return helpers.run(function() return ctx.codeRuntime:run(o) end)
end

describe("composition: code runtime (steps 12-16)", function()
  setup(function()
    helpers.isolate_state()
    helpers.snapshot() -- one context for every step: checked clean once it is disposed
    helpers.run(function()
      ctx = helpers.start_context {
        { require "dsh.providers.e2b", { timeoutMs = 180000, onTimeout = "kill", onDispose = "kill" } },
        require "dsh.providers.fs_e2b", require "dsh.providers.subprocess_e2b",
        { require "dsh.providers.bash", { timeoutMs = 30000 } },
        { require "dsh.providers.code_runtime_e2b", CODE },
      }
    end)
  end)
  teardown(function()
    helpers.run(function()
      local id = ctx.e2b:sandboxId()
      assert(ctx:dispose())
      assert.is_false(require("dsh.sandbox").exists(id))
    end)
    helpers.restore_state()
    helpers.assert_clean()
  end)

  if node.dir() then
    it("12. TypeScript: bindings and BridgeError after the program mutates built-ins and globals", function()
      local r = run { language = "typescript", bindings = bridge(), program = [[
        console.log("remote-log 你好", 42);
        Object.prototype.polluted = true;
        Array.prototype.push = function () { throw new Error("push"); };
        Array.isArray = () => false;
        Object.keys = () => []; Reflect.ownKeys = () => []; Object.getPrototypeOf = () => null;
        Object.getOwnPropertyDescriptor = () => undefined; Object.defineProperty = () => { throw 1; };
        JSON.stringify = () => "{}"; JSON.parse = () => null;
        Map.prototype.get = () => undefined; Map.prototype.set = () => { throw 1; };
        Set.prototype.has = () => true; Set.prototype.add = () => { throw 1; };
        String.prototype.slice = () => ""; Number.isFinite = () => false; Number.isSafeInteger = () => false;
        Object.is = () => false; Reflect.apply = () => { throw 1; }; globalThis.queueMicrotask = null;
        console.log("post-mutation");
        const doubled = await bridge.double(21);
        let typed = false;
        try { await bridge.fail(); } catch (e: any) {
          typed = e instanceof BridgeError && e.member === "fail" && e.name === "BridgeError"
            && e.message === "bridge failure";
        }
        return { doubled, typed };]] }
      assert.same({ logs = { "remote-log 你好 42", "post-mutation" }, value = { doubled = 42, typed = true } }, r)
    end)

    it("13. TypeScript: every way past the output cap is output-limit", function()
      for _, program in ipairs {
        [[String.prototype[Symbol.iterator] = function* () {}; console.log("🙂".repeat(4096));]],
        [[Object.getPrototypeOf(process.stdout).write.call(process.stdout, "p".repeat(8192));]],
        [[const fs = process.getBuiltinModule("fs");
          fs.writeSync(1, "eyJ0eXBlIjoiZG9uZSIsInZhbHVlIjpbMV19\n"); fs.writeSync(1, "w".repeat(8192));]],
        [[process.getBuiltinModule("child_process").spawnSync("sh", ["-c", "head -c 8192 /dev/zero | tr '\\0' c"],
          { stdio: "inherit" });]],
      } do
        local r = run { language = "typescript", program = program }
        assert.equal("output-limit", r.error and r.error.kind, program)
      end
    end)

    it("14. TypeScript: a promise that never settles times out; a live abort", function()
      local r = run { language = "typescript", program = "await new Promise(() => {});" }
      assert.same({ kind = "timeout", message = "wall-clock ceiling reached (5000ms)" }, r.error)
      local ctl = async.controller()
      local t = loop.timer(function() ctl:abort("live abort") end)
      t:start(50)
      r = run { language = "typescript", program = "await new Promise(() => {});", signal = ctl.signal }
      t:close()
      assert.same({ kind = "abort", message = "live abort" }, r.error)
    end)

    it("15. TypeScript: a 40k-character boot and a 40k-character reply are worker-exit", function()
      local r = run { language = "typescript", program = "//" .. string.rep("b", 40000) }
      assert.equal("worker-exit", r.error.kind)
      r = run { language = "typescript", program = "return await bridge.big();",
        bindings = bridge { big = function() return string.rep("r", 40000) end } }
      assert.equal("worker-exit", r.error.kind)
    end)
  end

  it("12. Lua: bindings and BridgeError after the program replaces globals", function()
    local r = run { bindings = bridge(), program = [[
      print("remote-log 你好", 42)
      local ok_meta = pcall(function() getmetatable("").__index.format = nil end)
      string.format, string.rep, table.concat = nil, nil, nil
      tostring, type, pairs, ipairs, select = nil, nil, nil, nil, nil
      setmetatable, error, pcall_ = nil, nil, pcall
      print("post-mutation")
      local doubled = bridge.double(21)
      local ok, e = pcall_(bridge.fail)
      local typed = not ok and getmetatable(e) == BridgeError and e.member == "fail" and e.message == "bridge failure"
      return { doubled = doubled, typed = typed and not ok_meta }]] }
    assert.same({ logs = { "remote-log 你好\t42", "post-mutation" }, value = { doubled = 42, typed = true } }, r)
  end)

  it("13. Lua: every way past the output cap is output-limit", function()
    for _, program in ipairs {
      [[print(string.rep("🙂", 4096))]],
      [[io.write(string.rep("p", 8192))]],
      [[io.stdout:write("eyJ0eXBlIjoiZG9uZSIsInZhbHVlIjpbMV19\n", string.rep("w", 8192)) io.stdout:flush()]],
      [[os.execute("head -c 8192 /dev/zero | tr '\\0' c")]],
    } do
      local r = run { program = program }
      assert.equal("output-limit", r.error and r.error.kind, program)
    end
  end)

  it("14. Lua: a program waiting forever times out; a live abort", function()
    local nap = bridge { nap = function() async.sleep(20) return true end }
    local r = run { program = "while true do bridge.nap() end", bindings = nap }
    assert.same({ kind = "timeout", message = "wall-clock ceiling reached (5000ms)" }, r.error)
    local ctl = async.controller()
    local t = loop.timer(function() ctl:abort("live abort") end)
    t:start(50)
    r = run { program = "while true do bridge.nap() end", bindings = nap, signal = ctl.signal }
    t:close()
    assert.same({ kind = "abort", message = "live abort" }, r.error)
    helpers.run(function() async.sleep(50) end) -- the last nap ends
  end)

  it("15. Lua: a 40k-character boot and a 40k-character reply are worker-exit", function()
    local r = run { program = "--" .. string.rep("b", 40000) }
    assert.equal("worker-exit", r.error.kind)
    r = run { program = "return bridge.big()",
      bindings = bridge { big = function() return string.rep("r", 40000) end } }
    assert.equal("worker-exit", r.error.kind)
  end)

  it("16. no process in the sandbox mentions the runner", function()
    helpers.run(function()
      local sb = assert(ctx.e2b:getSandbox())
      local list = assert(sb.envd:list())
      for _, p in ipairs(list) do
        local line = table.concat({ p.config and p.config.cmd or "", unpack(p.config and p.config.args or {}) }, " ")
        assert.is_nil(line:find("code-runtime-", 1, true), line)
      end
      local r = assert(ctx.e2b:exec { "/bin/bash", "-c", "ps -eo args=" })
      assert.is_nil(r.stdout:find("code-runtime-", 1, true), r.stdout)
    end)
  end)
end)
