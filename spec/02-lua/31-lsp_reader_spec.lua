-- The source reader (remote/lsp/source-reader.lua) run for real through
-- subprocess-local, and the host side's checks of what a reader answers
-- (against spec/fixtures/lsp-hostile-reader.lua, a reader that lies).
local async = require "dsh.async"
local helpers = require "helpers"
local config = require "dsh.lsp._config"
local lsp = require "dsh.lsp"
local provider = require "dsh.lsp._provider"
local reader = require "dsh.lsp._reader"

local function q(s)
  return "'" .. s:gsub("'", [['\'']]) .. "'"
end

local function sh(cmd)
  local p = io.popen("bash -c " .. q(cmd .. " 2>&1; echo __rc=$?"))
  local out = p:read("*a")
  p:close()
  return tonumber(out:match("__rc=(%d+)")), out
end

-- fn(reader, dir, ctx) with a started subprocess-local context and a fresh directory.
local function with_reader(fn, program)
  helpers.run(function()
    local dir = helpers.tmpdir()
    local p = io.popen("realpath " .. q(dir))
    dir = p:read("*l")
    p:close()
    local ok, err = pcall(helpers.with_context, { require "dsh.providers.subprocess_local" }, function(ctx)
      local r = reader.new { name = "lsp-local", subprocess = ctx.subprocess, luajit = "/usr/bin/luajit",
        maxBytes = 64, graceMs = 500, program = program }
      local rok, rerr = xpcall(fn, debug.traceback, r, dir, ctx)
      r:close()
      if not rok then error(rerr, 0) end
    end)
    helpers.rm_rf(dir)
    assert(ok, err)
  end)
end

local function fails(code, message, v, err)
  assert.is_nil(v, "expected a failure")
  assert.equal(code, err.code, tostring(err))
  if message then assert.equal(message, err.message) end
end

describe("the LSP source reader", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("resolves canonically and tells what is there", function()
    with_reader(function(r, dir)
      assert.equal(0, (sh("cd " .. q(dir) .. " && mkdir d && echo x > f && ln -s f l && mkfifo p && ln -s gone dl")))
      local res = assert(r:resolve { dir .. "/d/..", dir .. "/l", dir .. "/p", dir .. "/missing", dir .. "/dl" })
      assert.same({
        { kind = "dir", path = dir }, { kind = "file", path = dir .. "/f" }, { kind = "other", path = dir .. "/p" },
        { kind = "error", message = "No such file or directory" },
        { kind = "error", message = "No such file or directory" },
      }, res)
    end)
  end)

  it("reads regular files without following a final symlink, bounded, and says when they are unchanged", function()
    with_reader(function(r, dir)
      helpers.write_file(dir .. "/a", "你好 🙂\n")
      assert.equal(0, (sh("cd " .. q(dir) .. " && ln -s a link && mkdir d && mkfifo p && head -c 65 /dev/zero > big")))
      local a = assert(r:read(dir .. "/a", 64))
      assert.equal("ok", a.kind)
      assert.equal("你好 🙂\n", a.text)
      local same = assert(r:read(dir .. "/a", 64, a.token))
      assert.same({ kind = "same", token = a.token }, same)
      helpers.write_file(dir .. "/a", "你好 🙂!\n") -- same size class, new content
      local b = assert(r:read(dir .. "/a", 64, a.token))
      assert.equal("ok", b.kind)
      assert.equal("你好 🙂!\n", b.text)
      assert.are_not.equal(a.token, b.token)
      assert.equal("open-error", assert(r:read(dir .. "/link", 64)).kind)
      assert.matches("[Tt]oo many levels of symbolic links", assert(r:read(dir .. "/link", 64)).message)
      assert.same({ kind = "not-file" }, assert(r:read(dir .. "/d", 64)))
      assert.same({ kind = "not-file" }, assert(r:read(dir .. "/p", 64))) -- a FIFO does not block it
      assert.same({ kind = "oversize", size = 65 }, assert(r:read(dir .. "/big", 64)))
      -- /proc files claim size 0 and hold more: that is "grew"
      assert.same({ kind = "grew" }, assert(r:read("/proc/" .. r._p.h.pid .. "/status", 64)))
      local missing = assert(r:read(dir .. "/missing", 64))
      assert.same({ kind = "open-error", message = "No such file or directory" }, missing)
    end)
  end)

  it("refuses a file reached through a directory swapped for a symlink", function()
    with_reader(function(r, dir)
      assert.equal(0, (sh("cd " .. q(dir) .. " && mkdir real && echo hi > real/f && ln -s real alias")))
      local res = assert(r:read(dir .. "/alias/f", 64))
      assert.equal("open-error", res.kind)
      assert.equal("the file opened is " .. dir .. "/real/f, not the one named", res.message)
    end)
  end)

  it("restarts after dying; tokens of an earlier reader are never answered 'same'", function()
    with_reader(function(r, dir)
      helpers.write_file(dir .. "/a", "one")
      local a = assert(r:read(dir .. "/a", 64))
      local h = r._p.h
      h:terminate()
      assert.same({ signal = "SIGTERM" }, h.done:await())
      local b = assert(r:read(dir .. "/a", 64, a.token))
      assert.equal("ok", b.kind)
      assert.equal("one", b.text)
      assert.are_not.equal(a.token, b.token)
    end)
  end)

  it("checks every answer of a reader that lies", function()
    local hostile = assert(helpers.read_file(helpers.root .. "/spec/fixtures/lsp-hostile-reader.lua"))
    with_reader(function(r, dir)
      local name = "reader "
      assert.same({ kind = "ok", text = "fine", token = "1:1" }, assert(r:read(dir .. "/fine", 64)))
      fails("LSP_READER_FAILED", name .. "returned invalid bounded bytes", r:read(dir .. "/short", 64))
      fails("LSP_READER_FAILED", name .. "returned invalid bounded bytes", r:read(dir .. "/long", 20))
      fails("LSP_READER_FAILED", name .. "returned an invalid response", r:read(dir .. "/shape", 64))
      fails("LSP_READER_FAILED", name .. "returned an invalid response", r:read(dir .. "/same", 64, "1:5"))
      -- these break the stream: the reader is killed, restarted for the next request, killed again
      fails("LSP_READER_FAILED", name .. "returned an invalid response", r:read(dir .. "/noid", 64))
      fails("LSP_READER_FAILED", name .. "returned an invalid response (LSP message has a missing or invalid "
        .. "Content-Length)", r:read(dir .. "/frame", 64))
      fails("LSP_READER_FAILED", name .. "exited: hostile reader: leaving", r:read(dir .. "/exit", 64))
      assert.equal("fine", assert(r:read(dir .. "/fine", 64)).text)
    end, hostile)
  end)

  it("tells a provider's caller which source a lying reader was asked about", function()
    local hostile = assert(helpers.read_file(helpers.root .. "/spec/fixtures/lsp-hostile-reader.lua"))
    with_reader(function(r, dir, ctx)
      local server = config.validate("lsp-local", { servers = { fx = {
        command = "luajit", extensionToLanguage = { [".fx"] = "fx" } } } }).servers.fx
      server.argv = { "/usr/bin/luajit", helpers.root .. "/spec/fixtures/lsp-fixture-server.lua" }
      local p = provider.new { prefix = "lsp-local", where = "", server = server, subprocess = ctx.subprocess,
        reader = r, uri_of = lsp.uri.from_path }
      local function ask(file)
        return p:query { operation = "hover", filePath = file, position = { line = 0, character = 0 },
          workspaceRoot = dir }
      end
      fails("LSP_READER_FAILED", 'source "short" reader returned invalid bounded bytes', ask("short"))
      fails("LSP_READER_FAILED", 'source "shape" reader returned an invalid response', ask("shape"))
      fails("LSP_READER_FAILED", 'source "exit" reader exited: hostile reader: leaving', ask("exit"))
      assert.equal("word `fine` at 0:0", assert(ask("fine")).hover.contents)
      p:disposeAll()
    end, hostile)
  end)

  it("answers concurrent requests by id and honours an abort", function()
    with_reader(function(r, dir)
      for i = 1, 5 do helpers.write_file(dir .. "/f" .. i, ("x"):rep(i)) end
      local fs = {}
      for i = 1, 5 do fs[i] = async.run(function() return r:read(dir .. "/f" .. i, 64) end) end
      for i = 1, 5 do assert.equal(("x"):rep(i), fs[i]:await().text) end
      local ctl = async.controller()
      ctl:abort("stop")
      local v, err = r:read(dir .. "/f1", 64, nil, ctl.signal)
      fails("ABORTED", "stop", v, err)
    end)
  end)
end)
