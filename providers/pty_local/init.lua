--- pty-local: persistent terminals on this machine's PTYs, for hosts without
-- a sandbox (reference §2.4).
--
-- The PTY backend (dsh.pty.backend) over a subprocess-local service of its
-- own (config cwd and ambientEnv are that service's: the directory shells
-- start in, and the environment the scrub applies to), so a terminal here is
-- started, signalled and closed exactly as in the sandbox: spawnTerminal, the
-- seam's session ladder, the core's quiescence event for the shell's group
-- and /proc for the other groups of its session. Registers a backend type
-- (default "shell") on ctx.pty; config: schema.lua.
local backend = require "dsh.pty.backend"
local schema = require "dsh.providers.pty_local.schema"
local subprocess_local = require "dsh.providers.subprocess_local"

return backend.provider {
  name = "pty-local",
  label = "local PTY",
  inject = { "pty" },
  validate = schema.validate,
  subprocess = function(scope, cfg)
    local sub = subprocess_local.service { cwd = cfg.cwd, ambientEnv = cfg.ambientEnv }
    scope:on_dispose(function() return sub:dispose() end) -- registered first: it goes after the sessions
    return sub
  end,
}
