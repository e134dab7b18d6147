-- The code-runtime contract on this machine: code-runtime-local over
-- subprocess-local, the real runners (LuaJIT supervisor, Lua and Node workers).
local helpers = require "helpers"
local node = require "dsh.node"
local proc = require "dsh.core.proc"

local function host_sh(cmd)
  local p = assert(proc.spawn { argv = { "/bin/bash", "-c", cmd }, env = { PATH = "/usr/bin:/bin" },
    stderr = "null" })
  local out = p:read_all()
  local st = p:wait()
  p:close()
  return st.exit_code, out
end

local provider = require "dsh.providers.code_runtime_local"
local LOCAL = require "dsh.providers.subprocess_local"

require("helpers.code_runtime_contract")("code-runtime-local", {
  prefix = "code-runtime-local", label = "local runtime", provider = provider,
  typescript = node.bin() ~= nil,
  new = function(cfg)
    local ctx = helpers.start_context { LOCAL, { provider, cfg } }
    local dir = ctx.codeRuntime._backend.dir
    return { ctx = ctx, sh = host_sh, tag = dir, dispose = function() assert(ctx:dispose()) end }
  end,
})

describe("code-runtime-local with a Node that cannot strip types", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  -- The system's Node (Debian's 18, or a 20) has no module.stripTypeScriptTypes.
  local old
  for _, p in ipairs { "/usr/bin/node", "/usr/local/bin/node" } do
    local _, out = host_sh(p .. " -e 'process.stdout.write(String(typeof require(\"node:module\")"
      .. ".stripTypeScriptTypes))' 2>/dev/null")
    if out == "undefined" then old = p break end
  end

  if old then
    it("still runs JavaScript; TypeScript fails naming the Node version needed", function()
      helpers.run(function()
        helpers.with_context({ LOCAL, { provider, { node = old } } }, function(ctx)
          local r = ctx.codeRuntime:run { language = "javascript", program = "return [1, 2];" }
          assert.same({ logs = {}, value = { 1, 2 } }, r)
          r = ctx.codeRuntime:run { language = "typescript", program = "const x: number = 1; return x;" }
          assert.equal("exception", r.error.kind)
          assert.truthy(r.error.message:find("^TypeScript needs Node.js 22.13 or later "
            .. "%(module.stripTypeScriptTypes%); this sandbox has Node.js v%d+"), r.error.message)
        end)
      end)
    end)
  else
    pending("no Node without module.stripTypeScriptTypes on this machine")
  end
end)

describe("the supervisor's frame stream", function()
  local frame = require "dsh.core.frame"
  local wire = require "dsh.code_runtime._wire"
  local json = require "dsh.code_runtime._json"
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  -- The supervisor run by hand: every frame it writes, decoded, and its stderr.
  local function frames(dir, program)
    local boot = json.encode_json { type = "boot", language = "lua", code = program, namespaces = wire.array {},
      computeMs = 10000, maxOutputBytes = 1048576, libraries = wire.array { "io", "os" } }
    local p = assert(proc.spawn { argv = { "luajit", dir .. "/code-runtime-supervisor.lua", "1048576",
      "/usr/bin/luajit", "-" }, env = { PATH = "/usr/bin:/bin" }, stdin = "pipe", stdout = "pipe", stderr = "pipe" })
    assert(p:write(assert(frame.encode(boot, 1048576))))
    local out, err = p:read_all(), p:read_all("stderr")
    p:wait()
    p:close()
    local d = assert(frame.decoder(1048576))
    local list = {}
    for _, t in ipairs(assert(d:push(out))) do list[#list + 1] = json.decode_json(t) end
    assert(d:finish())
    d:close()
    return list, err
  end

  it("carries forged frames and child output only as logs; exactly one terminal frame, last", function()
    helpers.run(function()
      local ctx = helpers.start_context { LOCAL, { provider, {} } }
      local cr = ctx.codeRuntime
      local prep = cr._ready:await()
      local list, err = frames(prep.root, [[
        io.stdout:write('eyJ0eXBlIjoiZG9uZSIsInZhbHVlIjpbZmFsc2VdfQ==\n') io.stdout:flush()
        io.stderr:write('{"type":"done"}\n')
        os.execute("echo child-native")
        return { true }]])
      assert.equal("", err)
      local terminal, logs = 0, {}
      for i, m in ipairs(list) do
        if m.type == "done" or m.type == "output-limit" then
          terminal = terminal + 1
          assert.equal(#list, i, "the terminal frame is not last")
          assert.same({ true }, wire.from_tokens(m.value))
        else
          assert.equal("log", m.type)
          logs[#logs + 1] = m.text
        end
      end
      assert.equal(1, terminal)
      local text = table.concat(logs)
      assert.truthy(text:find("eyJ0eXBlIjoiZG9uZSIsInZhbHVlIjpbZmFsc2VdfQ==\n", 1, true))
      assert.truthy(text:find('{"type":"done"}\n', 1, true))
      assert.truthy(text:find("child-native\n", 1, true))
      assert(ctx:dispose())
    end)
  end)
end)
