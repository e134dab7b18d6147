--- Config of the bash provider: { timeoutMs=, maxOutputBytes=, maxSpillBytes=, graceMs=, cwd= }.
-- Raises on bad config; returns the normalised config.
local errors = require "dsh.errors"
local bash = require "dsh.bash"
local schema = require "dsh.schema"

local M = {}

local function fail(msg)
  errors.misuse("bash", "%s", msg)
end

M.KEYS = { "timeoutMs", "maxOutputBytes", "maxSpillBytes", "graceMs", "cwd" }

local function int(cfg, key, default, lo, hi)
  local v = cfg[key]
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v or v % 1 ~= 0 or v < lo or v > hi then
    fail(string.format("%s must be an integer in [%d, %d]", key, lo, hi))
  end
  return v
end

function M.validate(cfg)
  schema.keys("bash", cfg, M.KEYS)
  if cfg.cwd ~= nil and (type(cfg.cwd) ~= "string" or cfg.cwd:sub(1, 1) ~= "/") then
    fail("cwd must be an absolute path")
  end
  return {
    timeoutMs = int(cfg, "timeoutMs", bash.DEFAULT_TIMEOUT_MS, 1, bash.MAX_TIMEOUT_MS),
    maxOutputBytes = int(cfg, "maxOutputBytes", bash.DEFAULT_MAX_OUTPUT_BYTES, 64, 2 ^ 31 - 1),
    maxSpillBytes = int(cfg, "maxSpillBytes", bash.DEFAULT_MAX_SPILL_BYTES, 1, 2 ^ 53 - 1),
    graceMs = int(cfg, "graceMs", bash.DEFAULT_GRACE_MS, 1, 2147483647),
    cwd = cfg.cwd,
  }
end

return M
