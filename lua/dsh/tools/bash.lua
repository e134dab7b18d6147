--- dsh.tools.bash: the model-facing `bash` tool over ctx.bash.
--
-- Input (JSON schema in M.parameters): command (required), timeout (optional,
-- milliseconds, at most 600000; default the provider's timeoutMs) and
-- description (optional, a short label for the UI; not used to run anything).
-- Output: the text dsh.bash.render() produces — stdout, then stderr, each
-- tail-truncated with a note naming the spill file, then `[exit code N]`,
-- `[terminated by SIGNAME]` or `[timed out after N ms]`; `(no output)` when
-- the command printed nothing. A timeout is a normal result, not an error.
-- Errors (invalid input, the command could not run, aborted) are nil, err
-- with err.code INVALID_ARGUMENT, the subprocess error's code, or ABORTED.
local bash = require "dsh.bash"
local errors = require "dsh.errors"

local M = {
  name = "bash",
  description = "Run a shell command with `bash -c` in the workspace and return its output "
    .. "(stdout, then stderr; long output keeps its end and names a file with the full text) "
    .. "and its exit status. Commands run without a terminal and with stdin closed. "
    .. "The default timeout is 120000 ms; the command's whole process group is stopped when it expires.",
  parameters = {
    type = "object",
    properties = {
      command = { type = "string", description = "The command line, run as `bash -c <command>`." },
      timeout = {
        type = "integer", minimum = 1, maximum = bash.MAX_TIMEOUT_MS,
        description = "Timeout in milliseconds (at most 600000).",
      },
      description = { type = "string", description = "What the command does, in 5-10 words." },
    },
    required = { "command" },
    additionalProperties = false,
  },
}

local function invalid(msg)
  return nil, errors.new("INVALID_ARGUMENT", msg)
end

--- Check a decoded input object: the input, or nil, err (INVALID_ARGUMENT).
function M.validate(input)
  if type(input) ~= "table" then return invalid("bash: input must be an object") end
  for k in pairs(input) do
    if not M.parameters.properties[k] then return invalid("bash: unknown parameter " .. tostring(k)) end
  end
  if type(input.command) ~= "string" or input.command:match("^%s*$") then
    return invalid("bash: command must be a non-empty string")
  end
  local t = input.timeout
  if t ~= nil and (type(t) ~= "number" or t % 1 ~= 0 or t < 1 or t > bash.MAX_TIMEOUT_MS) then
    return invalid(string.format("bash: timeout must be an integer number of milliseconds in [1, %d]",
      bash.MAX_TIMEOUT_MS))
  end
  if input.description ~= nil and type(input.description) ~= "string" then
    return invalid("bash: description must be a string")
  end
  return input
end

--- Run the tool: the rendered text, or nil, err.
---@param ctx table   a context with ctx.bash
---@param input table {command=, timeout=, description=}
---@param opts {signal: dsh.AbortSignal|nil}|nil
---@return string|nil, dsh.Error|nil
function M.run(ctx, input, opts)
  local ok, err = M.validate(input)
  if not ok then return nil, err end
  local svc = ctx.bash
  if not svc then return nil, errors.new("BASH_UNAVAILABLE", "bash: ctx.bash is not configured") end
  local r, rerr = svc:run { command = input.command, timeout = input.timeout, signal = opts and opts.signal }
  if not r then return nil, rerr end
  return svc:render(r)
end

return M
