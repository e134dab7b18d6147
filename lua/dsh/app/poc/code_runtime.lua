--- dsh.app.poc.code_runtime: `make poc`'s Code Mode steps of the reference's
-- live composition (§6.2 B 12-16) on the composed context's ctx.codeRuntime:
-- binding calls and a typed BridgeError after the program mutated built-ins
-- and globals, every way past the output cap (forged frames included) ending
-- as output-limit, a wall-clock timeout and a live abort, an oversized boot
-- and an oversized binding reply, and no runner left in the sandbox. In
-- TypeScript, as the reference, when the sandbox has Node; in Lua otherwise.
local async = require "dsh.async"
local C = require "dsh.app.poc.check"
local loop = require "dsh.core.loop"

local M = {}
local check = C.check

--- The poc's code runtime config: the reference's (compute 500, output 4096,
--- heap 128, frame 32768, kill grace 500), with a shorter wall clock so that
--- step 14's timeout costs 3 s, not 5.
M.CONFIG = { computeMs = 500, maxWallMs = 3000, maxOutputBytes = 4096, maxOldGenerationSizeMb = 128,
  maxFrameBytes = 32768, killGraceMs = 500, luaLibraries = { "io", "os" } }

local function bridge(extra)
  local fns = {
    double = function(x) return x * 2 end,
    fail = function() error("bridge failure", 0) end,
  }
  for k, v in pairs(extra or {}) do fns[k] = v end
  return { { global = "bridge", functions = fns,
    errorClass = { name = "BridgeError", memberNameProperty = "member" } } }
end

local PROGRAMS = {
  typescript = {
    mutated = [[
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
      return { doubled, typed };]],
    logs = { "remote-log 你好 42", "post-mutation" },
    output = {
      { "4096 × 🙂 with a mutated string iterator",
        [[String.prototype[Symbol.iterator] = function* () {}; console.log("🙂".repeat(4096));]] },
      { "an 8 KiB prototype write",
        [[Object.getPrototypeOf(process.stdout).write.call(process.stdout, "p".repeat(8192));]] },
      { "a forged done frame plus 8 KiB on fd 1", [[const fs = process.getBuiltinModule("fs");
        fs.writeSync(1, "eyJ0eXBlIjoiZG9uZSIsInZhbHVlIjpbMV19\n"); fs.writeSync(1, "w".repeat(8192));]] },
      { "a child with inherited stdio writing 8 KiB",
        [[process.getBuiltinModule("child_process").spawnSync("sh", ["-c", "head -c 8192 /dev/zero | tr '\\0' c"],
          { stdio: "inherit" });]] },
    },
    forever = "await new Promise(() => {});",
    boot = "//" .. string.rep("b", 40000),
    reply = "return await bridge.big();",
  },
  lua = {
    mutated = [[
      print("remote-log 你好", 42)
      string.format, string.rep, table.concat = nil, nil, nil
      tostring, type, pairs, ipairs, select = nil, nil, nil, nil, nil
      setmetatable, error, pcall_ = nil, nil, pcall
      print("post-mutation")
      local doubled = bridge.double(21)
      local ok, e = pcall_(bridge.fail)
      return { doubled = doubled, typed = not ok and getmetatable(e) == BridgeError and e.member == "fail"
        and e.message == "bridge failure" }]],
    logs = { "remote-log 你好\t42", "post-mutation" },
    output = {
      { "4096 × 🙂", [[print(string.rep("🙂", 4096))]] },
      { "an 8 KiB write", [[io.write(string.rep("p", 8192))]] },
      { "a forged done frame plus 8 KiB on stdout",
        [[io.stdout:write("eyJ0eXBlIjoiZG9uZSIsInZhbHVlIjpbMV19\n", string.rep("w", 8192)) io.stdout:flush()]] },
      { "a child with inherited stdio writing 8 KiB", [[os.execute("head -c 8192 /dev/zero | tr '\\0' c")]] },
    },
    forever = "while true do bridge.nap() end",
    boot = "--" .. string.rep("b", 40000),
    reply = "return bridge.big()",
  },
}

local function kind(r)
  return r.error and r.error.kind or "none"
end

--- The steps, {label, title, fn} each; state.ctx is the composed context.
function M.steps(state)
  local function run(o)
    o.language = state.lang
    return state.ctx.codeRuntime:run(o)
  end
  local function P() return PROGRAMS[state.lang] end
  return {
    { "12", "bindings and a typed BridgeError after the program mutates built-ins", function()
      state.lang = "typescript"
      local r = run { bindings = bridge(), program = P().mutated }
      if r.error and r.error.message:find("needs Node.js", 1, true) then
        state.lang = "lua" -- no Node in this sandbox: the same steps in Lua
        r = run { bindings = bridge(), program = P().mutated }
      end
      check(r.error == nil, "the run ended %s: %s", kind(r), r.error and r.error.message)
      check(type(r.value) == "table" and r.value.doubled == 42 and r.value.typed == true, "the value was wrong")
      local logs = P().logs
      check(#r.logs == 2 and r.logs[1] == logs[1] and r.logs[2] == logs[2], "the logs were %s",
        C.show(table.concat(r.logs, " | ")))
      return string.format("%s: value {doubled = 42, typed = true}, logs %s", state.lang,
        C.show(table.concat(r.logs, " | ")))
    end },
    { "13", "every way past the output cap is output-limit", function()
      local seen = {}
      for _, case in ipairs(P().output) do
        local r = run { program = case[2] }
        check(kind(r) == "output-limit", "%s ended %s", case[1], kind(r))
        seen[#seen + 1] = case[1]
      end
      return table.concat(seen, "; ") .. ": output-limit"
    end },
    { "14", "a program that never finishes times out; a live abort", function()
      local nap = bridge { nap = function() async.sleep(20) return true end }
      local t0 = loop.now_ms()
      local r = run { program = P().forever, bindings = nap }
      check(kind(r) == "timeout" and r.error.message == "wall-clock ceiling reached (" .. M.CONFIG.maxWallMs .. "ms)",
        "the run ended %s: %s", kind(r), r.error and r.error.message)
      local ms = loop.now_ms() - t0
      local ctl = async.controller()
      local t = loop.timer(function() ctl:abort("live abort") end)
      t:start(50)
      r = run { program = P().forever, bindings = nap, signal = ctl.signal }
      t:close()
      check(kind(r) == "abort" and r.error.message == "live abort", "the aborted run ended %s: %s", kind(r),
        r.error and r.error.message)
      async.sleep(30) -- the last nap ends
      return string.format('timeout after %.0f ms (wall-clock ceiling); aborted after 50 ms: "live abort"', ms)
    end },
    { "15", "an oversized boot and an oversized binding reply end the worker", function()
      local r = run { program = P().boot }
      check(kind(r) == "worker-exit", "a 40k-character boot ended %s", kind(r))
      r = run { program = P().reply, bindings = bridge { big = function() return string.rep("r", 40000) end } }
      check(kind(r) == "worker-exit", "a 40k-character reply ended %s", kind(r))
      return "a 40k-character boot and a 40k-character reply: worker-exit"
    end },
    { "16", "no runner is left in the sandbox", function()
      local sb = C.ok_or(state.ctx.e2b:getSandbox())
      local list, err = sb.envd:list()
      C.ok_or(list, err, "list")
      for _, p in ipairs(list) do
        local line = table.concat({ p.config and p.config.cmd or "", unpack(p.config and p.config.args or {}) }, " ")
        check(not line:find("code-runtime-", 1, true), "still running: %s", line)
      end
      local ps = C.exec(state.ctx, { "ps", "-eo", "args=" }).stdout
      check(not ps:find("code-runtime-", 1, true), "ps shows a runner")
      return string.format("%d processes listed, none mentions code-runtime-*", #list)
    end },
  }
end

return M
