--- dsh.app.poc.check: what every step of `make poc` uses to say why it failed.
-- A step raises {poc = why}; dsh.app.poc prints why under the step's title.
local M = {}

--- Fail the step unless cond.
function M.check(cond, fmt, ...)
  if not cond then error({ poc = string.format(fmt, ...) }, 0) end
  return cond
end

--- v, or fail the step with err (what: the call that failed).
function M.ok_or(v, err, what)
  if v == nil then error({ poc = (what and what .. ": " or "") .. tostring(err) }, 0) end
  return v
end

--- Fail the step.
function M.fail(fmt, ...)
  error({ poc = string.format(fmt, ...) }, 0)
end

--- s quoted, its newlines shown as \n.
function M.show(s)
  return '"' .. tostring(s):gsub("\\", "\\\\"):gsub("\n", "\\n"):gsub('"', '\\"') .. '"'
end

--- Bash's result for command, or fail the step.
function M.bash(ctx, command)
  local r, err = ctx.bash:run { command = command }
  return M.ok_or(r, err, "bash " .. command)
end

--- ctx.e2b:exec's result for argv, or fail the step.
function M.exec(ctx, argv)
  local r, err = ctx.e2b:exec(argv)
  return M.ok_or(r, err, argv[1])
end

return M
