--- Language servers in the sandbox of ctx.e2b (lsp-e2b), registered on ctx.lsp.
--
-- Each configured server becomes one ctx.lsp provider for its extensions.
-- Servers run in the sandbox through ctx.subprocess (subprocess-e2b) as
-- managed process groups: the protocol's bytes are the process's own stdin
-- and stdout, carried byte-exactly by dshd (no stdio proxy, unlike the
-- reference). Sources are read in the sandbox by a resident reader
-- (remote/lsp/source-reader.lua under the sandbox's luajit) with the
-- reference's containment: canonical workspace, the file resolved inside
-- it, opened without following a final symlink, regular files only, a size
-- limit, "grew while reading", valid UTF-8. One pooled server per canonical
-- workspace, one queue per workspace, one retry on a fresh server after a
-- transport failure. Config: see dsh.lsp._config (the reference's keys and
-- messages, prefixed "lsp-e2b").
local apply = require "dsh.lsp._apply"
local config = require "dsh.lsp._config"
local schema = require "dsh.schema"

local M = {
  name = "lsp-e2b",
  inject = { "e2b", "lsp", "subprocess" },
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
    prefix = M.name, where = "remote ", subprocess_name = "subprocess-e2b",
    subprocess_module = "dsh.providers.subprocess_e2b",
    before_read = function(p) if M._before_read then M._before_read(p) end end,
  })
end

return M
