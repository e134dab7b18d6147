-- Binding traffic of Code Mode in a real local sandbox (code-runtime-e2b over
-- subprocess-e2b and fs-e2b on dshd in bubblewrap), as a model-written
-- program produces it: replies larger than a pipe, payloads near the frame
-- bound, logs of many megabytes, processes that leave the run's session,
-- binding errors that cannot be rendered.
local async = require "dsh.async"
local D = require "helpers.dshd"
local helpers = require "helpers"
local node = require "dsh.node"

local CR = require "dsh.providers.code_runtime_e2b"
local E2B, SUB, FS = require "dsh.providers.e2b", require "dsh.providers.subprocess_e2b",
  require "dsh.providers.fs_e2b"

D.isolated_state()

local LANGS = { "lua" }
if node.dir() then LANGS[#LANGS + 1] = "typescript" end

local function with_ctx(cfg, fn)
  helpers.run(function()
    helpers.with_context({ { E2B, {} }, SUB, FS, { CR, cfg or {} } }, fn)
  end)
end

-- tools.readFile over ctx.fs, as the README's agent does.
local function fs_tools(ctx)
  return { { global = "tools", functions = {
    readFile = function(path) return assert(ctx.fs:readText(path)).text end,
  } } }
end

describe("code-runtime-e2b binding traffic", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  for _, lang in ipairs(LANGS) do
    it(lang .. ": a binding reply larger than a pipe reaches the program whole (100 KB and 5 MB files)", function()
      with_ctx({}, function(ctx)
        local small = string.rep("0123456789", 10000) .. "é"
        local big = string.rep("abcdefghij", 500000)
        assert(ctx.fs:writeText("big.txt", small))
        assert(ctx.fs:writeText("bigger.txt", big))
        local program = lang == "lua"
          and [[local a, b = tools.readFile("big.txt"), tools.readFile("bigger.txt")
                return { #a, a:sub(-2), #b, b:sub(1, 10) }]]
          or [[const a = await tools.readFile("big.txt"), b = await tools.readFile("bigger.txt");
               return [Buffer.byteLength(a), a.slice(-1), b.length, b.slice(0, 10)];]]
        local r = ctx.codeRuntime:run { language = lang, program = program, bindings = fs_tools(ctx) }
        assert.same({ logs = {}, value = { 100002, "é", 5000000, "abcdefghij" } }, r)
      end)
    end)
  end

  for _, lang in ipairs(LANGS) do
    it(lang .. ": many small values cross both ways (200,000 numbers and 50,000 keys)", function()
      with_ctx({}, function(ctx)
        local B = { { global = "tools", functions = {
          sum = function(list) local n = 0 for _, x in ipairs(list) do n = n + x end return n end,
          keys = function(n) local t = {} for i = 1, n do t["k" .. i] = i end return t end,
        } } }
        local program = lang == "lua"
          and [[local l = {} for i = 1, 200000 do l[i] = (i - 1) % 7 end
                local t, n = tools.keys(50000), 0 for _ in pairs(t) do n = n + 1 end
                return { tools.sum(l), n, t.k50000 }]]
          or [[const l = Array.from({ length: 200000 }, (_, i) => i % 7);
               const t = await tools.keys(50000);
               return [await tools.sum(l), Object.keys(t).length, t.k50000];]]
        local r = ctx.codeRuntime:run { language = lang, program = program, bindings = B }
        assert.same({ logs = {}, value = { 599994, 50000, 50000 } }, r)
      end)
    end)
  end

  it("a 20 MB log arrives whole, its pieces joined in order at code points", function()
    with_ctx({}, function(ctx)
      local r = ctx.codeRuntime:run {
        program = [[print(string.rep("ab", 5000000) .. string.rep("é", 5000000)) return 1]] }
      assert.is_nil(r.error)
      assert.equal(1, #r.logs)
      assert.equal(20000000, #r.logs[1])
      assert.equal(string.rep("ab", 5000000) .. string.rep("é", 5000000), r.logs[1])
    end)
  end)

  if node.dir() then
    it("holds at most maxFrameBytes of calls in flight: the runner waits until replies went out", function()
      local MIB = 1048576
      with_ctx({ maxFrameBytes = 2 * MIB, maxOutputBytes = MIB }, function(ctx)
        local now, most, served = 0, 0, 0
        local B = { { global = "tools", functions = { hold = function(s)
          now, served = now + 1, served + 1
          if now > most then most = now end
          async.sleep(300) -- keeps the call open while more could arrive
          now = now - 1
          return #s
        end } } }
        local r = ctx.codeRuntime:run { language = "javascript", bindings = B, program = [[
          const s = "x".repeat(1000000);
          return await Promise.all(Array.from({ length: 8 }, () => tools.hold(s)));]] }
        assert.same({ logs = {}, value = { 1e6, 1e6, 1e6, 1e6, 1e6, 1e6, 1e6, 1e6 } }, r)
        assert.equal(8, served)
        -- 1 MB each (and 1 KiB a call): the third passes 2 MiB, so no fourth frame is read until replies went out
        assert.is_true(most <= 3, "calls in flight at once: " .. most)
      end)
    end)
  end

  if node.dir() then
    it("large calls and replies held back at once never deadlock: the runner reads replies while it waits", function()
      local MIB = 1048576
      with_ctx({ maxFrameBytes = 16 * MIB, maxOutputBytes = MIB, maxWallMs = 120000 }, function(ctx)
        local B = { { global = "tools", functions = { echo = function(s) return s end } } }
        local r = ctx.codeRuntime:run { language = "javascript", bindings = B, program = [[
          const s = "y".repeat(8 * 1048576);
          const got = await Promise.all(Array.from({ length: 6 }, () => tools.echo(s)));
          return got.map((g) => g.length);]] }
        local n = 8 * MIB
        assert.same({ logs = {}, value = { n, n, n, n, n, n } }, r)
      end)
    end)
  end

  for _, lang in ipairs(LANGS) do
    it(lang .. ": a call over maxFrameBytes ends the run with a typed error, the host never sees it", function()
      with_ctx({ maxFrameBytes = 1048576, maxOutputBytes = 65536 }, function(ctx)
        local called = false
        local B = { { global = "tools", functions = { echo = function(s) called = true return #s end } } }
        local program = lang == "lua" and [[return tools.echo(string.rep("x", 4000000))]]
          or [[return await tools.echo("x".repeat(4000000));]]
        local r = ctx.codeRuntime:run { language = lang, program = program, bindings = B }
        assert.same({ kind = "worker-exit", message = "remote worker sent a message over maxFrameBytes" }, r.error)
        assert.is_false(called)
      end)
    end)

    it(lang .. ": a run the host stops ends every process it started, also those that left its session", function()
      local function sleepers(ctx)
        local r = assert(ctx.e2b:exec { "/bin/bash", "-c", "ps -eo args=" })
        local n = 0
        for line in r.stdout:gmatch("[^\n]+") do
          if line:match("^/bin/sleep 424[23]$") then n = n + 1 end
        end
        return n
      end
      with_ctx({ maxWallMs = 3000, luaLibraries = { "os" } }, function(ctx)
        local seen
        local B = { { global = "tools", functions = {
          started = function()
            seen = helpers.eventually(function() return sleepers(ctx) == 2 end, 10000)
            return true
          end,
        } } }
        local program = lang == "lua"
          and [[os.execute("/usr/bin/setsid /bin/sh -c '/bin/sleep 4242 & /bin/sleep 4243 & wait' "
                  .. "</dev/null >/dev/null 2>&1 &")
                tools.started() while true do end]]
          or [[process.getBuiltinModule("child_process").spawn("/usr/bin/setsid",
                   ["/bin/sh", "-c", "/bin/sleep 4242 & /bin/sleep 4243 & wait"],
                 { detached: true, stdio: "ignore" }).unref();
               await tools.started(); await new Promise(() => {});]]
        local r = ctx.codeRuntime:run { language = lang, program = program, bindings = B }
        assert.is_true(seen, "the program's processes never ran")
        assert.same({ kind = "timeout", message = "wall-clock ceiling reached (3000ms)" }, r.error)
        assert.equal(0, sleepers(ctx))
      end)
    end)
  end

  it("answers a call whose error cannot be rendered at once, and shows the model no host file or line", function()
    with_ctx({ maxWallMs = 30000 }, function(ctx)
      local unshowable = setmetatable({}, { __tostring = function() error("no text for you") end })
      local B = { { global = "tools", functions = {
        raise = function() error(unshowable) end,
        fail = function() return nil, unshowable end,
        where = function() error("FS_NOT_FOUND: no such file") end,
        deeper = function() local function check() error("bad path", 2) end check() end,
        again = function() local ok, e = pcall(error, "once more") if not ok then error(e) end end,
        plain = function() error("see notes.lua:3: for why", 0) end,
      } } }
      local r = ctx.codeRuntime:run { bindings = B, program = [[
        local out = {}
        for _, f in ipairs { "raise", "fail", "where", "deeper", "again", "plain" } do
          local ok, e = pcall(tools[f]) out[#out + 1] = e
        end
        return out]] }
      assert.same({ logs = {}, value = { "binding failed with an error that cannot be shown",
        "binding failed with an error that cannot be shown", "FS_NOT_FOUND: no such file", "bad path", "once more",
        "see notes.lua:3: for why" } }, r)
    end)
  end)

  it("a 20 MB reply crosses: the host writes it in pieces the daemon's input queue takes", function()
    with_ctx({}, function(ctx)
      local big = string.rep("z", 20000000)
      local B = { { global = "tools", functions = { big = function() return big end } } }
      local r = ctx.codeRuntime:run { program = "local s = tools.big() return { #s, s:sub(-3) }", bindings = B }
      assert.same({ logs = {}, value = { 20000000, "zzz" } }, r)
    end)
  end)
end)
