--- Config of fs-local: { root = <directory relative paths resolve against> }.
-- Raises on bad config; returns the normalised config.
local errors = require "dsh.errors"
local schema = require "dsh.schema"

local M = {}

M.KEYS = { "root" }

function M.validate(cfg)
  schema.keys("fs-local", cfg, M.KEYS)
  if cfg.root ~= nil and (type(cfg.root) ~= "string" or cfg.root == "" or cfg.root:find("\0", 1, true)) then
    errors.misuse("fs-local", "root must be a non-empty path string")
  end
  return { root = cfg.root }
end

return M
