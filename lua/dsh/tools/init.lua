--- dsh.tools: every model-facing tool, in one registry.
--
--   local tools = require "dsh.tools"
--   local list = tools.for_context(ctx)            -- the tools ctx's services support
--   local defs = tools.openai(list)                -- or tools.anthropic(list): the request's `tools`
--   local r = tools.call(ctx, "read", '{"path":"main.c","offset":null,"limit":null}', { signal = s })
--   r.text, r.isError, r.data                      -- for the model; for the host
--
-- The tools and the service each needs: bash, bash_output, kill_shell
-- (ctx.bash); read, write, edit, list (ctx.fs: dsh.tools.files), watch (ctx.fs:
-- dsh.tools.watch); terminal_open,
-- terminal_send, terminal_read, terminal_screen, terminal_signal,
-- terminal_close, terminal_list (ctx.pty); lsp (ctx.lsp); run_code
-- (ctx.codeRuntime). Every schema is valid for OpenAI's strict mode and for
-- Anthropic's tool use (every property required, optional ones nullable,
-- additionalProperties false; null means absent).
--
-- call() decodes the arguments (a JSON string, or a table the host decoded),
-- checks them against the schema, runs the tool and returns
-- {text=, isError=, data=, error=}: text is what the model reads, data the
-- tool's structured result (the Bash run, the file's version, the LSP
-- answer, ...), error the dsh.Error of a failure. Every expected failure (bad
-- arguments, an unknown tool, a missing service, FS_* codes, timeouts, aborts)
-- is text the model can act on, "Error: ..." with a hint; misuse by the host
-- (ctx not a context, name not a string, bad opts) raises.
local check = require "dsh.tools._check"
local context = require "dsh.context"
local errors = require "dsh.errors"
local schema = require "dsh.schema"

local bash = require "dsh.tools.bash"
local bash_output = require "dsh.tools.bash_output"
local files = require "dsh.tools.files"
local kill_shell = require "dsh.tools.kill_shell"
local lsp = require "dsh.tools.lsp"
local run_code = require "dsh.tools.run_code"
local terminal = require "dsh.tools.terminal"
local watch = require "dsh.tools.watch"

local M = {}
local MOD = "dsh.tools"

-- Per-context state: the versions the file tools saw, the default agent of
-- the terminal tools (sessions belong to an owner table), the run_code tool.
local states = setmetatable({}, { __mode = "k" })

local function state_of(ctx)
  local st = states[ctx]
  if not st then
    st = { versions = {}, agent = { id = "model" } }
    states[ctx] = st
  end
  return st
end

-- The catalogue, in the order a prompt lists them: name -> {service, build}.
-- build(ctx, opts) returns {name, description, parameters, run(ctx, args, o)}.
local CATALOGUE, ORDER = {}, {}

local function add(name, service, build)
  CATALOGUE[name] = { service = service, build = build }
  ORDER[#ORDER + 1] = name
end

local function static(mod)
  return function()
    return { name = mod.name, description = mod.description, parameters = mod.parameters,
      run = function(ctx, args, o) return mod.run(ctx, args, o) end }
  end
end

add("bash", "bash", function(ctx)
  local d = bash.definition(ctx and ctx.bash)
  d.run = function(c, args, o) return bash.run(c, args, o) end
  return d
end)
add("bash_output", "bash", static(bash_output))
add("kill_shell", "bash", static(kill_shell))
for _, name in ipairs(files.order) do add(name, "fs", static(files[name])) end
add("watch", "fs", static(watch))
for _, name in ipairs(terminal.order) do
  local t = terminal.tools[name]
  add(name, "pty", function()
    return { name = t.name, description = t.description, parameters = t.parameters,
      run = function(c, args, o) return t.run(c, args, o) end, render_error = terminal.render_error }
  end)
end
add("lsp", "lsp", function(ctx)
  return { name = lsp.name, description = lsp.describe(ctx and ctx.lsp), parameters = lsp.parameters,
    render_error = lsp.render_error,
    run = function(c, args, o)
      local root = o.workspaceRoot or (c.fs and c.fs.cwd)
      return lsp.run(c, args, { signal = o.signal, workspaceRoot = root, timeoutMs = o.timeoutMs })
    end }
end)
add("run_code", "codeRuntime", function(ctx, opts)
  local rc = opts and opts.runCode or {}
  local tool = run_code.new { language = rc.language or (ctx and ctx.codeRuntime and ctx.codeRuntime.language),
    bindings = rc.bindings }
  return { name = tool.name, description = tool.description, parameters = tool.parameters,
    run = function(c, args, o) return tool:run(c, args, o) end }
end)

--- Every tool name, in prompt order.
M.names = ORDER

--- The service key of ctx each tool needs (name -> "bash", "fs", "pty", "lsp", "codeRuntime").
M.needs = {}
for name, entry in pairs(CATALOGUE) do M.needs[name] = entry.service end

local function check_ctx(method, ctx)
  if type(ctx) ~= "table" then errors.misuse(MOD, "%s: ctx must be a dsh.context, got %s", method, type(ctx)) end
  local mt = getmetatable(ctx)
  if mt ~= nil and mt ~= context.Context then
    errors.misuse(MOD, "%s: ctx must be a dsh.context (or a table of services), got %s", method, tostring(ctx))
  end
end

-- Whether ctx has the service: ctx:get on a context (ctx.<key> raises for a
-- service not set up yet), the field of a table of services.
local function has(ctx, key)
  if getmetatable(ctx) == context.Context then return ctx:get(key) ~= nil end
  return ctx[key] ~= nil
end

local function check_opts(method, opts)
  if opts ~= nil and type(opts) ~= "table" then
    errors.misuse(MOD, "%s: opts must be a table, got %s", method, type(opts))
  end
  return opts or {}
end

---@class dsh.tools.Options
---@field runCode {language: string|nil, bindings: dsh.code_runtime.Binding[]|nil}|nil  run_code's bindings
---@field only string[]|nil  keep only these tools (names)

---@class dsh.tools.Tool
---@field name string
---@field description string
---@field parameters table   JSON schema (strict-mode subset)
---@field service string     the ctx key it needs

--- The tools ctx supports (those whose service it has), in prompt order.
---@param ctx table   a dsh.context (started) or a table of services
---@param opts dsh.tools.Options|nil
---@return dsh.tools.Tool[]
function M.for_context(ctx, opts)
  check_ctx("for_context", ctx)
  opts = check_opts("for_context", opts)
  local only
  if opts.only ~= nil then
    if type(opts.only) ~= "table" then errors.misuse(MOD, "for_context: opts.only must be a list of names") end
    only = {}
    for _, n in ipairs(opts.only) do
      if not CATALOGUE[n] then errors.misuse(MOD, "for_context: opts.only: no tool %s", tostring(n)) end
      only[n] = true
    end
  end
  local out = {}
  for _, name in ipairs(ORDER) do
    local entry = CATALOGUE[name]
    if has(ctx, entry.service) and (not only or only[name]) then
      local t = entry.build(ctx, opts)
      t.service = entry.service
      out[#out + 1] = t
    end
  end
  return out
end

--- Every tool's definition, whatever the context has (for documentation).
---@return dsh.tools.Tool[]
function M.all()
  local out = {}
  for _, name in ipairs(ORDER) do
    local t = CATALOGUE[name].build(nil, nil)
    t.service = CATALOGUE[name].service
    out[#out + 1] = t
  end
  return out
end

local function check_list(method, list)
  if type(list) ~= "table" then errors.misuse(MOD, "%s: list must be a list of tools, got %s", method, type(list)) end
  for i, t in ipairs(list) do
    if type(t) ~= "table" or type(t.name) ~= "string" or type(t.parameters) ~= "table" then
      errors.misuse(MOD, "%s: list[%d] is not a tool", method, i)
    end
  end
end

local copy = schema.copy

--- The definitions for OpenAI's Chat Completions `tools` (strict mode):
--- {type="function", function={name, description, parameters, strict=true}}.
---@param list dsh.tools.Tool[]
---@return table[]
function M.openai(list)
  check_list("openai", list)
  local out = {}
  for i, t in ipairs(list) do
    out[i] = { type = "function", ["function"] = { name = t.name, description = t.description,
      parameters = copy(t.parameters), strict = true } }
  end
  return out
end

--- The definitions for Anthropic's Messages `tools`: {name, description, input_schema}.
---@param list dsh.tools.Tool[]
---@return table[]
function M.anthropic(list)
  check_list("anthropic", list)
  local out = {}
  for i, t in ipairs(list) do
    out[i] = { name = t.name, description = t.description, input_schema = copy(t.parameters) }
  end
  return out
end

-- Rendering failures ------------------------------------------------------------

--- What a model can do about a failure, by code.
M.HINTS = {
  FS_NOT_FOUND = "Check the path; list shows what a directory holds.",
  FS_NOT_TEXT = "It is not a text file; inspect it with bash (file, head -c, xxd) instead.",
  FS_NOT_REGULAR_FILE = "It is not a regular file; use list for a directory.",
  FS_NOT_DIRECTORY = "It is not a directory; use read for a file.",
  FS_STALE_VERSION = "Read it again before you change it (write creates a file that does not exist).",
  FS_EDIT_NOT_FOUND = "Copy old_string exactly from the file (whitespace and indentation included, without "
    .. "read's line numbers); read the file again if it changed.",
  FS_AMBIGUOUS_EDIT = "Add surrounding lines to old_string so that it matches once, or set replace_all to true.",
  FS_PERMISSION_DENIED = "That path cannot be changed; work inside the workspace.",
  BASH_UNKNOWN_PROCESS = "Use the id bash gave when it started the command.",
  TIMEOUT = "It ran out of time; try a smaller request.",
}

local function render_failure(tool, err)
  if tool and tool.render_error then return tool.render_error(err) end
  local msg = tostring(err.message)
  local hint = M.HINTS[err.code]
  return "Error: " .. msg .. (hint and (". " .. hint) or "")
end

local function failure(err, text, name)
  return { text = text, isError = true, error = err, data = { code = err.code, message = err.message }, tool = name }
end

local function invalid(tool, msg)
  local err = errors.new("INVALID_ARGUMENT", tool.name .. ": " .. msg)
  return failure(err, "Error: " .. err.message .. ". " .. check.usage(tool.parameters), tool.name)
end

---@class dsh.tools.CallOptions
---@field signal dsh.AbortSignal|nil   aborts the tool's work
---@field tools dsh.tools.Tool[]|nil   the list given to the model (default: for_context(ctx))
---@field agent {id: string}|nil       the terminal tools' owner (default: one per context)
---@field workspaceRoot string|nil     lsp's workspace (default: ctx.fs's working directory)
---@field timeoutMs integer|nil        lsp's timeout (default 60000)

---@class dsh.tools.Result
---@field text string          what the model reads
---@field isError boolean      true for a failure (text starts "Error: ")
---@field data table|nil       the tool's structured result, or {code=, message=} of a failure
---@field error dsh.Error|nil  the failure
---@field tool string          the tool's name

--- Decode, check and run one tool call.
---@param ctx table                the context (its services run the tool)
---@param name string              the tool the model called
---@param args string|table|nil    its arguments: the JSON text, or the decoded object
---@param opts dsh.tools.CallOptions|nil
---@return dsh.tools.Result
function M.call(ctx, name, args, opts)
  check_ctx("call", ctx)
  if type(name) ~= "string" then errors.misuse(MOD, "call: name must be a string, got %s", type(name)) end
  if args ~= nil and type(args) ~= "string" and type(args) ~= "table" then
    errors.misuse(MOD, "call: args must be a JSON string or a table, got %s", type(args))
  end
  opts = check_opts("call", opts)
  local list = opts.tools or M.for_context(ctx)
  local tool
  local names = {}
  for _, t in ipairs(list) do
    names[#names + 1] = t.name
    if t.name == name then tool = t end
  end
  if not tool then
    local available = #names > 0 and table.concat(names, ", ") or "none"
    local entry = CATALOGUE[name]
    if entry and not has(ctx, entry.service) then
      local err = errors.new("TOOL_UNAVAILABLE", string.format("%s is not available here (it needs ctx.%s)",
        name, entry.service))
      return failure(err, "Error: " .. err.message .. ". Available tools: " .. available .. ".",
        name)
    end
    local near = schema.closest(name, names)
    local err = errors.new("TOOL_UNKNOWN", string.format('there is no tool "%s"%s', name,
      near and string.format(' (did you mean "%s"?)', near) or ""))
    return failure(err, "Error: " .. err.message .. ". Available tools: " .. available .. ".", name)
  end
  local decoded = args
  if type(args) == "string" then
    local v, derr = check.decode(args:match("^%s*$") and "{}" or args)
    if v == nil then return invalid(tool, "the arguments are not valid JSON: " .. derr) end
    decoded = v
  end
  local clean, cerr = check.args(tool.parameters, decoded)
  if not clean then return invalid(tool, cerr) end
  if opts.signal and opts.signal.aborted then
    local err = errors.new("ABORTED", name .. ": aborted before it started", { reason = opts.signal.reason })
    return failure(err, render_failure(tool, err), name)
  end
  local st = state_of(ctx)
  local text, err, data = tool.run(ctx, clean, {
    signal = opts.signal, agent = opts.agent or st.agent, state = st,
    workspaceRoot = opts.workspaceRoot, timeoutMs = opts.timeoutMs,
  })
  if text == nil then
    if err and err.code == "INVALID_ARGUMENT" then
      return failure(err, "Error: " .. tostring(err.message) .. ". " .. check.usage(tool.parameters), name)
    end
    return failure(err, render_failure(tool, err), name)
  end
  return { text = text, isError = false, data = data, tool = name }
end

return M
