-- The ctx.lsp contract with servers on this machine (lsp-local): real clangd
-- and the fixture server, run through subprocess-local, in a fresh temporary
-- workspace per test.
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
  local ok, ctx = pcall(helpers.start_context, {
    { require "dsh.providers.fs_local", { root = root } }, require "dsh.providers.subprocess_local", lsp.provider,
    { require "dsh.providers.lsp_local", { servers = servers(env) } },
  })
  if not ok then
    helpers.rm_rf(root)
    error(ctx, 0)
  end
  env.ctx = ctx
  env.dispose = function()
    local dok, derr = ctx:dispose()
    helpers.rm_rf(root)
    assert(dok, tostring(derr))
  end
  return env
end

require("helpers.lsp_contract")("lsp-local", {
  new = factory_new, name = "lsp-local", where = "", module = require "dsh.providers.lsp_local",
})
