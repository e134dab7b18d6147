--- dsh.tools.kill_shell: the model-facing companion of `bash` that stops a
-- background command (ctx.bash:kill): its whole process group gets TERM,
-- then KILL after the grace, and the answer comes once it is gone.
--
-- Input: shell_id (the id `bash` named). Output: "stopped <id> [terminated
-- by SIGNAME]" (or its exit status when it ended on TERM by exiting), or
-- "<id> had already ended [...]". An unknown id is nil, err (BASH_UNKNOWN_PROCESS).
local bash_output = require "dsh.tools.bash_output"
local errors = require "dsh.errors"
local input = require "dsh.tools._input"

local M = {
  name = "kill_shell",
  description = "Stop a command running in the background (started by bash with run_in_background, or left "
    .. "running by a command's `&`), with every process it started.",
}

M.parameters = input.schema({
  shell_id = { type = "string", description = "The id bash gave the background command (bash-N)." },
}, {})

---@param ctx table   a context with ctx.bash
---@param given table {shell_id=}
---@return string|nil, dsh.Error|nil
function M.run(ctx, given)
  local o, err = input.object(M.name, given, M.parameters)
  if not o then return nil, err end
  if type(o.shell_id) ~= "string" or o.shell_id == "" then
    return input.invalid("kill_shell: shell_id must be a non-empty string")
  end
  local svc = ctx.bash
  if not svc then return nil, errors.new("BASH_UNAVAILABLE", "kill_shell: ctx.bash is not configured") end
  local killed, kerr = svc:kill(o.shell_id)
  if killed == nil then return nil, kerr end
  local status = bash_output.status(svc:status(o.shell_id))
  if killed then return "stopped " .. o.shell_id .. " " .. status end
  return o.shell_id .. " had already ended " .. status
end

return M
