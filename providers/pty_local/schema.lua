--- Config of pty-local: the PTY keys of dsh.pty.config (reference §2.4, with
-- the pty-e2b defaults and messages under the pty-local prefix) plus cwd
-- (absolute; default the current directory) and ambientEnv (the environment
-- the scrub applies to; default this process's environment at each spawn).
-- An unknown key raises naming the closest known one (dsh.schema).
local config = require "dsh.pty.config"
local errors = require "dsh.errors"
local schema = require "dsh.schema"

local M = {}

--- Every key pty-local takes.
M.KEYS = { "shell", "cwd", "ambientEnv" }
for k in pairs(config.DEFAULTS) do M.KEYS[#M.KEYS + 1] = k end
table.sort(M.KEYS)

function M.validate(cfg)
  if type(cfg) == "table" then schema.keys("pty-local", cfg, M.KEYS) end
  local out = config.validate("pty-local", cfg or {}, { cwd = true, ambientEnv = true })
  if out.cwd ~= nil and (type(out.cwd) ~= "string" or out.cwd:sub(1, 1) ~= "/" or out.cwd:find("%z")) then
    errors.misuse("pty-local", "cwd must be an absolute path")
  end
  if out.ambientEnv ~= nil then
    if type(out.ambientEnv) ~= "table" then errors.misuse("pty-local", "ambientEnv must be a table of strings") end
    for k, v in pairs(out.ambientEnv) do
      if type(k) ~= "string" or type(v) ~= "string" then
        errors.misuse("pty-local", "ambientEnv must map strings to strings")
      end
    end
  end
  return out
end

return M
