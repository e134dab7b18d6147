--- Config of pty-e2b (reference §2.4 "pty-e2b config"): every key, default
-- and message is dsh.pty.config's, under the pty-e2b prefix.
local config = require "dsh.pty.config"

local M = {}

function M.validate(cfg)
  return config.validate("pty-e2b", cfg or {})
end

return M
