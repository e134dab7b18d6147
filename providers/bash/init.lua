--- ctx.bash: `bash -c` commands through ctx.subprocess (dsh.bash).
--
-- Runs wherever ctx.subprocess runs — on this machine with subprocess-local,
-- in the sandbox with subprocess-e2b — in that service's working directory
-- unless cwd is configured. Config (schema.lua): cwd, timeoutMs (default
-- 120000), maxTimeoutMs (600000), maxOutputBytes (64000), maxSpillBytes,
-- graceMs (3000). Its processes belong to ctx.subprocess, which disposes after
-- it; this provider stops and joins its background processes (and any
-- command still running) when it disposes.
local bash = require "dsh.bash"
local schema = require "dsh.providers.bash.schema"

local M = {
  name = "bash",
  provides = "bash",
  inject = { "subprocess" },
  validate = schema.validate,
}

function M.setup(scope, cfg)
  local b = bash.new {
    subprocess = scope.ctx.subprocess, cwd = cfg.cwd, timeoutMs = cfg.timeoutMs, maxTimeoutMs = cfg.maxTimeoutMs,
    maxOutputBytes = cfg.maxOutputBytes, maxSpillBytes = cfg.maxSpillBytes, graceMs = cfg.graceMs,
  }
  scope:on_dispose(function() return b:dispose() end)
  return b
end

return M
