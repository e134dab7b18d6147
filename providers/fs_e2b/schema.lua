--- Config of fs-e2b: none (reference §2.2). Any key is a mistake, named with
-- the message every provider uses (dsh.schema).
local schema = require "dsh.schema"

local M = {}

M.KEYS = {}

function M.validate(cfg)
  schema.keys("fs-e2b", cfg, M.KEYS)
  return {}
end

return M
