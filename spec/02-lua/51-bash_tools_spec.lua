-- What a model sees of Bash (issue 9 §4): dsh.bash's rendering (truncation at
-- a line boundary, never an empty first line; the status lines), and the
-- model-facing tools bash, bash_output and kill_shell: a schema OpenAI's
-- strict mode and Anthropic's tool use both accept, null taken as absent, the
-- configured timeouts in the description, a timeout above the maximum capped.
-- The tools run on real processes (ctx.subprocess on this host).
local bash = require "dsh.bash"
local helpers = require "helpers"
local json = require "dsh.json"
local render = require "dsh.bash._render"
local tool = require "dsh.tools.bash"
local bash_output = require "dsh.tools.bash_output"
local kill_shell = require "dsh.tools.kill_shell"

local function result(stdout, stderr, extra)
  local r = {
    exitCode = 0, timedOut = false, aborted = false, timeoutMs = 1000,
    stdout = { text = stdout, total = #stdout }, stderr = { text = stderr or "", total = #(stderr or "") },
  }
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end

-- The problems OpenAI's strict mode (Structured Outputs' supported subset)
-- and Anthropic's tool use would have with a parameters schema.
local ALLOWED = { type = true, description = true, properties = true, required = true, additionalProperties = true,
  enum = true, items = true, anyOf = true }
local function strict_problems(schema)
  local out = {}
  local function walk(s, where, depth)
    for k in pairs(s) do
      if not ALLOWED[k] then out[#out + 1] = where .. ": keyword " .. k .. " is not supported in strict mode" end
    end
    if depth > 5 then out[#out + 1] = where .. ": nested deeper than 5 levels" end
    local types = type(s.type) == "table" and s.type or { s.type }
    for _, t in ipairs(types) do
      if not ({ string = 1, number = 1, integer = 1, boolean = 1, object = 1, array = 1, null = 1 })[t] then
        out[#out + 1] = where .. ": type " .. tostring(t)
      end
    end
    if s.type == "object" then
      if s.additionalProperties ~= false then out[#out + 1] = where .. ": additionalProperties must be false" end
      local req = {}
      for _, r in ipairs(s.required or {}) do req[r] = true end
      for name, p in pairs(s.properties or {}) do
        if not req[name] then out[#out + 1] = where .. ": " .. name .. " is not required" end
        walk(p, where .. "." .. name, depth + 1)
      end
    end
  end
  if schema.type ~= "object" then out[#out + 1] = "the root must be an object (both providers)" end
  if schema.anyOf or schema.oneOf or schema.allOf then out[#out + 1] = "no combinator at the root (Anthropic)" end
  walk(schema, "$", 1)
  return out
end

describe("dsh.bash rendering", function()
  it("cuts a truncated stream at a line boundary within the kept tail, never at an empty line", function()
    local lines = {}
    for i = 1, 40 do lines[i] = string.format("line-%02d", i) end
    local text = table.concat(lines, "\n") .. "\n"
    -- the budget ends mid-line: the partial first line goes, the note counts it
    local shown = render.render(result(text), 100)
    local first = shown:match("^%[%.%.%. (%d+) bytes of output truncated%]\n(line%-%d%d)\n")
    assert.is_truthy(first, shown)
    local body = shown:match("truncated%]\n(.*)%[exit code 0%]$")
    assert.equal(text:sub(#text - #body + 1), body)
    assert.is_true(#body <= 100)
    assert.equal(tostring(#text - #body), shown:match("^%[%.%.%. (%d+) bytes"))
    -- blank lines at the cut are dropped too
    local blank = ("x"):rep(50) .. "\n\n\n\nlast line\n"
    assert.equal("[... 54 bytes of output truncated]\nlast line\n[exit code 0]",
      render.render(result(blank), 20))
    -- no newline inside the kept tail: the code-point-safe cut stays
    local long = ("é"):rep(100)
    local cut = render.render(result(long), 64)
    assert.matches("^%[%.%.%. %d+ bytes of output truncated%]\n", cut)
    assert.is_truthy(require("dsh.core.utf8").validate(cut))
    -- a collector's own cut (total beyond the text) is treated alike
    local r = result("tail of a partial line\nwhole line\n")
    r.stdout.total = 5000
    assert.equal("[... 4989 bytes of output truncated]\nwhole line\n[exit code 0]", render.render(r, 1000))
    -- untruncated output keeps its leading empty lines
    assert.equal("\n\nx\n[exit code 0]", render.render(result("\n\nx\n"), 100))
  end)

  it("names only the command's own timeout as a timeout, an abort as an abort", function()
    assert.equal("(no output)\n[timed out after 1000 ms]", render.render(result("", "", { timedOut = true }), 100))
    assert.equal("(no output)\n[aborted]", render.render(result("", "", { aborted = true, signal = "SIGTERM" }), 100))
    assert.equal("(no output)\n[terminated by SIGTERM]", render.render(result("", "", { signal = "SIGTERM" }), 100))
    assert.equal("out\nerr\n[exit code 0]\n[still running in the background as bash-3]",
      render.render(result("out\n", "err", { background = "bash-3" }), 100))
  end)

  it("puts a delta's stderr under [stderr], adding a newline only when stdout lacks one", function()
    local function rd(text, next_offset, lossy)
      return { text = text, nextOffset = next_offset or #text, lossy = lossy or false }
    end
    assert.equal("out\n[stderr]\nerr\n", render.delta(rd("out\n"), 0, rd("err\n"), 0))
    assert.equal("out\n[stderr]\nerr\n", render.delta(rd("out"), 0, rd("err\n"), 0))
    assert.equal("[stderr]\nerr\n", render.delta(rd(""), 0, rd("err\n"), 0))
    assert.equal("[stderr]\nfailed to start: x\n", render.delta(rd(""), 0, rd(""), 0, "failed to start: x\n"))
    assert.equal("[... 90 bytes of output dropped]\nlast", render.delta(rd("last", 100, true), 6, rd(""), 0))
  end)
end)

describe("the bash tools", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  local function with_bash(cfg, fn)
    helpers.run(function()
      helpers.with_context({ require "dsh.providers.subprocess_local", { require "dsh.providers.bash", cfg } }, fn)
    end)
  end

  it("have schemas OpenAI strict mode and Anthropic tool use accept", function()
    for _, t in ipairs { tool, bash_output, kill_shell } do
      assert.same({}, strict_problems(t.parameters), t.name)
      assert.same({}, strict_problems(json.decode(json.encode(t.parameters))), t.name)
      assert.matches("^[a-zA-Z0-9_-]+$", t.name) -- both providers' tool name rule
      assert.is_true(#t.description > 40)
    end
    assert.same({ "command", "description", "run_in_background", "timeout" }, tool.parameters.required)
    assert.same({ "integer", "null" }, tool.parameters.properties.timeout.type)
    assert.equal("string", tool.parameters.properties.command.type)
  end)

  it("states the configured default and maximum timeout", function()
    assert.matches("The default timeout is 120000 ms, the maximum 600000 ms", tool.description, 1, true)
    with_bash({ timeoutMs = 5000, maxTimeoutMs = 9000 }, function(ctx)
      local def = tool.definition(ctx.bash)
      assert.equal("bash", def.name)
      assert.matches("The default timeout is 5000 ms, the maximum 9000 ms", def.description, 1, true)
      assert.matches("default 5000, at most 9000", def.parameters.properties.timeout.description, 1, true)
      assert.same({}, strict_problems(def.parameters))
    end)
  end)

  it("take null for an optional field as absent and refuse bad input", function()
    local null = json.decode("null")
    local ok = assert(tool.validate(json.decode('{"command":"true","timeout":null,"description":null,'
      .. '"run_in_background":null}')))
    assert.same({ command = "true" }, ok)
    assert.equal(nil, ok.timeout)
    assert.same({ command = "x", timeout = 5 }, tool.validate { command = "x", timeout = 5, description = null })
    local function invalid(input, msg)
      local v, err = tool.validate(input)
      assert.is_nil(v)
      assert.same({ "INVALID_ARGUMENT", msg }, { err.code, err.message })
    end
    invalid({ command = " " }, "bash: command must be a non-empty string")
    invalid({ command = null }, "bash: command must be a non-empty string")
    invalid({ command = "x", timeout = 0 }, "bash: timeout must be a positive integer number of milliseconds")
    invalid({ command = "x", timeout = 1.5 }, "bash: timeout must be a positive integer number of milliseconds")
    invalid({ command = "x", run_in_background = "yes" }, "bash: run_in_background must be a boolean")
    invalid({ command = "x", workdir = "/" }, "bash: unknown parameter workdir")
    invalid("x", "bash: input must be an object")
  end)

  it("run commands, capping a timeout above the maximum instead of refusing it", function()
    with_bash({ timeoutMs = 100, maxTimeoutMs = 300, graceMs = 100 }, function(ctx)
      local text = assert(tool.run(ctx, { command = "echo hi; echo oops >&2; exit 3" }))
      assert.equal("hi\noops\n[exit code 3]", text)
      assert.equal("[timed out after 300 ms]", assert(tool.run(ctx, { command = "exec sleep 5", timeout = 99999 }))
        :match("%[.*%]$"))
      assert.equal("(no output)\n[timed out after 100 ms]", assert(tool.run(ctx, { command = "exec sleep 5" })))
    end)
  end)

  it("start a command in the background, read its output once, and stop it", function()
    with_bash({ graceMs = 200 }, function(ctx)
      local started = assert(tool.run(ctx, { command = "echo one; echo two >&2; exec sleep 30",
        run_in_background = true }))
      assert.equal('Started in the background as bash-1. bash_output with bash_id "bash-1" reads its output; '
        .. 'kill_shell with shell_id "bash-1" stops it.', started)
      local seen = helpers.eventually(function()
        local text = assert(bash_output.run(ctx, { bash_id = "bash-1" }))
        if text ~= "(no new output)\n[still running]" then return text end
      end)
      -- both lines may come in one read or two; gather until both are there
      local all = seen
      while not all:find("two", 1, true) do
        all = all .. assert(bash_output.run(ctx, { bash_id = "bash-1" }))
      end
      assert.matches("one\n", all, 1, true)
      assert.matches("[stderr]\ntwo\n", all, 1, true)
      assert.equal("(no new output)\n[still running]", assert(bash_output.run(ctx, { bash_id = "bash-1" })))
      assert.equal("stopped bash-1 [terminated by SIGTERM]", assert(kill_shell.run(ctx, { shell_id = "bash-1" })))
      assert.equal("bash-1 had already ended [terminated by SIGTERM]",
        assert(kill_shell.run(ctx, { shell_id = "bash-1" })))
      local v, err = bash_output.run(ctx, { bash_id = "bash-9" })
      assert.is_nil(v)
      assert.same({ "BASH_UNKNOWN_PROCESS", "dsh.bash: no background process bash-9" }, { err.code, err.message })
      v, err = kill_shell.run(ctx, { shell_id = "bash-9" })
      assert.is_nil(v)
      assert.equal("BASH_UNKNOWN_PROCESS", err.code)
      v, err = bash_output.run(ctx, { bash_id = "" })
      assert.is_nil(v)
      assert.equal("INVALID_ARGUMENT", err.code)
      -- a command that finished: its exit status, and what it wrote
      assert(tool.run(ctx, { command = "echo done; exit 4", run_in_background = true }))
      local final = helpers.eventually(function()
        local text = assert(bash_output.run(ctx, { bash_id = "bash-2" }))
        if text:find("%[exit code") then return text end
      end)
      assert.equal("done\n[exit code 4]", final)
    end)
  end)

  it("fail without ctx.bash, naming it", function()
    for _, t in ipairs { { tool, { command = "true" } }, { bash_output, { bash_id = "bash-1" } },
      { kill_shell, { shell_id = "bash-1" } } } do
      local v, err = t[1].run({}, t[2])
      assert.is_nil(v)
      assert.equal("BASH_UNAVAILABLE", err.code)
    end
    assert.equal(bash.DEFAULT_MAX_TIMEOUT_MS, 600000)
  end)
end)
