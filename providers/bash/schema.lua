--- Config of the bash provider (the reference's bash-local keys and defaults):
--   cwd             where commands run (default: ctx.subprocess's cwd)
--   timeoutMs       a foreground command's timeout (default 120000)
--   maxTimeoutMs    the cap of a per-call timeout (default 600000); a larger one is capped
--   maxOutputBytes  bytes kept of each stream (default 64000); the model sees at most this
--   maxSpillBytes   a stream's spill file, its full output (default 64 MiB)
--   graceMs         TERM -> KILL grace of a stopped command's group (default 3000)
-- Raises on bad config (an unknown key too); returns the normalised config.
local bash = require "dsh.bash"
local errors = require "dsh.errors"
local schema = require "dsh.schema"

local M = {}
local NAME = "bash"

M.KEYS = { "cwd", "timeoutMs", "maxTimeoutMs", "maxOutputBytes", "maxSpillBytes", "graceMs" }

function M.validate(cfg)
  schema.keys(NAME, cfg, M.KEYS)
  local out = {
    cwd = schema.path(NAME, cfg, "cwd"),
    maxTimeoutMs = schema.integer(NAME, cfg, "maxTimeoutMs", bash.DEFAULT_MAX_TIMEOUT_MS, 1, bash.LIMIT_MS),
    maxOutputBytes = schema.integer(NAME, cfg, "maxOutputBytes", bash.DEFAULT_MAX_OUTPUT_BYTES, 64, 2 ^ 31 - 1),
    maxSpillBytes = schema.integer(NAME, cfg, "maxSpillBytes", bash.DEFAULT_MAX_SPILL_BYTES, 1, 2 ^ 53 - 1),
    graceMs = schema.integer(NAME, cfg, "graceMs", bash.DEFAULT_GRACE_MS, 1, bash.LIMIT_MS),
  }
  out.timeoutMs = schema.integer(NAME, cfg, "timeoutMs", math.min(bash.DEFAULT_TIMEOUT_MS, out.maxTimeoutMs), 1,
    bash.LIMIT_MS)
  if out.timeoutMs > out.maxTimeoutMs then
    errors.misuse(NAME, "timeoutMs (%d) must not exceed maxTimeoutMs (%d)", out.timeoutMs, out.maxTimeoutMs)
  end
  return out
end

return M
