--- dsh.pty.env: the environment of a PTY shell (reference §2.4 Spawn step 2).
--
-- The ambient environment goes through the project's one scrub rule
-- (dsh.subprocess.scrub_rules: the backend applies it where the shell runs);
-- then the caller's explicit env; then the fixed terminal values, which win,
-- because readiness depends on them: TERM, PAGER=cat, GIT_PAGER=cat,
-- PS1='dsh> ', BASH_SILENCE_DEPRECATION_WARNING=1, DSH_SHELL=1,
-- DSH_SESSION_ID=<owner id>, DSH_PTY_SESSION_ID=<session id>, and a
-- PROMPT_COMMAND that prints the prompt marker `ESC ] 133;D;<$?> BEL`. Unlike
-- the reference, the explicit env is applied (its README promised it).
local errors = require "dsh.errors"

local M = {}

M.PS1 = "dsh> "
M.PROMPT_COMMAND = [[printf '\033]133;D;%s\007' "$?"]]

--- The explicit variables of a shell: explicit env, then the fixed values.
---@param o {owner_id: string, session_id: string, term: string, env: table|nil}
---@return table<string,string>
function M.explicit(o)
  local out = {}
  for k, v in pairs(o.env or {}) do out[k] = v end
  out.TERM = o.term
  out.PAGER = "cat"
  out.GIT_PAGER = "cat"
  out.PS1 = M.PS1
  out.BASH_SILENCE_DEPRECATION_WARNING = "1"
  out.DSH_SHELL = "1"
  out.DSH_SESSION_ID = o.owner_id
  out.DSH_PTY_SESSION_ID = o.session_id
  out.PROMPT_COMMAND = M.PROMPT_COMMAND
  return out
end

--- Check a caller's env table: name -> string; raises naming what is wrong.
function M.check(prefix, env)
  if env == nil then return nil end
  if type(env) ~= "table" then errors.misuse(prefix, "spawn: env must be a table of name = value") end
  for k, v in pairs(env) do
    if type(k) ~= "string" or k == "" or k:find("[=%z]") then
      errors.misuse(prefix, "spawn: env name %q is not a valid variable name", tostring(k))
    end
    if type(v) ~= "string" or v:find("\0", 1, true) then
      errors.misuse(prefix, "spawn: env.%s must be a string without NUL bytes", k)
    end
  end
  return env
end

return M
