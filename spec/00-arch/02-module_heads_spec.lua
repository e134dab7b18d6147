-- Every module opens with a comment saying what it owns: the first line of
-- each Lua file under lua/, providers/ and remote/ (and of bin/dsh, after its
-- #! line; of the runner's JavaScript, in its own comment syntax) is a
-- comment with words in it, not code, a blank line or a tool directive.
local helpers = require "helpers"
local source = require "helpers.source"

-- The problem with the opening of a file (its text src), or nil.
local function head_problem(path, src)
  local first, rest = src:match("^([^\n]*)\n?(.*)$")
  if first:match("^#!") then first = rest:match("^([^\n]*)") end
  local marker = path:match("%.mjs$") and "//" or "%-%-"
  local text = first:match("^" .. marker .. "%-?%s*(.*)$")
  if not text then return path .. ":1 opens with «" .. first .. "», not a comment" end
  if text:match("^luacheck:") then return path .. ":1 opens with a luacheck directive, not what it owns" end
  local words = select(2, text:gsub("%a+", ""))
  if words < 3 then return path .. ":1 opens with «" .. first .. "»: say what the module owns" end
  return nil
end

local function files()
  local out = {}
  for _, dir in ipairs { "lua", "providers", "remote" } do
    for _, p in ipairs(source.files(dir, "%.lua$")) do out[#out + 1] = p end
  end
  for _, p in ipairs(source.files("remote", "%.mjs$")) do out[#out + 1] = p end
  out[#out + 1] = "bin/dsh"
  return out
end

describe("every module's first line", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("is a comment saying what the module owns", function()
    local list, problems = files(), {}
    assert.is_true(#list > 150, "only " .. #list .. " files found")
    for _, p in ipairs(list) do
      problems[#problems + 1] = head_problem(p, source.read(p))
    end
    assert(#problems == 0, #problems .. " files open with no comment saying what they own:\n  "
      .. table.concat(problems, "\n  "))
  end)

  it("fails code, a blank line, a directive or a bare marker in its place", function()
    assert.is_nil(head_problem("lua/dsh/x.lua", "--- dsh.x: the x things and their y.\nlocal M = {}"))
    assert.is_nil(head_problem("bin/dsh", "#!/usr/bin/env luajit\n-- dsh: the command line.\n"))
    assert.is_nil(head_problem("remote/code_runtime/r.mjs", "// code-runtime-runner: runs one program\n"))
    for _, bad in ipairs {
      { "local M = {}\n-- later", "not a comment" },
      { "\n-- dsh.x: owns x", "not a comment" },
      { "-- luacheck: ignore 212\n", "luacheck directive" },
      { "---\n-- dsh.x: owns x", "say what the module owns" },
      { "-- x\n", "say what the module owns" },
    } do
      local got = head_problem("lua/dsh/x.lua", bad[1])
      assert.is_truthy(got and got:find(bad[2], 1, true), tostring(got))
    end
    assert.is_truthy(head_problem("remote/r.mjs", "import x from 'y'\n"):find("not a comment", 1, true))
  end)
end)

describe("the heads check", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("reads the real tree (a file list that missed a folder would hide a file)", function()
    local seen = {}
    for _, p in ipairs(files()) do seen[p] = true end
    for _, p in ipairs { "lua/dsh/init.lua", "lua/dsh/core/loop.lua", "providers/bash/init.lua",
      "remote/code_runtime/supervisor.lua", "remote/code_runtime/runner.mjs", "remote/lsp/watcher.lua" } do
      assert.is_true(seen[p], p)
    end
  end)
end)
