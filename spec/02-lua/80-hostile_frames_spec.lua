-- docs/hostile-frames.md is executable: every row's peer (a language server
-- or a Code Mode runner) is spec/fixtures/hostile-peer.lua started through a
-- real subprocess-local, playing the protocol up to the row's moment and then
-- sending the row's bytes; the host side is dsh's own engine (the LSP
-- provider with the real source reader, or the code runtime service). The
-- outcome must be the table's, and afterwards every process the row started
-- is gone (helpers.assert_clean) and the host serves the next row.
local async = require "dsh.async"
local code_runtime = require "dsh.code_runtime"
local config = require "dsh.lsp._config"
local helpers = require "helpers"
local lsp = require "dsh.lsp"
local provider = require "dsh.lsp._provider"
local reader = require "dsh.lsp._reader"

local TABLE = helpers.root .. "/docs/hostile-frames.md"
local PEER = helpers.root .. "/spec/fixtures/hostile-peer.lua"
local LUAJIT = "/usr/bin/luajit"
local QUERY_MS = 5000 -- the caller's patience: a row that would hang shows as ABORTED

--- The rows: {n=, peer=, stage=, steps={{op, arg}...}, outcome=}.
local function read_table()
  local rows = {}
  for line in assert(helpers.read_file(TABLE), "no " .. TABLE):gmatch("[^\n]+") do
    local n, peer, stage, sends, outcome = line:match("^| (%d+) | (%w+) | ([%w-]+) | (.-) | `(.-)` |$")
    if n then
      local steps = {}
      for span in sends:gmatch("`(.-)`") do
        local op, arg = span:match("^(%S+) ?(.*)$")
        steps[#steps + 1] = { op, arg }
      end
      rows[#rows + 1] = { n = tonumber(n), peer = peer, stage = stage, steps = steps, outcome = outcome }
    end
  end
  return rows
end

--- The bytes a step's argument stands for ({id} stays for the peer to fill).
local function expand(s)
  s = s:gsub("\\x(%x%x)", function(h) return string.char(tonumber(h, 16)) end)
  s = s:gsub("\\r", "\r"):gsub("\\n", "\n"):gsub("\\\\", "\\")
  return (s:gsub("{(%d+)%*(.-)}", function(n, c) return c:rep(tonumber(n)) end))
end

local function write_plan(path, row)
  local parts = { "return { stage = " .. string.format("%q", row.stage) .. "," }
  for _, s in ipairs(row.steps) do
    parts[#parts + 1] = string.format("{ %q, %q },", s[1], expand(s[2]))
  end
  parts[#parts + 1] = "}"
  helpers.write_file(path, table.concat(parts, "\n"))
end

local function lsp_outcome(dir, ctx, row)
  write_plan(dir .. "/plan.lua", row)
  helpers.write_file(dir .. "/a.fx", "word\n")
  local server = config.validate("lsp-local", { servers = { hostile = {
    command = "luajit", extensionToLanguage = { [".fx"] = "fx" }, maxMessageBytes = 100000,
    killGraceMs = 300, shutdownTimeoutMs = 500 } } }).servers.hostile
  server.argv = { LUAJIT, PEER, "lsp", dir .. "/plan.lua" }
  local r = reader.new { name = "lsp-local", subprocess = ctx.subprocess, luajit = LUAJIT, maxBytes = 4096,
    graceMs = 300 }
  local p = provider.new { prefix = "lsp-local", where = "", server = server, subprocess = ctx.subprocess,
    reader = r, uri_of = lsp.uri.from_path }
  local ctl = async.controller()
  local timer = async.run(function() async.sleep(QUERY_MS, ctl.signal) ctl:abort("caller gave up") end)
  local res, err = p:query({ operation = "hover", filePath = "a.fx", position = { line = 0, character = 0 },
    workspaceRoot = dir }, ctl.signal)
  ctl:abort("done")
  timer:await()
  p:disposeAll()
  r:close()
  if res then return "hover: " .. tostring(res.hover and res.hover.contents) end
  return err.code .. ": " .. err.message
end

local function runner_outcome(dir, ctx, row)
  write_plan(dir .. "/plan.lua", row)
  helpers.write_file(dir .. "/code-runtime-supervisor.lua", assert(helpers.read_file(PEER)))
  local backend = {
    name = "code-runtime-hostile", label = "local runtime", subprocess = ctx.subprocess, cwd = dir,
    prepare = function(_, check)
      local ok, err = check()
      if not ok then return nil, err end
      return { root = dir, luajit = LUAJIT }
    end,
  }
  local svc = code_runtime.service(backend, code_runtime.validate_config("code-runtime-hostile", {
    maxWallMs = QUERY_MS, killGraceMs = 300, maxOutputBytes = 4096, maxFrameBytes = 65536 }))
  local r = svc:run { program = "x", bindings = { { global = "bridge", functions = {
    double = function(x) return 2 * x end } } } }
  svc:dispose()
  local out = r.error and (r.error.kind .. ": " .. r.error.message) or ("value: " .. tostring(r.value))
  if #r.logs > 0 then out = string.format("%s; logs: %d, %d bytes", out, #r.logs, #table.concat(r.logs)) end
  return out
end

describe("docs/hostile-frames.md", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("lists at least 30 frames, numbered in order, each with steps and an outcome", function()
    local rows = read_table()
    assert.is_true(#rows >= 30, #rows .. " rows")
    for i, r in ipairs(rows) do
      assert.equal(i, r.n)
      assert.truthy(r.peer == "lsp" or r.peer == "runner", r.peer)
      assert.truthy(#r.steps > 0, "row " .. i .. ": no steps")
    end
  end)

  for _, row in ipairs(read_table()) do
    it(string.format("#%d (%s) gives %s", row.n, row.peer, row.outcome), function()
      helpers.run(function()
        local dir = helpers.tmpdir()
        local p = io.popen("realpath '" .. dir .. "'")
        dir = p:read("*l")
        p:close()
        local ok, got = pcall(helpers.with_context, { require "dsh.providers.subprocess_local" }, function(ctx)
          local fn = row.peer == "lsp" and lsp_outcome or runner_outcome
          return fn(dir, ctx, row)
        end)
        helpers.rm_rf(dir)
        assert(ok, got)
        assert.equal(row.outcome, got)
      end)
    end)
  end
end)
