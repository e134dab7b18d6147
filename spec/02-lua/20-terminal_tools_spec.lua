-- The terminal tools (reference §5) over ctx.pty with real shells on this
-- machine's PTYs (pty-local): schemas for OpenAI strict mode and Anthropic
-- tool use, rendering, limits, and the text of every error.
local async = require "dsh.async"
local context = require "dsh.context"
local helpers = require "helpers"
local json = require "dsh.json"
local pty = require "dsh.pty"
local terminal = require "dsh.tools.terminal"

local T = terminal.tools

-- The pid of the host process whose command line starts with marker, or nil.
local function host_pid(marker)
  for name in require("lfs").dir("/proc") do
    if name:match("^%d+$") then
      local cmd = require("dsh.core.sysutil").read_file("/proc/" .. name .. "/cmdline") or ""
      if cmd:sub(1, #marker) == marker then return tonumber(name) end
    end
  end
end

local function with_ctx(fn)
  helpers.run(function()
    local dir = helpers.tmpdir()
    local ok, err = pcall(helpers.with_context, {
      pty.provider,
      { require "dsh.providers.pty_local", { cwd = dir, pollIntervalMs = 25, idleSilenceMs = 1000,
        timeoutMs = 10000, disposeGraceMs = 1000, cols = 200,
        ambientEnv = { PATH = os.getenv("PATH") or "/usr/bin:/bin", HOME = dir, LANG = "C.UTF-8" } } },
    }, function(ctx) return fn(ctx, { agent = { id = "agent-1" } }, dir) end)
    helpers.rm_rf(dir)
    if not ok then error(err, 0) end
  end)
end

describe("terminal tools", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("have schemas valid for OpenAI strict mode and Anthropic tool use", function()
    assert.same({ "terminal_open", "terminal_send", "terminal_read", "terminal_screen", "terminal_signal",
      "terminal_close", "terminal_list" }, terminal.order)
    for _, name in ipairs(terminal.order) do
      local tool = T[name]
      assert.equal(name, tool.name)
      assert.matches("^[a-z_]+$", tool.name)
      assert.is_true(#tool.description > 20)
      local p = tool.parameters
      assert.equal("object", p.type)
      assert.is_false(p.additionalProperties)
      local keys = {}
      for k, prop in pairs(p.properties) do
        keys[#keys + 1] = k
        assert.is_string(prop.description, name .. "." .. k)
        local t = prop.type
        assert.truthy(type(t) == "string" or (type(t) == "table" and #t == 2 and t[2] == "null"), name .. "." .. k)
        for kw in pairs(prop) do -- only keywords both APIs accept
          assert.truthy(({ type = true, description = true, enum = true, minimum = true, maximum = true })[kw], kw)
        end
      end
      table.sort(keys)
      local req = {}
      for i, k in ipairs(p.required or {}) do req[i] = k end
      table.sort(req)
      assert.same(keys, req) -- strict: every property is required (optional ones take null)
      local decoded = json.decode(json.encode(p))
      assert.same("object", decoded.type)
      if #keys == 0 then assert.is_nil(decoded.required) end
    end
  end)

  it("open, send, read, screen, signal, list and close a shell, rendered as the reference does", function()
    with_ctx(function(ctx, opts, dir)
      local text = assert(T.terminal_open.run(ctx, { type = "shell", name = "main", cwd = json.null }, opts))
      assert.equal("started terminal session pty-1 (main) [type: shell]\ndsh> ", text)
      text = assert(T.terminal_send.run(ctx, { session_id = "pty-1", text = "printf 'PTY-你好\\n'", submit = json.null,
        wait = json.null }, opts))
      assert.equal("printf 'PTY-你好\\n'\nPTY-你好\ndsh> \n[wait: stdin_read]\n[session: running]", text)
      text = assert(T.terminal_send.run(ctx, { session_id = "pty-1", text = "", submit = false }, opts))
      assert.equal("(no new output)\n[wait: inferred_idle]\n[session: running]", text) -- nothing typed, silence
      text = assert(T.terminal_read.run(ctx, { session_id = "pty-1", offset = 1, count = 2 }, opts))
      assert.equal("dsh> printf 'PTY-你好\\n'\nPTY-你好\n[lines: 1-3 of 3]", text)
      text = assert(T.terminal_screen.run(ctx, { session_id = "pty-1" }, opts))
      assert.equal("dsh> printf 'PTY-你好\\n'\nPTY-你好\ndsh>\n[cursor: row 3, col 6; screen 40x200]\n"
        .. "[session: running]", text)
      -- a full-screen program on the alternate screen, waited for
      assert(T.terminal_send.run(ctx, { session_id = "pty-1", wait = false,
        text = "printf '\\033[?1049h\\033[HFULL %s' SCREEN; read x; printf '\\033[?1049l'" }, opts))
      text = assert(T.terminal_screen.run(ctx, { session_id = "pty-1", wait_for = "FULL SCREEN", timeout_ms = 5000 },
        opts))
      assert.truthy(text:find("^FULL SCREEN\n"), text)
      assert.truthy(text:find("[cursor: row 1, col 12; screen 40x200, full-screen program]\n[wait: match]", 1, true))
      -- the send did not wait: Ctrl-C typed next is accepted at once, and reaches `read`
      text = assert(T.terminal_send.run(ctx, { session_id = "pty-1", text = "\3", submit = false }, opts))
      assert.truthy(text:find("[wait: stdin_read]\n[session: running]", 1, true), text)
      -- a send someone waits for still holds the session: a second one at once is refused, with a hint
      local marker = "dsh-tool-job-" .. math.random(1e9)
      local first = async.run(function()
        return T.terminal_send.run(ctx, { session_id = "pty-1", text = "bash -c 'exec -a " .. marker .. " sleep 30'" },
          opts)
      end)
      assert.truthy(helpers.eventually(function() return ctx.pty:list(opts.agent)[1].busy end)) -- it started
      local _, err = T.terminal_send.run(ctx, { session_id = "pty-1", text = "x" }, opts)
      assert.equal("SEND_ACTIVE", err.code)
      assert.equal("Error: terminal_send: dsh.pty: session pty-1 already has an active send (another terminal_send "
        .. "is still waiting on this session; wait for it, or stop the program with terminal_signal INT)",
        terminal.render_error(err))
      assert.truthy(helpers.eventually(function() return host_pid(marker) end)) -- the job runs: INT reaches it
      text = assert(T.terminal_signal.run(ctx, { session_id = "pty-1", signal = "INT" }, opts))
      assert.matches("^delivered SIGINT to foreground process group %d+$", text)
      assert.are_not.equal(ctx.pty:list(opts.agent)[1].pid, tonumber(text:match("%d+$")))
      text = assert(first:await())
      assert.truthy(text:find("[wait: stdin_read]", 1, true), text)
      -- its own timeout, and waiting for a text
      text = assert(T.terminal_send.run(ctx, { session_id = "pty-1", text = "for i in $(seq 20); do echo tick; "
        .. "sleep 0.05; done", timeout_ms = 200 }, opts))
      assert.truthy(text:find("tick\n", 1, true) and text:find("[wait: timeout]", 1, true), text)
      assert(T.terminal_send.run(ctx, { session_id = "pty-1", text = "", submit = false }, opts)) -- the loop's end
      text = assert(T.terminal_send.run(ctx, { session_id = "pty-1", text = "sleep 0.3; echo RE''ADY; sleep 0.3",
        wait_for = "READY", idle_ms = json.null, timeout_ms = 10000 }, opts))
      assert.truthy(text:find("^sleep 0%.3; echo RE''ADY; sleep 0%.3\nREADY\n?\n%[wait: match%]\n%[session: "
        .. "running%]$"), text)
      assert(T.terminal_send.run(ctx, { session_id = "pty-1", text = "", submit = false }, opts)) -- sleep's end
      -- a second session; the list
      assert(T.terminal_open.run(ctx, { type = "shell", name = json.null, cwd = json.null }, opts))
      assert.equal("pty-1 (main) [type: shell] running\npty-2 [type: shell] running",
        T.terminal_list.run(ctx, {}, opts))
      local _
      _, err = T.terminal_signal.run(ctx, { session_id = "pty-2", signal = "KILL" }, opts)
      assert.equal("Error: terminal_signal: pty-local: refusing to SIGKILL the local PTY shell; use terminal_close "
        .. "(nothing runs in the foreground, or the signal is refused)", terminal.render_error(err))
      text = assert(T.terminal_send.run(ctx, { session_id = "pty-2", text = "exit 3" }, opts))
      assert.equal("exit 3\nexit\n\n[wait: session_exit]\n[session: exited code=3 signal=null]", text)
      assert.equal("closed terminal session pty-1", T.terminal_close.run(ctx, { session_id = "pty-1" }, opts))
      assert.equal("closed terminal session pty-2", T.terminal_close.run(ctx, { session_id = "pty-2" }, opts))
      assert.equal("(no terminal sessions)", T.terminal_list.run(ctx, {}, opts))
      assert.is_truthy(dir)
    end)
  end)

  it("keeps results within maxResultBytes, cut on code points, newest output kept", function()
    with_ctx(function(ctx, opts)
      opts.maxResultBytes = 100
      assert(T.terminal_open.run(ctx, { type = "shell" }, opts))
      local text = assert(T.terminal_send.run(ctx, { session_id = "pty-1",
        text = "for i in $(seq 1 50); do printf '你好'; done; echo; echo end" }, opts))
      assert.is_true(#text <= 100)
      assert.is_true(require("dsh.core.utf8").validate(text))
      local tail = "end\ndsh> \n[wait: stdin_read]\n[session: running]\n[output truncated]"
      assert.equal(tail, text:sub(-#tail))
      opts.maxResultBytes = 1 -- at least 64
      text = assert(T.terminal_read.run(ctx, { session_id = "pty-1" }, opts))
      assert.is_true(#text <= 64 and #text > 20)
      assert.matches("%[lines: 0%-%d+ of %d+%]$", text)
    end)
  end)

  it("answers every failure with clear text", function()
    with_ctx(function(ctx, opts)
      local function err_of(tool, input, o)
        local v, err = T[tool].run(ctx, input, o == nil and opts or o)
        assert.is_nil(v)
        return err.code, err.message
      end
      assert.same({ "TERMINAL_NO_AGENT", "terminal tools require an initiating agent" },
        { err_of("terminal_list", {}, false) })
      assert.same({ "INVALID_ARGUMENT", "terminal_open: type is required" }, { err_of("terminal_open", {}) })
      assert.same({ "INVALID_ARGUMENT", "terminal_open: unknown parameter shell" },
        { err_of("terminal_open", { type = "shell", shell = "zsh" }) })
      assert.same({ "INVALID_ARGUMENT", "terminal_read: count must be at least 1" },
        { err_of("terminal_read", { session_id = "pty-1", count = 0 }) })
      assert.same({ "INVALID_ARGUMENT", "terminal_read: offset must be an integer" },
        { err_of("terminal_read", { session_id = "pty-1", offset = 1.5 }) })
      assert.same({ "INVALID_ARGUMENT", "terminal_signal: signal must be one of INT, TERM, KILL, TSTP, HUP" },
        { err_of("terminal_signal", { session_id = "pty-1", signal = "QUIT" }) })
      assert.same({ "INVALID_ARGUMENT", "terminal_send: text must be a string" },
        { err_of("terminal_send", { session_id = "pty-1", text = 5 }) })
      assert.same({ "NO_SESSION", "terminal_read: dsh.pty: no session pty-9 (use terminal_list to see the open "
        .. "sessions)" }, { err_of("terminal_read", { session_id = "pty-9" }) })
      assert.same({ "NO_BACKEND", "terminal_open: dsh.pty: no backend of type zsh (use type \"shell\")" },
        { err_of("terminal_open", { type = "zsh" }) })
      assert(T.terminal_open.run(ctx, { type = "shell", name = "a" }, opts))
      assert.same({ "DUPLICATE_NAME", "terminal_open: dsh.pty: owner agent-1 already has a session named a "
        .. "(choose another name, or use the existing session)" }, { err_of("terminal_open", { type = "shell",
        name = "a" }) })
      assert.same({ "FOREIGN_SESSION", "terminal_close: dsh.pty: session pty-1 belongs to another owner (that "
        .. "session belongs to another agent)" }, { err_of("terminal_close", { session_id = "pty-1" },
        { agent = { id = "agent-2" } }) })
      assert(T.terminal_send.run(ctx, { session_id = "pty-1", text = "exit" }, opts))
      assert.same({ "PTY_EXITED", "terminal_send: pty-local: local PTY session has exited (the shell has exited; "
        .. "open a new session with terminal_open)" }, { err_of("terminal_send", { session_id = "pty-1",
        text = "true" }) })
      local ctl = async.controller()
      ctl:abort("stop")
      local code = err_of("terminal_open", { type = "shell" }, { agent = opts.agent, signal = ctl.signal })
      assert.equal("ABORTED", code)
      local v, e = T.terminal_list.run(context.new(), {}, opts)
      assert.is_nil(v)
      assert.same({ "TERMINAL_UNAVAILABLE", "terminal_list: ctx.pty is not configured" }, { e.code, e.message })
    end)
  end)
end)
