-- Every model-facing tool through dsh.tools.call on one real local sandbox
-- (dshd in bubblewrap): ctx.e2b, fs-e2b, subprocess-e2b, Bash, PTY, clangd
-- through lsp-e2b, and Code Mode. What the model reads (text) and what the
-- host gets (data), the file tools' guards against writing what the model
-- has not seen, and a model's mistakes answered with text it can act on.
local D = require "helpers.dshd"
local async = require "dsh.async"
local helpers = require "helpers"
local tools = require "dsh.tools"
local json_null = require("dsh.json").null

local function compose()
  return helpers.start_context {
    { require "dsh.providers.e2b", { timeoutMs = 180000, onTimeout = "kill", onDispose = "kill" } },
    require "dsh.providers.fs_e2b", require "dsh.providers.subprocess_e2b",
    { require "dsh.providers.bash", { timeoutMs = 20000, maxTimeoutMs = 60000 } },
    require("dsh.pty").provider,
    { require "dsh.providers.pty_e2b", { idleSilenceMs = 1000, timeoutMs = 10000, disposeGraceMs = 1000 } },
    require("dsh.lsp").provider,
    { require "dsh.providers.lsp_e2b", { servers = {
      clangd = { command = "clangd", args = { "--log=error" }, extensionToLanguage = { [".c"] = "c" } } } } },
    require "dsh.providers.code_runtime_e2b",
  }
end

describe("dsh.tools on a local sandbox", function()
  D.isolated_state()
  local ctx
  before_each(function()
    helpers.snapshot()
    helpers.run(function() ctx = compose() end)
  end)
  after_each(function()
    helpers.run(function() assert(ctx:dispose()) end)
    helpers.assert_clean()
  end)

  -- call with a table of arguments (as a host that decoded them, or Anthropic, gives them)
  local function call(name, args, opts)
    return tools.call(ctx, name, args, opts)
  end
  local function ok(name, args, opts)
    local r = call(name, args, opts)
    assert.is_false(r.isError, name .. ": " .. r.text)
    return r
  end

  it("offers every tool the composition supports", function()
    helpers.run(function()
      local names = {}
      for i, t in ipairs(tools.for_context(ctx)) do names[i] = t.name end
      assert.same(tools.names, names)
      -- the bash tool's description states this ctx.bash's timeouts
      assert.matches("default timeout is 20000 ms, the maximum 60000 ms", tools.for_context(ctx)[1].description)
    end)
  end)

  it("reads, writes, edits and lists files, with versions for the host", function()
    helpers.run(function()
      local lines = {}
      for i = 1, 30 do lines[i] = "line " .. i end
      local w = ok("write", '{"path": "dir/notes.txt", "content": "' .. table.concat(lines, "\\n") .. '\\n"}')
      assert.equal("Created " .. ctx.fs.cwd .. "/dir/notes.txt (30 lines, 231 bytes)", w.text)
      assert.equal("create", w.data.operation)
      assert.equal(assert(ctx.fs:stat("dir/notes.txt")).version, w.data.version)

      local r = ok("read", '{"path": "dir/notes.txt", "offset": 28, "limit": null}')
      assert.equal("    28\tline 28\n    29\tline 29\n    30\tline 30\n[lines 28-30 of 30]", r.text)
      r = ok("read", { path = "dir/notes.txt", offset = 2, limit = 2 })
      assert.equal("     2\tline 2\n     3\tline 3\n[lines 2-3 of 30; offset 4 reads on]", r.text)
      assert.same({ 2, 3, 30 }, { r.data.startLine, r.data.endLine, r.data.totalLines })

      local e = ok("edit", { path = "dir/notes.txt", old_string = "line 7\n", new_string = "line seven\n" })
      assert.equal("Edited " .. ctx.fs.cwd .. "/dir/notes.txt: 1 replacement.\n"
        .. "     5\tline 5\n     6\tline 6\n     7\tline seven\n     8\tline 8\n     9\tline 9", e.text)
      assert.equal(1, e.data.replacements)
      assert.equal("line seven\n", assert(ctx.fs:readText("dir/notes.txt")).text:match("line seven\n"))
      e = ok("edit", { path = "dir/notes.txt", old_string = "line 2", new_string = "LINE 2", replace_all = true })
      assert.equal(11, e.data.replacements) -- line 2, line 20 .. line 29

      local l = ok("list", { path = "dir" })
      assert.equal("notes.txt (" .. assert(ctx.fs:stat("dir/notes.txt")).size .. " bytes)", l.text)
      l = ok("list", "{}")
      assert.matches("\ndir/\n", "\n" .. l.text .. "\n")
      assert.equal(ctx.fs.cwd, l.data.path)
      -- the bytes are in the sandbox: Bash sees them
      assert.equal("line seven\n", assert(ctx.bash:run { command = "sed -n 7p dir/notes.txt" }).stdout.text)
      ok("write", { path = "empty", content = "" })
      assert.equal("(empty file)", ok("read", { path = "empty" }).text)
    end)
  end)

  it("reads long lines, CRLF files and big files within its bounds", function()
    helpers.run(function()
      local files = require "dsh.tools.files"
      local long = string.rep("é", 1500) -- 3000 bytes: cut at 2000, on a code point boundary
      assert(ctx.fs:writeText("long.txt", "short\r\n" .. long .. "\r\nlast without newline"))
      local r = ok("read", { path = "long.txt" })
      assert.equal("     1\tshort\n     2\t" .. string.rep("é", 1000) .. "… [line cut: 3000 bytes]\n"
        .. "     3\tlast without newline", r.text)
      assert.equal(3, r.data.totalLines)
      local lines = {}
      for i = 1, 5000 do lines[i] = string.format("%04d %s", i, string.rep("x", 95)) end
      assert(ctx.fs:writeText("big.txt", table.concat(lines, "\n") .. "\n"))
      local saved = files.MAX_READ_BYTES
      files.MAX_READ_BYTES = 1000
      r = call("read", { path = "big.txt", offset = 4001 })
      files.MAX_READ_BYTES = saved
      assert.is_false(r.isError)
      local shown = select(2, r.text:gsub("\n", "\n"))
      assert.equal(10, shown) -- 10 lines of 100 bytes, then the note
      assert.matches("\n%[lines 4001%-4010 of 5000; output limit of 1000 bytes; offset 4011 reads on%]$", r.text)
      assert.same({ 4001, 4010, 5000 }, { r.data.startLine, r.data.endLine, r.data.totalLines })
      r = ok("read", { path = "big.txt", offset = 4999 })
      assert.equal("  4999\t4999 " .. string.rep("x", 95) .. "\n  5000\t5000 " .. string.rep("x", 95)
        .. "\n[lines 4999-5000 of 5000]", r.text)
    end)
  end)

  it("never lets the model overwrite what it has not seen", function()
    helpers.run(function()
      assert(ctx.bash:run { command = "printf 'from bash\\n' > made-by-bash.txt" })
      local r = call("write", { path = "made-by-bash.txt", content = "clobbered\n" })
      assert.is_true(r.isError)
      assert.equal("FS_NOT_OBSERVED", r.error.code)
      assert.equal('Error: "' .. ctx.fs.cwd .. '/made-by-bash.txt" already exists; read it before overwriting it',
        r.text)
      assert.equal("from bash\n", assert(ctx.fs:readText("made-by-bash.txt")).text)
      -- read first, then it may
      ok("read", { path = "made-by-bash.txt" })
      ok("write", { path = "made-by-bash.txt", content = "replaced\n" })
      -- changed behind the model's back: write and edit are refused as stale
      assert(ctx.bash:run { command = "echo more >> made-by-bash.txt" })
      r = call("write", { path = "made-by-bash.txt", content = "again\n" })
      assert.equal("FS_STALE_VERSION", r.error.code)
      assert.equal('Error: "' .. ctx.fs.cwd .. '/made-by-bash.txt" has changed since it was read. '
        .. "Read it again before you change it (write creates a file that does not exist).", r.text)
      r = call("edit", { path = "made-by-bash.txt", old_string = "replaced", new_string = "x" })
      assert.equal("FS_STALE_VERSION", r.error.code)
      assert.equal("replaced\nmore\n", assert(ctx.fs:readText("made-by-bash.txt")).text)
      ok("read", { path = "made-by-bash.txt" })
      ok("edit", { path = "made-by-bash.txt", old_string = "more", new_string = "less" })
      assert.equal("replaced\nless\n", assert(ctx.fs:readText("made-by-bash.txt")).text)
    end)
  end)

  it("answers the file system's refusals with what to do", function()
    helpers.run(function()
      assert(ctx.fs:writeText("a.txt", "x = 1\nx = 1\n"))
      assert(ctx.fs:writeBytes("blob.bin", "\0\1\2\255"))
      local cases = {
        { "read", { path = "missing.txt" }, "FS_NOT_FOUND", "Check the path; list shows what a directory holds." },
        { "read", { path = "." }, "FS_NOT_REGULAR_FILE", "use list for a directory" },
        { "read", { path = "blob.bin" }, "FS_NOT_TEXT", "inspect it with bash" },
        { "list", { path = "a.txt" }, "FS_NOT_DIRECTORY", "use read for a file" },
        { "edit", { path = "a.txt", old_string = "y = 2", new_string = "z" }, "FS_EDIT_NOT_FOUND",
          "Copy old_string exactly from the file" },
        { "edit", { path = "a.txt", old_string = "x = 1", new_string = "x = 2" }, "FS_AMBIGUOUS_EDIT",
          "old_string matched 2 times. Add surrounding lines to old_string so that it matches once, or set" },
        { "edit", { path = "a.txt", old_string = "x", new_string = "x" }, "INVALID_ARGUMENT",
          "edit: old_string and new_string are the same" },
        { "read", { path = " " }, "INVALID_ARGUMENT", "read: path must not be empty" },
        { "write", { path = "a\0b", content = "" }, "INVALID_ARGUMENT", "write: path must not contain a NUL byte" },
        { "edit", { path = "gone.txt", old_string = "a", new_string = "b" }, "FS_STALE_VERSION",
          "does not exist. Read it again before you change it (write creates a file that does not exist)." },
        { "read", { path = "a.txt", offset = 9 }, "INVALID_ARGUMENT",
          "offset 9 is past the end of the file (2 lines)" },
        -- a read-only file system says so, also before the file was read, and names no temporary file
        { "write", { path = "/etc/hostname", content = "x\n" }, "FS_PERMISSION_DENIED",
          'Error: cannot write "/etc/hostname": the file system is read-only. That path cannot be changed; work' },
        { "write", { path = "/usr/dsh-new.txt", content = "x\n" }, "FS_PERMISSION_DENIED",
          'Error: cannot write "/usr/dsh-new.txt": the file system is read-only. That path cannot be changed' },
      }
      for _, c in ipairs(cases) do
        local r = call(c[1], c[2])
        assert.is_true(r.isError, c[1])
        assert.equal(c[3], r.error.code, r.text)
        assert.same({ code = c[3], message = r.error.message }, r.data)
        assert.matches("^Error: ", r.text)
        assert.is_truthy(r.text:find(c[4], 1, true), r.text)
      end
      -- after a read too, and for an edit
      ok("read", { path = "/etc/hostname" })
      for _, c in ipairs { { "write", { path = "/etc/hostname", content = "x\n" } },
        { "edit", { path = "/etc/hostname", old_string = assert(ctx.fs:readText("/etc/hostname")).text,
          new_string = "x\n" } } } do
        local r = call(c[1], c[2])
        assert.equal("FS_PERMISSION_DENIED", r.error.code, r.text)
        assert.equal('cannot ' .. c[1] .. ' "/etc/hostname": the file system is read-only', r.error.message)
      end
    end)
  end)

  it("runs bash in the foreground and the background", function()
    helpers.run(function()
      local r = ok("bash", { command = "echo out; echo err >&2; exit 3", description = "demo" })
      assert.equal("out\nerr\n[exit code 3]", r.text:gsub("%[stderr%]\n", ""))
      assert.equal(3, r.data.exitCode)
      assert.equal("out\n", r.data.stdout.text)
      r = ok("bash", '{"command": "echo serving; exec sleep 60", "timeout": null, "description": null, '
        .. '"run_in_background": true}')
      local id = r.data.id
      assert.equal(1, r.text:find("Started in the background as " .. id .. ".", 1, true))
      local out
      helpers.eventually(function()
        out = ok("bash_output", { bash_id = id })
        return out.text:find("serving", 1, true) ~= nil
      end, 10000, 50)
      assert.equal("serving\n[still running]", out.text)
      assert.equal("stopped " .. id .. " [terminated by SIGTERM]", ok("kill_shell", { shell_id = id }).text)
      r = call("bash_output", { bash_id = "bash-99" })
      assert.equal("BASH_UNKNOWN_PROCESS", r.error.code)
      assert.matches("Use the id bash gave", r.text)
      -- a timeout is a result the model reads, not an error
      r = ok("bash", { command = "sleep 30", timeout = 300 })
      assert.matches("%[timed out after 300 ms%]", r.text)
    end)
  end)

  it("waits for files to change instead of polling", function()
    helpers.run(function()
      assert(ctx.fs:makeDir("out"))
      -- nothing changes: the wait ends at its timeout, saying so
      local r = ok("watch", { path = "out", timeout_ms = 200, recursive = json_null, settle_ms = json_null })
      assert.equal("no change under " .. ctx.e2b.cwd .. "/out within 200 ms", r.text)
      -- a background command keeps writing its log: the call returns with the first changes it sees
      local started = ok("bash", { command = "while :; do date >> out/tick.log; sleep 0.05; done",
        run_in_background = true })
      r = ok("watch", { path = "out", settle_ms = 300 })
      assert.equal(1, r.text:find("changes under " .. ctx.e2b.cwd .. "/out:\n", 1, true), r.text)
      assert.matches("\nwrite tick%.log %(x%d+%)", r.text)
      assert.equal("tick.log", r.data.events[#r.data.events].name)
      ok("kill_shell", { shell_id = started.data.id })
      r = call("watch", { path = "out/tick.log" })
      assert.equal("FS_NOT_DIRECTORY", r.error.code)
      assert.matches("It is not a directory", r.text)
    end)
  end)

  it("drives a terminal with the context's own agent unless the host names one", function()
    helpers.run(function()
      local r = ok("terminal_open", { type = "shell", name = "t1" })
      local id = r.text:match("^started terminal session (pty%-%d+) %(t1%)")
      assert.is_string(id, r.text)
      r = ok("terminal_send", { session_id = id, text = "echo $((6 * 7))" })
      assert.matches("\n42\n", r.text)
      assert.matches("%[wait: stdin_read%]", r.text)
      assert.equal(id .. " (t1) [type: shell] running", ok("terminal_list", "{}").text)
      -- another agent does not see it
      local other = { id = "other" }
      assert.equal("(no terminal sessions)", ok("terminal_list", "{}", { agent = other }).text)
      r = call("terminal_send", { session_id = id, text = "ls" }, { agent = other })
      assert.equal("FOREIGN_SESSION", r.error.code)
      assert.matches("^Error: terminal_send: .*that session belongs to another agent", r.text)
      assert.equal("closed terminal session " .. id, ok("terminal_close", { session_id = id }).text)
    end)
  end)

  it("asks clangd about a file the model wrote, in the workspace by default", function()
    helpers.run(function()
      ok("write", { path = "sq.c", content = "static int square(int x) { return x * x; }\n"
        .. "int main(void) { return square(3); }\n" })
      local r = ok("lsp", { operation = "goToDefinition", file_path = "sq.c", line = 2, character = 26 })
      assert.equal("sq.c:1:12: static int square(int x) { return x * x; }", r.text)
      assert.equal("locations", r.data.kind)
      r = call("lsp", { operation = "hover", file_path = "sq.c", line = 0, character = 1 })
      assert.equal("INVALID_ARGUMENT", r.error.code)
      assert.matches("line must be a positive integer %(one%-based%)", r.text)
    end)
  end)

  it("runs code, with the host's bindings when it gives them", function()
    helpers.run(function()
      local r = ok("run_code", { code = "print('hi')\nreturn {a = 1}", description = "demo" })
      assert.equal('hi\n{\n  "a": 1\n}', r.text)
      assert.same({ a = 1 }, r.data.value)
      r = call("run_code", { code = "error('boom')", description = "fails" })
      assert.equal("CODE_RUN_FAILED", r.error.code)
      assert.matches("^Error: code run failed %(exception%): .*boom", r.text)
      local list = tools.for_context(ctx, { runCode = { bindings = { { global = "host", functions = {
        twice = { fn = function(n) return n * 2 end, doc = "Twice n.", params = { { name = "n", type = "number" } },
          returns = "number" } } } } } })
      assert.matches("%-%-%-Twice n%.\n%-%-%-@param n number\n%-%-%-@return number\nfunction host%.twice%(n%) end",
        list[#list].description)
      r = tools.call(ctx, "run_code", { code = "return host.twice(21)", description = "binding" }, { tools = list })
      assert.equal("42", r.text)
    end)
  end)

  it("answers a model's malformed calls with what was wrong and what the tool takes", function()
    helpers.run(function()
      local cases = {
        { "read", '{"path": "a.txt",}', "Error: read: the arguments are not valid JSON: Expected object key string "
          .. "but found T_OBJ_END at character 18. Parameters: limit (integer, optional); offset (integer, "
          .. "optional); path (string, required)." },
        { "read", '["a.txt"]', "Error: read: the arguments must be a JSON object, got array. Parameters:" },
        { "read", "", 'Error: read: missing required parameter "path". Parameters:' },
        { "read", '{"pth": "a.txt"}', 'Error: read: unknown parameter "pth" (did you mean "path"?). Parameters:' },
        { "read", '{"path": 7}', 'Error: read: "path" must be a string, got integer.' },
        { "read", '{"path": "a", "offset": 0}', 'Error: read: "offset" must be at least 1.' },
        { "bash", '{"command": "  "}', "Error: bash: command must be a non-empty string. Parameters: command" },
        { "terminal_signal", '{"session_id": "pty-1", "signal": "STOP"}',
          'Error: terminal_signal: "signal" must be one of INT, TERM, KILL, TSTP, HUP, got "STOP".' },
        { "run_code", '{"code": "return 1", "description": ""}', "Error: run_code: description must be a non-empty" },
        { "raed", "{}", 'Error: there is no tool "raed" (did you mean "read"?). Available tools: bash, bash_output,' },
      }
      for _, c in ipairs(cases) do
        local r = call(c[1], c[2])
        assert.is_true(r.isError, c[1] .. " " .. c[2])
        assert.equal(c[3], r.text:sub(1, #c[3]))
      end
    end)
  end)

  it("stops at an abort and raises for a host's misuse", function()
    helpers.run(function()
      local ctl = async.controller()
      ctl:abort("user pressed stop")
      local r = call("bash", { command = "touch should-not-exist" }, { signal = ctl.signal })
      assert.equal("ABORTED", r.error.code)
      assert.equal("Error: bash: aborted before it started", r.text)
      assert.is_nil(ctx.fs:stat("should-not-exist"))
      -- aborted while it runs: Bash reports it as a result
      local ctl2 = async.controller()
      async.run(function() -- once the command runs
        helpers.eventually(function()
          return assert(ctx.e2b:exec { "pgrep", "-f", "^dsh-abort-me" }).exit_code == 0
        end, 30000, 20)
        ctl2:abort("stop")
      end)
      r = call("bash", { command = "bash -c 'exec -a dsh-abort-me sleep 30'" }, { signal = ctl2.signal })
      assert.matches("%[aborted%]", r.text)
      local okc, err = pcall(tools.call, ctx.fs, "read", "{}")
      assert.is_false(okc)
      assert.matches("dsh%.tools: call: ctx must be a dsh%.context", err)
    end)
  end)
end)
