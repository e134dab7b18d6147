-- The ctx.lsp contract with servers on this machine (lsp-local): real clangd
-- and the fixture server, run through subprocess-local, in a fresh temporary
-- workspace per test.
local context = require "dsh.context"
local helpers = require "helpers"
local lsp = require "dsh.lsp"

local function q(s)
  return "'" .. s:gsub("'", [['\'']]) .. "'"
end

local function factory_new(servers)
  local root = helpers.tmpdir()
  local p = io.popen("realpath " .. q(root))
  root = p:read("*l")
  p:close()
  local env = {
    root = root,
    fixture = { command = "luajit", args = { helpers.root .. "/spec/fixtures/lsp-fixture-server.lua" } },
  }
  env.sh = function(cmd)
    local h = io.popen("bash -c " .. q("cd " .. q(root) .. " && (" .. cmd .. ") 2>&1; echo \"__rc=$?\""))
    local out = h:read("*a")
    h:close()
    return tonumber(out:match("__rc=(%d+)\n?$")), (out:gsub("__rc=%d+\n?$", ""))
  end
  env.put = function(rel, data) helpers.write_file(root .. "/" .. rel, data) end
  local ctx = context.new()
  ctx:use(require "dsh.providers.fs_local", { root = root })
  ctx:use(require "dsh.providers.subprocess_local")
  ctx:use(lsp.provider)
  ctx:use(require "dsh.providers.lsp_local", { servers = servers(env) })
  local ok, err = ctx:start()
  if not ok then
    ctx:dispose()
    helpers.rm_rf(root)
    error("cannot start the context: " .. tostring(err), 0)
  end
  env.ctx = ctx
  env.dispose = function()
    ctx:dispose()
    helpers.rm_rf(root)
  end
  return env
end

require("helpers.lsp_contract")("lsp-local", {
  new = factory_new, name = "lsp-local", where = "", module = require "dsh.providers.lsp_local",
})
