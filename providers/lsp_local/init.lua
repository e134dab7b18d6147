--- Language servers on this machine (lsp-local), registered on ctx.lsp.
--
-- The same seam, engine and containment as lsp-e2b, for hosts without a
-- sandbox: servers and the source reader run on the host through
-- ctx.subprocess (subprocess-local), so paths are host paths. Changes on
-- disk reach the servers through a resident inotify watcher
-- (remote/lsp/watcher.lua) per root, with a barrier before every query. Config: see
-- dsh.lsp._config (the reference's keys and messages, prefixed "lsp-local").
local apply = require "dsh.lsp._apply"
local config = require "dsh.lsp._config"
local schema = require "dsh.schema"

local M = {
  name = "lsp-local",
  inject = { "lsp", "subprocess" },
}

--- Specs only: called with the canonical path right before the reader opens a source.
M._before_read = nil

-- An unknown key raises naming the closest known one (dsh.schema).
function M.validate(cfg)
  if type(cfg) == "table" then schema.keys(M.name, cfg, { "servers" }) end
  return config.validate(M.name, cfg)
end

function M.setup(scope, cfg)
  return apply.apply(scope, cfg, {
    prefix = M.name, where = "", subprocess_name = "subprocess-local", world = "this machine's PATH",
    watch_program = true,
    subprocess_module = "dsh.providers.subprocess_local",
    before_read = function(p) if M._before_read then M._before_read(p) end end,
  })
end

return M
