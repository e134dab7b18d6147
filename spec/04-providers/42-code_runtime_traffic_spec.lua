-- Binding traffic of Code Mode in a real local sandbox (code-runtime-e2b over
-- subprocess-e2b and fs-e2b on dshd in bubblewrap), as a model-written
-- program produces it: replies larger than a pipe, payloads near the frame
-- bound, logs of many megabytes, processes that leave the run's session,
-- binding errors that cannot be rendered.
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

  it("a 20 MB reply crosses: the host writes it in pieces the daemon's input queue takes", function()
    with_ctx({}, function(ctx)
      local big = string.rep("z", 20000000)
      local B = { { global = "tools", functions = { big = function() return big end } } }
      local r = ctx.codeRuntime:run { program = "local s = tools.big() return { #s, s:sub(-3) }", bindings = B }
      assert.same({ logs = {}, value = { 20000000, "zzz" } }, r)
    end)
  end)
end)
