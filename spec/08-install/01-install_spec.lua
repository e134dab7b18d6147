-- dsh installed as Lua users install it (issue 20, item 7): `make install
-- PREFIX=...` and `luarocks make --tree ... dsh-scm-1.rockspec` (also with
-- a LuaRocks configuration that wraps scripts, whose wrapper runs lua5.1),
-- each into a temporary tree. From there, with nothing of this clone in
-- sight (no LUA_PATH, no DSH_* variable, the clone's bin not on the PATH,
-- another working directory), `dsh help` prints the usage and `dsh poc`
-- runs the whole proof of concept on a local sandbox.
local helpers = require "helpers"
local proc = require "dsh.core.proc"

local MAKE_CEILING_S = 600 -- a full Release build on a loaded machine: a ceiling, not a guess

-- Run argv with env in cwd; returns exit code, stdout, stderr.
local function run(argv, env, cwd)
  local p = assert(proc.spawn { argv = argv, env = env, cwd = cwd })
  local err_task = require("dsh.async").run(function() return p:read_all("stderr") end)
  local out = p:read_all()
  local err = err_task:await()
  local st = p:wait()
  p:wait_quiescent()
  p:close()
  return st.exit_code, out, err
end

describe("an installed dsh", function()
  local tmp, env
  setup(function()
    tmp = helpers.tmpdir()
    for _, d in ipairs { "home", "state", "work" } do
      assert(os.execute("mkdir -p '" .. tmp .. "/" .. d .. "'") == 0)
    end
    env = { PATH = "/usr/sbin:/usr/bin:/sbin:/bin", HOME = tmp .. "/home", DSH_STATE_DIR = tmp .. "/state",
      DSH_NODE_DIR = require("dsh.node").dir() } -- Code Mode's Node, where this host has it
  end)
  teardown(function() helpers.rm_rf(tmp) end)
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  -- dsh help and dsh poc from prefix/bin/dsh, run from elsewhere.
  local function works(prefix)
    local code, out, err = run({ prefix .. "/bin/dsh", "help" }, env, tmp .. "/work")
    assert.same({ 0, require("dsh.app.cli").USAGE, "" }, { code, out, err })
    code, out, err = run({ prefix .. "/bin/dsh", "poc" }, env, tmp .. "/work")
    assert(code == 0, "dsh poc from " .. prefix .. " exited " .. tostring(code) .. ":\n" .. out .. err)
    assert.matches("\npoc: all %d+ steps passed in ", out)
    code, out = run({ "ls", "-A", tmp .. "/state/sandboxes" }, env)
    assert.same({ 0, "" }, { code, out }) -- the poc left no sandbox
  end

  it("works from make install PREFIX=...", function()
    helpers.run(function()
      local prefix = tmp .. "/prefix"
      local code, out, err = run({ "make", "-s", "-C", helpers.root, "install", "PREFIX=" .. prefix,
        "BUILD=" .. helpers.build }, { PATH = os.getenv("PATH"), HOME = os.getenv("HOME") })
      assert(code == 0, out .. err)
      works(prefix)
    end)
  end)

  it("works from luarocks make --tree ..., with or without LuaRocks' wrapper", function()
    helpers.run(function()
      -- a copy of this tree to build in (luarocks builds in build.luarocks of the current directory)
      local src = tmp .. "/src"
      local code, out, err = run({ "sh", "-c", "mkdir -p \"$1\" && git -C \"$0\" ls-files -co --exclude-standard -z"
        .. " | (cd \"$0\" && tar --null -T - -cf -) | tar -xf - -C \"$1\"", helpers.root, src }, env)
      assert(code == 0, out .. err)
      local rocks_env = { PATH = env.PATH, HOME = env.HOME, CMAKE_BUILD_PARALLEL_LEVEL = "2" }
      local tree = tmp .. "/tree"
      code, out, err = run({ "timeout", tostring(MAKE_CEILING_S), "luarocks", "make", "--tree", tree,
        "dsh-scm-1.rockspec" }, rocks_env, src)
      assert(code == 0, "luarocks make exited " .. tostring(code) .. ":\n" .. out .. err)
      -- the script itself, not a wrapper that would run it under lua5.1
      assert.matches("^#!/usr/bin/env luajit\n", assert(helpers.read_file(tree .. "/bin/dsh")))
      works(tree)
      -- a LuaRocks configured to wrap scripts: its wrapper runs lua5.1, and dsh runs itself under luajit
      local wrapped = tmp .. "/wrapped"
      helpers.write_file(tmp .. "/wrap.lua", "wrap_bin_scripts = true\n")
      rocks_env.LUAROCKS_CONFIG = tmp .. "/wrap.lua"
      code, out, err = run({ "timeout", tostring(MAKE_CEILING_S), "luarocks", "make", "--tree", wrapped,
        "dsh-scm-1.rockspec" }, rocks_env, src)
      assert(code == 0, "luarocks make (wrapped) exited " .. tostring(code) .. ":\n" .. out .. err)
      local wrapper = assert(helpers.read_file(wrapped .. "/bin/dsh"))
      assert.matches("^#!/bin/sh\n", wrapper)
      assert.is_nil(wrapper:find("luajit", 1, true), wrapper) -- another interpreter runs the script
      works(wrapped)
    end)
  end)
end)
