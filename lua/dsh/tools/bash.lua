--- dsh.tools.bash: the model-facing `bash` tool over ctx.bash.
--
-- Input (M.parameters, a strict-mode schema: dsh.tools._input): command
-- (required), timeout (milliseconds; default ctx.bash's timeoutMs, a longer
-- one is capped at its maxTimeoutMs), description (a short label for the
-- UI, not used to run anything) and run_in_background. null is absent.
-- Output: the text dsh.bash renders — stdout, then stderr, each cut to its
-- tail with a note naming the spill file, then `[exit code N]`,
-- `[terminated by SIGNAME]`, `[timed out after N ms]` or `[aborted]`, and
-- `[still running in the background as <id>]` when the shell left processes
-- running; `(no output)` when nothing was printed. A timeout is a result, not
-- an error. With run_in_background the command starts and the text names its
-- id at once; bash_output reads what it writes, kill_shell stops it
-- (dsh.tools.bash_output, dsh.tools.kill_shell).
-- Errors (invalid input, the command could not run) are nil, err with
-- err.code INVALID_ARGUMENT, BASH_UNAVAILABLE or the failure's own code.
local bash = require "dsh.bash"
local errors = require "dsh.errors"
local input = require "dsh.tools._input"

local M = { name = "bash" }

local function parameters(svc)
  return input.schema({
    command = { type = "string", description = "The command line, run as `bash -c <command>`." },
    timeout = {
      type = "integer",
      description = string.format("Timeout in milliseconds (default %d, at most %d: a longer one is capped).",
        svc and svc.timeoutMs or bash.DEFAULT_TIMEOUT_MS, svc and svc.maxTimeoutMs or bash.DEFAULT_MAX_TIMEOUT_MS),
    },
    description = { type = "string", description = "What the command does, in 5-10 words." },
    run_in_background = {
      type = "boolean",
      description = "Start the command and return at once with its id; read its output with bash_output.",
    },
  }, { "timeout", "description", "run_in_background" })
end

--- The tool's description for a ctx.bash (its default and maximum timeout).
---@param svc dsh.Bash|nil   nil: the defaults
function M.describe(svc)
  local default = svc and svc.timeoutMs or bash.DEFAULT_TIMEOUT_MS
  local max = svc and svc.maxTimeoutMs or bash.DEFAULT_MAX_TIMEOUT_MS
  return "Run a shell command with `bash -c` in the workspace and return its output "
    .. "(stdout, then stderr; long output keeps its end and names a file with the full text) "
    .. "and its exit status. Each command starts a fresh shell: `cd` and `export` do not carry over. "
    .. "Commands run without a terminal and with stdin closed. "
    .. string.format("The default timeout is %d ms, the maximum %d ms; ", default, max)
    .. "the command's whole process group is stopped when it expires. "
    .. "With run_in_background the command runs on without a timeout: bash_output reads its new output, "
    .. "kill_shell stops it. Processes a command leaves running with `&` go on the same way."
end

--- {name=, description=, parameters=} for a ctx.bash (nil: the defaults).
function M.definition(svc)
  return { name = M.name, description = M.describe(svc), parameters = parameters(svc) }
end

M.description = M.describe(nil)
M.parameters = parameters(nil)

--- Check a decoded input object: the input without null values, or nil, err (INVALID_ARGUMENT).
function M.validate(given)
  local o, err = input.object("bash", given, M.parameters)
  if not o then return nil, err end
  if type(o.command) ~= "string" or o.command:match("^%s*$") then
    return input.invalid("bash: command must be a non-empty string")
  end
  local t = o.timeout
  if t ~= nil and (type(t) ~= "number" or t % 1 ~= 0 or t < 1) then
    return input.invalid("bash: timeout must be a positive integer number of milliseconds")
  end
  if o.description ~= nil and type(o.description) ~= "string" then
    return input.invalid("bash: description must be a string")
  end
  if o.run_in_background ~= nil and type(o.run_in_background) ~= "boolean" then
    return input.invalid("bash: run_in_background must be a boolean")
  end
  return o
end

--- Run the tool: the text the model sees, or nil, err.
---@param ctx table   a context with ctx.bash
---@param given table {command=, timeout=, description=, run_in_background=}
---@param opts {signal: dsh.AbortSignal|nil}|nil
---@return string|nil, dsh.Error|nil, table|nil  text, nil, data (the run's result, or {id=} in the background)
function M.run(ctx, given, opts)
  local o, err = M.validate(given)
  if not o then return nil, err end
  local svc = ctx.bash
  if not svc then return nil, errors.new("BASH_UNAVAILABLE", "bash: ctx.bash is not configured") end
  if o.run_in_background then
    local p, serr = svc:start { command = o.command, signal = opts and opts.signal }
    if not p then return nil, serr end
    return string.format("Started in the background as %s. bash_output with bash_id %q reads its output; "
      .. "kill_shell with shell_id %q stops it.", p.id, p.id, p.id), nil, { id = p.id, background = true }
  end
  local timeout = o.timeout and math.min(o.timeout, svc.maxTimeoutMs) or nil
  local r, rerr = svc:run { command = o.command, timeout = timeout, signal = opts and opts.signal }
  if not r then return nil, rerr end
  return svc:render(r), nil, r
end

return M
