--- Config of pty-e2b (reference §2.4 "pty-e2b config"): every key, default
-- and message is dsh.pty.config's, under the pty-e2b prefix (an unknown key
-- raises naming the closest known one: dsh.schema).
local config = require "dsh.pty.config"

local M = {}

--- Every key pty-e2b takes.
M.KEYS = config.keys()

function M.validate(cfg)
  return config.validate("pty-e2b", cfg or {})
end

return M
