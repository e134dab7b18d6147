--- Config of subprocess-e2b: { protocol=, reconnectMs= }.
--   protocol     "auto" (default): dshd's extensions when /health advertises
--                them all, else the stock-envd wrapper; "dshd" or "envd" force one.
--   reconnectMs  how long a dropped process stream (or an unreachable daemon)
--                is retried before the caller gets SUBPROCESS_LOST (default 3000).
-- Raises on bad config; returns the normalised config.
local errors = require "dsh.errors"
local schema = require "dsh.schema"
local M = {}

M.KEYS = { "protocol", "reconnectMs" }

local function fail(msg)
  errors.misuse("subprocess-e2b", "%s", msg)
end

function M.validate(cfg)
  schema.keys("subprocess-e2b", cfg, M.KEYS)
  local protocol = cfg.protocol or "auto"
  if protocol ~= "auto" and protocol ~= "dshd" and protocol ~= "envd" then
    fail('protocol must be "auto", "dshd" or "envd"')
  end
  local r = cfg.reconnectMs == nil and 3000 or cfg.reconnectMs
  if type(r) ~= "number" or r ~= r or r < 0 or r > 600000 or r % 1 ~= 0 then
    fail("reconnectMs must be a whole number of milliseconds in [0, 600000]")
  end
  return { protocol = protocol, reconnectMs = r }
end

return M
