#!/usr/bin/env luajit
--- examples/agent.lua: an agent host, end to end, on the embedded sandbox.
--
--   make && luajit examples/agent.lua            -- the scripted model (no network)
--   OPENAI_API_KEY=... luajit examples/agent.lua --model openai "make hello.c print its name"
--   ANTHROPIC_API_KEY=... luajit examples/agent.lua --model anthropic "..."
--   (OPENAI_BASE_URL, ANTHROPIC_BASE_URL and AGENT_MODEL override the endpoint and model)
--
-- Four parts, each a function: compose_world() builds one sandbox with every
-- capability (files, Bash, terminals, language servers, Code Mode);
-- scripted_model() is a model that replays a fixed transcript of tool calls;
-- openai_model() and anthropic_model() are how a real host plugs in its
-- model client (dsh.core.http, libcurl in the core); agent_loop() hands the
-- model's tool calls to dsh.tools and the results back to the model.
-- Each call and its result is printed.

-- Paths: run from a clone (finds ../lua next to this file), as bin/dsh does.
local function add_tree_to_path()
  local self = arg and arg[0] or "examples/agent.lua"
  local root = (self:match("^(.*)/examples/[^/]+$")) or ((self:match("^(.*)/[^/]+$") or ".") .. "/..")
  package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
end
add_tree_to_path()

local async = require "dsh.async"
local context = require "dsh.context"
local http = require "dsh.core.http"
local json = require "dsh.json"
local tools = require "dsh.tools"

-- The world --------------------------------------------------------------------

--- One local sandbox with files, Bash, terminals, language servers (clangd
--- when the sandbox has it) and Code Mode, all seeing one workspace. Returns
--- the started context, or nil, err.
local function compose_world()
  -- The embedded sandbox sees this machine's /usr, so clangd is there when it is here.
  local has_clangd = os.execute("command -v clangd >/dev/null 2>&1") == 0
  local ctx = context.new()
  ctx:use(require "dsh.providers.overlay", {
    backend = "local",
    e2b = { timeoutMs = 600000, onTimeout = "kill", onDispose = "kill" },
    bash = { timeoutMs = 30000 },
    pty = { idleSilenceMs = 1000, timeoutMs = 10000, disposeGraceMs = 1000 },
    lsp = has_clangd and { servers = {
      clangd = { command = "clangd", args = { "--log=error" }, extensionToLanguage = { [".c"] = "c", [".h"] = "c" } },
    } } or false,
  })
  local ok, err = ctx:start()
  if not ok then
    ctx:dispose()
    return nil, err
  end
  return ctx
end

-- The scripted model -------------------------------------------------------------

-- What a model would send: arguments as JSON text (strict mode sends null
-- for an option it does not use). Three calls go wrong on purpose, to show
-- the text a model gets back to correct itself.
local HELLO = '#include <stdio.h>\n\nstatic const char *name(void) { return "world"; }\n\n'
  .. 'int main(void) {\n  printf("hello, %s\\n", name());\n  return 0;\n}\n'

local SCRIPT = {
  { "list", { path = json.null } },
  { "write", { path = "hello.c", content = HELLO } },
  { "read", { path = "hello.c", offset = json.null, limit = json.null } },
  { "edit", { path = "hello.c", old_string = 'return "World";', new_string = 'return "sandbox";',
    replace_all = json.null } },                                   -- wrong case: not found
  { "edit", { path = "hello.c", old_string = 'return "world";', new_string = 'return "sandbox";',
    replace_all = json.null } },
  { "bash", { command = "cc -Wall -o hello hello.c && ./hello", timeout = json.null,
    description = "Compile and run hello.c", run_in_background = json.null } },
  { "bash", '{"comand": "ls"}' },                                  -- a misspelt parameter
  { "bash", { command = "echo '// built' >> hello.c", timeout = json.null, description = "Mark hello.c",
    run_in_background = json.null } },
  { "write", { path = "hello.c", content = "int main(void) { return 1; }\n" } }, -- changed since read: refused
  { "bash", { command = "echo serving; exec sleep 60", timeout = json.null,
    description = "A server in the background", run_in_background = true } },
  { "terminal_open", { type = "shell", name = "main", cwd = json.null } },
  { "terminal_send", { session_id = "pty-1", text = "cd /tmp && pwd", submit = json.null, wait = json.null } },
  { "terminal_close", { session_id = "pty-1" } },
  { "lsp", { operation = "hover", file_path = "hello.c", line = 6, character = 29, query = json.null } },
  { "run_code", { code = "local t = {}\nfor i = 1, 5 do t[i] = i * i end\nreturn t",
    description = "Squares of 1 to 5" } },
  { "bash_output", { bash_id = "bash-1" } },
  { "kill_shell", { shell_id = "bash-1" } },
}

--- A model that replays SCRIPT: one tool call per turn, then a final answer.
--- Same signature as the real clients below.
local function scripted_model()
  local turn = 0
  return function(_, tool_defs)
    turn = turn + 1
    local step = SCRIPT[turn]
    if not step then return { text = "Done: hello.c prints hello, sandbox." } end
    local name, args = step[1], step[2]
    -- a real model only calls what it was offered
    local offered = false
    for _, d in ipairs(tool_defs) do offered = offered or d.name == name end
    if not offered then return { skip = name } end
    return { calls = { { id = "call_" .. turn, name = name,
      arguments = type(args) == "string" and args or json.encode(args) } } }
  end
end

-- A real model ---------------------------------------------------------------------

-- How a host plugs in its model client: one function that takes the
-- conversation and the tool definitions and returns {text=} or {calls=}.
-- These two speak the OpenAI Chat Completions and Anthropic Messages APIs
-- over dsh.core.http. They only run with --model and an API key.

local function post_json(url, headers, body)
  local client = http.client()
  headers["content-type"] = "application/json"
  local res, err = client:fetch { method = "POST", url = url, headers = headers, body = json.encode(body),
    timeout_ms = 300000 }
  client:close()
  if not res then return nil, err end
  local v = json.decode(res.body)
  if res.status ~= 200 or not v then return nil, "HTTP " .. tostring(res.status) .. ": " .. res.body end
  return v
end

local function openai_model(key, model)
  return function(messages, tool_defs)
    local wire = { { role = "system", content = "You are a coding agent working in a sandbox." } }
    for _, m in ipairs(messages) do
      if m.role == "tool" then
        wire[#wire + 1] = { role = "tool", tool_call_id = m.id, content = m.text }
      elseif m.calls then
        local calls = {}
        for i, c in ipairs(m.calls) do
          calls[i] = { id = c.id, type = "function", ["function"] = { name = c.name, arguments = c.arguments } }
        end
        wire[#wire + 1] = { role = "assistant", tool_calls = calls }
      else
        wire[#wire + 1] = { role = m.role, content = m.text }
      end
    end
    local base = os.getenv("OPENAI_BASE_URL") or "https://api.openai.com/v1"
    local v, err = post_json(base .. "/chat/completions", { authorization = "Bearer " .. key },
      { model = model or "gpt-4.1", messages = wire, tools = tools.openai(tool_defs) })
    if not v then return nil, err end
    local msg = v.choices[1].message
    if type(msg.tool_calls) ~= "table" then return { text = msg.content } end
    local calls = {}
    for i, c in ipairs(msg.tool_calls) do
      calls[i] = { id = c.id, name = c["function"].name, arguments = c["function"].arguments }
    end
    return { calls = calls }
  end
end

local function anthropic_model(key, model)
  return function(messages, tool_defs)
    local wire = {}
    for _, m in ipairs(messages) do
      if m.role == "tool" then
        -- every result of one turn's calls goes in one user message
        local block = { type = "tool_result", tool_use_id = m.id, content = m.text, is_error = m.isError }
        local prev = wire[#wire]
        if prev and prev.results then
          prev.content[#prev.content + 1] = block
        else
          wire[#wire + 1] = { role = "user", content = { block }, results = true }
        end
      elseif m.calls then
        local blocks = {}
        for i, c in ipairs(m.calls) do
          blocks[i] = { type = "tool_use", id = c.id, name = c.name, input = json.decode(c.arguments) }
        end
        wire[#wire + 1] = { role = "assistant", content = blocks }
      else
        wire[#wire + 1] = { role = m.role, content = m.text }
      end
    end
    local base = os.getenv("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
    for _, w in ipairs(wire) do w.results = nil end
    local v, err = post_json(base .. "/v1/messages",
      { ["x-api-key"] = key, ["anthropic-version"] = "2023-06-01" },
      { model = model or "claude-sonnet-4-5", max_tokens = 4096, messages = wire, tools = tools.anthropic(tool_defs),
        system = "You are a coding agent working in a sandbox." })
    if not v then return nil, err end
    local calls, text = {}, {}
    for _, b in ipairs(v.content) do
      if b.type == "tool_use" then
        calls[#calls + 1] = { id = b.id, name = b.name, arguments = json.encode(b.input) }
      elseif b.type == "text" then
        text[#text + 1] = b.text
      end
    end
    if #calls > 0 then return { calls = calls } end
    return { text = table.concat(text, "\n") }
  end
end

-- The loop ---------------------------------------------------------------------------

local function indent(s)
  return "    " .. s:gsub("\n", "\n    ")
end

--- Hand the model's tool calls to dsh.tools until it answers in text
--- (at most max_turns). Returns the answer, or nil, err.
local function agent_loop(ctx, model, task, max_turns)
  local defs = tools.for_context(ctx)
  local names = {}
  for i, d in ipairs(defs) do names[i] = d.name end
  print("tools: " .. table.concat(names, ", "))
  local messages = { { role = "user", text = task } }
  for _ = 1, max_turns do
    local reply, err = model(messages, defs)
    if not reply then return nil, err end
    if reply.skip then
      print("(skipped " .. reply.skip .. ": not offered by this world)")
    elseif reply.calls then
      messages[#messages + 1] = { role = "assistant", calls = reply.calls }
      for _, c in ipairs(reply.calls) do
        print("> " .. c.name .. " " .. c.arguments)
        local r = tools.call(ctx, c.name, c.arguments, { tools = defs })
        print((r.isError and "! " or "< ") .. indent(r.text):sub(5))
        messages[#messages + 1] = { role = "tool", id = c.id, text = r.text, isError = r.isError }
      end
    else
      return reply.text
    end
  end
  return nil, "the model did not finish within " .. max_turns .. " turns"
end

-- Main ---------------------------------------------------------------------------------

local function main(argv)
  local which, task = nil, "Write hello.c, make it greet the sandbox, and run it."
  local i = 1
  while argv[i] do
    if argv[i] == "--model" then
      which, i = argv[i + 1], i + 2
    else
      task, i = argv[i], i + 1
    end
  end
  local model
  if which == "openai" or which == "anthropic" then
    local key = os.getenv(which == "openai" and "OPENAI_API_KEY" or "ANTHROPIC_API_KEY")
    if not key or key == "" then
      io.stderr:write("agent: --model " .. which .. " needs " .. (which == "openai" and "OPENAI_API_KEY"
        or "ANTHROPIC_API_KEY") .. "\n")
      return 2
    end
    model = (which == "openai" and openai_model or anthropic_model)(key, os.getenv("AGENT_MODEL"))
  elseif which ~= nil then
    io.stderr:write("agent: --model must be openai or anthropic\n")
    return 2
  else
    model = scripted_model()
  end
  local ctx, err = compose_world()
  if not ctx then
    io.stderr:write("agent: the world did not start: " .. tostring(err) .. "\n")
    return 1
  end
  print("sandbox " .. tostring(ctx.e2b:sandboxId()) .. ", workspace " .. ctx.e2b.cwd)
  local answer, lerr = agent_loop(ctx, model, task, 40)
  local dok, derr = ctx:dispose()
  if not answer then
    io.stderr:write("agent: " .. tostring(lerr) .. "\n")
    return 1
  end
  print("answer: " .. answer)
  if not dok then
    io.stderr:write("agent: dispose failed: " .. tostring(derr) .. "\n")
    return 1
  end
  return 0
end

local code = async.run(main, arg):await()
os.exit(code)
