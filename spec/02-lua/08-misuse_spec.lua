-- Misuse raises a message that names the module and the public method the
-- caller called, positioned at the caller's line — here, this file — never
-- inside the library, however deep the check sits.
local async = require "dsh.async"
local context = require "dsh.context"
local fs_local = require "dsh.providers.fs_local"
local helpers = require "helpers"

local HERE = debug.getinfo(1, "S").short_src

-- fn, written on one line, must raise exactly "<this file>:<that line>: <want>".
local function raises_here(want, fn)
  local info = debug.getinfo(fn, "S")
  assert(info.linedefined == info.lastlinedefined, "write the call on one line")
  local ok, err = pcall(fn)
  assert.is_false(ok, "no error raised: " .. want)
  assert.equal(HERE .. ":" .. info.linedefined .. ": " .. want, err)
end

describe("misuse", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("of ctx.fs names the method and points here", function()
    local dir = helpers.tmpdir()
    local fs = fs_local.setup(nil, { root = dir })
    raises_here("dsh.fs: readText: path must be a string, got number", function() fs:readText(42) end)
    raises_here("dsh.fs: listDir: path must be a string, got nil", function() fs:listDir() end)
    raises_here("dsh.fs: readTextStream: path must be a string, got table", function() fs:readTextStream({}) end)
    raises_here("dsh.fs: stat: opts must be a table, got string", function() fs:stat("a", "b") end)
    raises_here("dsh.fs: readBytes: opts.signal must be a dsh.async signal",
      function() fs:readBytes("a", { signal = {} }) end)
    raises_here("dsh.fs: writeText: content must be a string, got nil", function() fs:writeText("a") end)
    raises_here("dsh.fs: writeBytes: opts.replaceIfVersion must be a version string",
      function() fs:writeBytes("a", "x", { replaceIfVersion = 1 }) end)
    raises_here("dsh.fs: editText: oldString must be a string", function() fs:editText("a", { newString = "" }) end)
    raises_here("dsh.fs: contains: path must be a string, got boolean", function() fs:contains("/", true) end)
    local w = assert(fs:writeText("t.txt", "hello"))
    assert.equal("create", w.operation)
    local s = assert(fs:readTextStream("t.txt"))
    s:close()
    raises_here("dsh.fs: next: the stream is closed", function() s:next() end)
    helpers.rm_rf(dir)
  end)

  it("of ctx.subprocess names the method and points here", function()
    helpers.run(function()
      local ctx = context.new():use(require "dsh.providers.subprocess_local")
      assert(ctx:start())
      local sub = ctx.subprocess
      raises_here("dsh.subprocess: spawn: invalid argv: expected a table of strings, got string",
        function() sub:spawn { argv = "ls" } end)
      raises_here("dsh.subprocess: spawn: invalid argv: argv[1] must be a string",
        function() sub:spawn { argv = { "ls", 1 } } end)
      raises_here("dsh.subprocess: spawn: stdio.stdout.maxBytes must be a positive integer",
        function() sub:spawn { argv = { "ls" }, stdio = { stdout = { maxBytes = 0 } } } end)
      raises_here("dsh.subprocess: spawn: env must be a table of name = value",
        function() sub:spawn { argv = { "ls" }, env = "A=1" } end)
      raises_here("subprocess-local: spawn: graceMs must be a positive finite number",
        function() sub:spawn { argv = { "ls" }, graceMs = -1 } end)
      raises_here("dsh.subprocess: spawnTerminal: rows must be an integer in [1, 65535]",
        function() sub:spawnTerminal { argv = { "sh" }, rows = 0 } end)
      local h = assert(sub:spawn { argv = { "cat" }, stdio = { stdin = "pipe", stdout = { maxBytes = 10 } } })
      raises_here("dsh.subprocess: readFrom: subprocess output offset must be a non-negative safe integer",
        function() h.stdout:readFrom(-1) end)
      raises_here("dsh.subprocess: waitForExit: expected an abort signal, got string",
        function() h:waitForExit("soon") end)
      h.stdin:close()
      raises_here("dsh.subprocess: stdin:write: stdin was closed", function() h.stdin:write("x") end)
      assert.same({ exitCode = 0 }, h.done:await())
      assert(ctx:dispose())
    end)
  end)

  it("of dsh.context and ctx.bash names the method and points here", function()
    local ctx = context.new()
    raises_here("dsh.context: services are published by providers; cannot assign ctx.fs",
      function() ctx.fs = {} end)
    ctx:use({ name = "a", provides = "x", setup = function() return {} end })
    raises_here('dsh.context: use: service "x" has been registered (by a); cannot register b',
      function() ctx:use({ name = "b", provides = "x", setup = function() return {} end }) end)
    raises_here("dsh.context: use: config: expected table, got string", function() ctx:use(fs_local, "cfg") end)
    raises_here('fs-local: unknown config key "rot" (did you mean "root"?)',
      function() ctx:use(fs_local, { rot = "/" }) end)
    ctx:dispose()
    raises_here("dsh.context: use: called after dispose()", function() ctx:use(fs_local) end)
    local bash = require("dsh.bash").new { subprocess = { cwd = "/" } }
    raises_here("dsh.bash: run: timeout must be a positive integer number of milliseconds",
      function() bash:run { command = "true", timeout = 0 } end)
    raises_here("dsh.bash: run: command: expected string, got nil", function() bash:run {} end)
    -- an unknown option is named, with the one meant
    raises_here('dsh.bash: run: unknown option "cmd" (did you mean "command"?)', function() bash:run { cmd = "ls" } end)
    raises_here('dsh.bash: run: unknown option "comand" (did you mean "command"?)',
      function() bash:run { comand = "ls" } end)
    raises_here('dsh.bash: run: unknown option "cwd" (did you mean "workdir"?)',
      function() bash:run { command = "ls", cwd = "/" } end)
    raises_here('dsh.bash: start: unknown option "timeout" (options: command, workdir, env, stdin, signal)',
      function() bash:start { command = "ls", timeout = 5 } end)
    raises_here('dsh.bash: run: unknown option "frobnicate" (options: command, timeout, workdir, env, stdin, signal)',
      function() bash:run { command = "ls", frobnicate = true } end)
  end)

  it("of a service before ctx:start() names start() and points here", function()
    local ctx = context.new():use(fs_local, {})
    raises_here("dsh.context: ctx.fs: not set up yet (by fs-local): call ctx:start() first",
      function() return ctx.fs:readText("x") end)
    assert.is_nil(ctx:get("fs"))
    ctx:dispose()
  end)

  it("of a sandbox's envd client after kill points here", function()
    helpers.isolate_state()
    local ok, err = pcall(helpers.run, function()
      local sb = assert(require("dsh.sandbox").create { network = false })
      local p = assert(sb.envd:start { cmd = "/bin/cat", stdin = true })
      assert(sb:kill())
      raises_here("dsh.envd: start: client is closed", function() sb.envd:start { cmd = "/bin/true" } end)
      raises_here("dsh.envd: call: client is closed", function() p:send_stdin("x") end)
      p:close()
    end)
    helpers.restore_state()
    assert(ok, err)
  end)

  it("inside a task points at the task's line too", function()
    local fs = fs_local.setup(nil, {})
    local f = async.run(function() fs:readText(false) end) -- the task raised: its future is rejected
    local ok, err = f:result()
    assert.is_false(ok)
    assert.equal(HERE .. ":" .. (debug.getinfo(1, "l").currentline - 3)
      .. ": dsh.fs: readText: path must be a string, got boolean", err)
  end)
end)
