--- Config of subprocess-local: { cwd=, ambientEnv=, spillDir= }.
-- Raises on bad config; returns the normalised config.
local errors = require "dsh.errors"
local schema = require "dsh.schema"
local M = {}

M.KEYS = { "cwd", "ambientEnv", "spillDir" }

local function fail(msg)
  errors.misuse("subprocess-local", "%s", msg)
end

function M.validate(cfg)
  schema.keys("subprocess-local", cfg, M.KEYS)
  for _, k in ipairs { "cwd", "spillDir" } do
    local v = cfg[k]
    if v ~= nil and (type(v) ~= "string" or v:sub(1, 1) ~= "/" or v:find("%z")) then
      fail(k .. " must be an absolute path")
    end
  end
  if cfg.ambientEnv ~= nil then
    if type(cfg.ambientEnv) ~= "table" then fail("ambientEnv must be a table of strings") end
    for k, v in pairs(cfg.ambientEnv) do
      if type(k) ~= "string" or type(v) ~= "string" then fail("ambientEnv must map strings to strings") end
    end
  end
  return { cwd = cfg.cwd, ambientEnv = cfg.ambientEnv, spillDir = cfg.spillDir }
end

return M
