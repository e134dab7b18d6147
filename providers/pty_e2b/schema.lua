--- Config of pty-e2b (reference §2.4 "pty-e2b config"): every key, default
-- and message is dsh.pty.config's, under the pty-e2b prefix.
-- An unknown key raises naming the closest known one (dsh.schema).
local config = require "dsh.pty.config"
local schema = require "dsh.schema"

local M = {}

--- Every key pty-e2b takes.
M.KEYS = { "shell" }
for k in pairs(config.DEFAULTS) do M.KEYS[#M.KEYS + 1] = k end
table.sort(M.KEYS)

function M.validate(cfg)
  if type(cfg) == "table" then schema.keys("pty-e2b", cfg, M.KEYS) end
  return config.validate("pty-e2b", cfg or {})
end

return M
