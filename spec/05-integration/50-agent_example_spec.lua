-- The example agent host (examples/agent.lua) runs as a user runs it, with
-- `luajit examples/agent.lua`: it composes a local sandbox, replays its
-- scripted model's tool calls through dsh.tools and prints each call and
-- result. Its output is what the tools really did, it exits 0, and it
-- leaves no sandbox running. Without an API key the real model clients
-- refuse to start.
local D = require "helpers.dshd"
local helpers = require "helpers"
local sandbox = require "dsh.sandbox"

local function run(args)
  local cmd = string.format("cd %q && env -u OPENAI_API_KEY -u ANTHROPIC_API_KEY luajit examples/agent.lua %s 2>&1; "
    .. "echo \"[rc=$?]\"", helpers.root, args or "")
  local p = assert(io.popen(cmd))
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("%[rc=(%d+)%]\n$"))
  return out:gsub("%[rc=%d+%]\n$", ""), rc
end

-- Each fragment must appear, in this order.
local function in_order(out, fragments)
  local at = 1
  for _, f in ipairs(fragments) do
    local i, j = out:find(f, at, true)
    assert.is_truthy(i, "missing, or out of order: " .. f .. "\n--- output:\n" .. out)
    at = j + 1
  end
end

describe("examples/agent.lua", function()
  D.isolated_state()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("drives every tool on a local sandbox from its scripted transcript", function()
    local out, rc = run()
    assert.equal(0, rc, out)
    local id = out:match("^sandbox (%w+), workspace /home/user/workspace\n")
    assert.is_string(id, out)
    in_order(out, {
      "tools: bash, bash_output, kill_shell, read, write, edit, list, watch, terminal_open, terminal_send, "
        .. "terminal_read, terminal_screen, terminal_signal, terminal_close, terminal_list, lsp, run_code\n",
      "> list ", "< (empty directory)\n",
      "> write ", "< Created /home/user/workspace/hello.c (8 lines, 135 bytes)\n",
      "> read ", "<      1\t#include <stdio.h>\n", "         8\t}\n",
      "> edit ", '! Error: old_string not found in "/home/user/workspace/hello.c". Copy old_string exactly',
      "> edit ", "< Edited /home/user/workspace/hello.c: 1 replacement.\n",
      '         3\tstatic const char *name(void) { return "sandbox"; }\n',
      "> bash ", "< hello, sandbox\n    [exit code 0]\n",
      '> bash {"comand": "ls"}\n',
      '! Error: bash: unknown parameter "comand" (did you mean "command"?). Parameters: command (string, required)',
      "> bash ", "< (no output)\n    [exit code 0]\n",
      "> write ", '! Error: "/home/user/workspace/hello.c" has changed since it was read. Read it again before',
      "> bash ", "< Started in the background as bash-1.",
      "> terminal_open ", "< started terminal session pty-1 (main) [type: shell]\n",
      "> terminal_send ", "    /tmp\n", "    [wait: stdin_read]\n",
      "> terminal_close ", "< closed terminal session pty-1\n",
      "> lsp ", "function `name`", "static const char *name()",
      "> run_code ", "< [\n      1,\n      4,\n      9,\n      16,\n      25\n    ]\n",
      "> bash_output ", "    [still running]\n",
      "> kill_shell ", "< stopped bash-1 [terminated by SIGTERM]\n",
      "answer: Done: hello.c prints hello, sandbox.\n",
    })
    -- the sandbox went with the context
    for _, s in ipairs(sandbox.list()) do assert.is_not.equal("running", s.state, s.id) end
  end)

  it("needs an API key before it talks to a real model", function()
    local out, rc = run("--model openai")
    assert.equal(2, rc)
    assert.equal("agent: --model openai needs OPENAI_API_KEY\n", out)
    out, rc = run("--model anthropic")
    assert.equal(2, rc)
    assert.equal("agent: --model anthropic needs ANTHROPIC_API_KEY\n", out)
    out, rc = run("--model gemini")
    assert.equal(2, rc)
    assert.equal("agent: --model must be openai or anthropic\n", out)
  end)
end)
