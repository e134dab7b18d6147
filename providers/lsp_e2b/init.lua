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
-- limit, "grew while reading", valid UTF-8. One pooled server per root, one
-- queue per root, one retry on a fresh server after a transport failure.
-- What changes in the sandbox reaches the servers through envd's WatchDir
-- stream (dshd's inotify watches, recursive, one per root): every writer
-- there (ctx.fs, Bash, terminals, Code Mode, the servers) is seen. Config:
-- see dsh.lsp._config (the reference's keys and messages, prefixed
-- "lsp-e2b") and dsh.lsp.presets.
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

-- A recursive watch of root through the sandbox's envd (dsh.lsp._watch).
local function watcher(ctx)
  return function(root)
    local sb, err = ctx.e2b:getSandbox()
    if not sb then return nil, err end
    return sb.envd:watch_dir(root, { recursive = true })
  end
end

function M.setup(scope, cfg)
  return apply.apply(scope, cfg, {
    prefix = M.name, where = "remote ", subprocess_name = "subprocess-e2b", world = "the sandbox",
    watch = watcher(scope.ctx),
    subprocess_module = "dsh.providers.subprocess_e2b",
    before_read = function(p) if M._before_read then M._before_read(p) end end,
  })
end

return M
