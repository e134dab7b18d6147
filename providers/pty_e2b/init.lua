--- pty-e2b: persistent terminals in the sandbox of ctx.e2b (reference §2.4).
--
-- The PTY backend (dsh.pty.backend) over ctx.subprocess, which is
-- subprocess-e2b here: each session is a shell started with spawnTerminal,
-- so it lives in the same sandbox as fs and Bash. Registers a backend type
-- (default "shell") on ctx.pty; config: dsh.pty.config's keys (schema.lua).
--
-- On dshd the subprocess backend uses its native process groups: the
-- foreground job is signalled and the terminal's session killed and waited
-- for by dshd itself (extension terminal-sessions), output and exit arrive as
-- events, and a dropped connection resumes by byte offset (a gap past the
-- replay window is reported in the scrollback). On a stock envd the
-- subprocess backend falls back to ps/pkill run in the sandbox.
--
-- Sessions live no longer than ctx.e2b: this provider injects it, so it is
-- disposed first, and disposal closes every session of its type.
local backend = require "dsh.pty.backend"
local schema = require "dsh.providers.pty_e2b.schema"

return backend.provider {
  name = "pty-e2b",
  label = "E2B PTY",
  inject = { "e2b", "subprocess", "pty" },
  validate = schema.validate,
  subprocess = function(scope) return scope.ctx.subprocess end,
}
