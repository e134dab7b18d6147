--- Config of fs-local: { root = <directory relative paths resolve against> }.
-- Raises on bad config; returns the normalised config.
local M = {}

function M.validate(cfg)
  if type(cfg) ~= "table" then error("fs-local: config must be a table", 0) end
  for k in pairs(cfg) do
    if k ~= "root" then error("fs-local: unknown config key " .. tostring(k), 0) end
  end
  if cfg.root ~= nil and (type(cfg.root) ~= "string" or cfg.root == "" or cfg.root:find("\0", 1, true)) then
    error("fs-local: root must be a non-empty path string", 0)
  end
  return { root = cfg.root }
end

return M
