--- ctx.bash: `bash -c` commands through ctx.subprocess (dsh.bash).
--
-- Runs wherever ctx.subprocess runs — on this machine with subprocess-local,
-- in the sandbox with subprocess-e2b — in that service's working directory
-- unless cwd is configured. Config (schema.lua): timeoutMs (default 120000,
-- at most 600000), maxOutputBytes (default 30000), maxSpillBytes, graceMs, cwd.
-- Its processes belong to ctx.subprocess, which disposes after it and joins them.
local bash = require "dsh.bash"
local schema = require "dsh.providers.bash.schema"

local M = {
  name = "bash",
  provides = "bash",
  inject = { "subprocess" },
  validate = schema.validate,
}

function M.setup(scope, cfg)
  return bash.new {
    subprocess = scope.ctx.subprocess, cwd = cfg.cwd, timeoutMs = cfg.timeoutMs,
    maxOutputBytes = cfg.maxOutputBytes, maxSpillBytes = cfg.maxSpillBytes, graceMs = cfg.graceMs,
  }
end

return M
