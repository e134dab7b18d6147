-- The code-runtime contract on this machine: code-runtime-local over
-- subprocess-local, the real runners (LuaJIT supervisor, Lua and Node workers).
local context = require "dsh.context"
local node = require "dsh.code_runtime.node"
local proc = require "dsh.proc"

local function host_sh(cmd)
  local p = assert(proc.spawn { argv = { "/bin/bash", "-c", cmd }, env = { PATH = "/usr/bin:/bin" },
    stderr = "null" })
  local out = p:read_all()
  local st = p:wait()
  p:close()
  return st.exit_code, out
end

local provider = require "dsh.providers.code_runtime_local"

require("helpers.code_runtime_contract")("code-runtime-local", {
  prefix = "code-runtime-local", label = "local runtime", provider = provider,
  typescript = node.bin() ~= nil,
  new = function(cfg)
    local ctx = context.new()
    ctx:use(require "dsh.providers.subprocess_local")
    ctx:use(provider, cfg)
    assert(ctx:start())
    local dir = ctx.codeRuntime._backend.dir
    return { ctx = ctx, sh = host_sh, tag = dir, dispose = function() assert(ctx:dispose()) end }
  end,
})
