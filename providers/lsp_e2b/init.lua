--- Language servers in the sandbox of ctx.e2b (lsp-e2b), registered on ctx.lsp.
--
-- The language-server backend (dsh.lsp.backend) over ctx.subprocess, which
-- must be subprocess-e2b: each configured server becomes one ctx.lsp
-- provider for its extensions, run in the sandbox as a managed process group
-- whose stdin and stdout carry the protocol byte-exactly (dshd: no stdio
-- proxy, unlike the reference). Sources are read in the sandbox by a
-- resident reader (remote/lsp/source-reader.lua under the sandbox's luajit)
-- with the reference's containment. What changes in the sandbox reaches the
-- servers through envd's WatchDir stream (dshd's inotify watches, recursive,
-- one per root): every writer there (ctx.fs, Bash, terminals, Code Mode, the
-- servers) is seen. Config: servers (dsh.lsp's; the reference's keys and
-- messages, prefixed "lsp-e2b") and dsh.lsp.presets.
local backend = require "dsh.lsp.backend"

-- A recursive watch of a root through the sandbox's envd (dsh.lsp._watch).
local function watcher(scope)
  local e2b = scope.ctx.e2b
  return function(root)
    local sb, err = e2b:getSandbox()
    if not sb then return nil, err end
    return sb.envd:watch_dir(root, { recursive = true })
  end
end

return backend.provider {
  name = "lsp-e2b",
  inject = { "e2b", "lsp", "subprocess" },
  where = "remote ",
  subprocess = "subprocess-e2b",
  subprocess_module = "dsh.providers.subprocess_e2b",
  world = "the sandbox",
  watch = watcher,
}
