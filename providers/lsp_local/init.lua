--- Language servers on this machine (lsp-local), registered on ctx.lsp.
--
-- The language-server backend (dsh.lsp.backend) over ctx.subprocess, which
-- must be subprocess-local: the same seam, engine and containment as
-- lsp-e2b, for hosts without a sandbox, so paths are host paths. Changes on
-- disk reach the servers through a resident inotify watcher
-- (remote/lsp/watcher.lua) per root, run through ctx.subprocess, with a
-- barrier before every query. Config: servers (dsh.lsp's; the reference's
-- keys and messages, prefixed "lsp-local").
local backend = require "dsh.lsp.backend"

return backend.provider {
  name = "lsp-local",
  inject = { "lsp", "subprocess" },
  where = "",
  subprocess = "subprocess-local",
  subprocess_module = "dsh.providers.subprocess_local",
  world = "this machine's PATH",
  watch_program = true,
}
