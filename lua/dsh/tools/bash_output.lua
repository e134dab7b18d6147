--- dsh.tools.bash_output: the model-facing companion of `bash` that reads
-- what a background command wrote since the last read (ctx.bash:readOutput).
--
-- Input: bash_id (the id `bash` named). Output: the new output (stdout, then
-- stderr under "[stderr]"; "(no new output)" when there is none), then one
-- status line: "[still running]", "[exit code N]", "[terminated by SIGNAME]"
-- or "[failed to start]". An unknown id is nil, err (BASH_UNKNOWN_PROCESS).
local errors = require "dsh.errors"
local input = require "dsh.tools._input"

local M = {
  name = "bash_output",
  description = "Read the new output of a command running in the background (started by bash with "
    .. "run_in_background, or left running by a command's `&`): what it wrote since the last read, "
    .. "and whether it still runs.",
}

M.parameters = input.schema({
  bash_id = { type = "string", description = "The id bash gave the background command (bash-N)." },
}, {})

--- The status line of a read.
function M.status(r)
  if r.running then return "[still running]" end
  if r.signal then return "[terminated by " .. r.signal .. "]" end
  if r.exitCode then return "[exit code " .. r.exitCode .. "]" end
  return "[failed to start]"
end

--- The tool's text for a read {text=, running=, exitCode=, signal=}.
function M.render(r)
  local text = r.text == "" and "(no new output)\n" or r.text
  if text:sub(-1) ~= "\n" then text = text .. "\n" end
  return text .. M.status(r)
end

---@param ctx table   a context with ctx.bash
---@param given table {bash_id=}
---@return string|nil, dsh.Error|nil
function M.run(ctx, given)
  local o, err = input.object(M.name, given, M.parameters)
  if not o then return nil, err end
  if type(o.bash_id) ~= "string" or o.bash_id == "" then
    return input.invalid("bash_output: bash_id must be a non-empty string")
  end
  local svc = ctx.bash
  if not svc then return nil, errors.new("BASH_UNAVAILABLE", "bash_output: ctx.bash is not configured") end
  local r, rerr = svc:readOutput(o.bash_id)
  if not r then return nil, rerr end
  return M.render(r), nil, r
end

return M
