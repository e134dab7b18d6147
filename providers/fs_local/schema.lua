--- Config of fs-local: { root = <directory relative paths resolve against> }.
-- Raises on bad config; returns the normalised config.
local errors = require "dsh.errors"

local M = {}

function M.validate(cfg)
  if type(cfg) ~= "table" then errors.misuse("fs-local", "config must be a table") end
  for k in pairs(cfg) do
    if k ~= "root" then errors.misuse("fs-local", "unknown config key %s", tostring(k)) end
  end
  if cfg.root ~= nil and (type(cfg.root) ~= "string" or cfg.root == "" or cfg.root:find("\0", 1, true)) then
    errors.misuse("fs-local", "root must be a non-empty path string")
  end
  return { root = cfg.root }
end

return M
