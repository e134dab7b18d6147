--- Config of pty-local: the PTY keys of dsh.pty.config (reference §2.4, with
-- the pty-e2b defaults and messages under the pty-local prefix) plus cwd
-- (absolute; default the current directory) and ambientEnv (the environment
-- the scrub applies to; default this process's environment at each spawn):
-- those two are its subprocess-local service's. An unknown key raises naming
-- the closest known one (dsh.schema).
local config = require "dsh.pty.config"
local schema = require "dsh.schema"

local M = {}

local EXTRA = { cwd = true, ambientEnv = true }

--- Every key pty-local takes.
M.KEYS = config.keys(EXTRA)

function M.validate(cfg)
  local out = config.validate("pty-local", cfg or {}, EXTRA)
  schema.path("pty-local", out, "cwd")
  if out.ambientEnv ~= nil then schema.string_map("pty-local", out, "ambientEnv") end
  return out
end

return M
