--- What the fault specs (spec/06-faults) share: one context of every service
-- on a local sandbox, dshd's host pid, and what of a sandbox is left on this
-- host. Not a spec file (busted runs *_spec.lua only).
local D = require "helpers.dshd"
local helpers = require "helpers"
local lfs = require "lfs"
local loop = require "dsh.core.loop"
local lsp = require "dsh.lsp"
local proc = require "dsh.core.proc"
local pty = require "dsh.pty"
local sys = require "dsh.core.sysutil"

local M = {}

M.ISO = "%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ"
M.FIXTURE = "/tmp/fault-lsp-fixture.lua" -- where the fixture language server is put in the sandbox

--- A started context on a new local sandbox with every service: fs, subprocess,
-- bash, pty (shell), codeRuntime and lsp (the fixture server for *.fx files).
-- e2b: extra ctx.e2b config. Call inside a task.
function M.compose(e2b)
  local cfg = { onDispose = "kill" }
  for k, v in pairs(e2b or {}) do cfg[k] = v end
  local ctx = helpers.start_context {
    { require "dsh.providers.e2b", cfg }, require "dsh.providers.fs_e2b",
    require "dsh.providers.subprocess_e2b", { require "dsh.providers.bash", { graceMs = 300 } },
    pty.provider, { require "dsh.providers.pty_e2b", { pollIntervalMs = 25, idleSilenceMs = 500, timeoutMs = 5000,
      disposeGraceMs = 500 } },
    { require "dsh.providers.code_runtime_e2b", { killGraceMs = 300 } },
    lsp.provider, { require "dsh.providers.lsp_e2b", { servers = { fixture = {
      command = "luajit", args = { M.FIXTURE }, extensionToLanguage = { [".fx"] = "fixture" },
      killGraceMs = 300, shutdownTimeoutMs = 1000 } } } },
  }
  local envd = assert(ctx.e2b:getSandbox()).envd
  assert(envd:write_file(M.FIXTURE, assert(helpers.read_file(helpers.root .. "/spec/fixtures/lsp-fixture-server.lua"))))
  return ctx
end

--- A hover query of ctx.lsp on the fixture file at (line, character).
function M.hover(ctx, file, line, character, signal)
  return ctx.lsp:query({ operation = "hover", filePath = file, position = { line = line, character = character },
    workspaceRoot = ctx.e2b.cwd }, signal and { signal = signal } or nil)
end

--- A proxy (spec/fixtures/fault-proxy.mjs) in front of the unix socket
-- upstream: {path=, set(command), stop()}; set("trickle 1 1000"), set("stall"),
-- set("pass") change every connection at once (each acknowledged first).
function M.proxy(upstream)
  local path = helpers.state_dir .. "/fault-proxy.sock"
  local p = assert(proc.spawn { argv = { assert(sys.which("node")), helpers.root .. "/spec/fixtures/fault-proxy.mjs",
    path, upstream }, env = { PATH = os.getenv("PATH") }, stdin = "pipe" })
  assert(p:read() == "ready\n", "the fault proxy did not start")
  local stopped = false
  return {
    path = path,
    set = function(command)
      assert(p:write(command .. "\n"))
      assert(p:read() == "ok\n", "the fault proxy did not acknowledge " .. command)
    end,
    stop = function()
      if stopped then return end
      stopped = true
      p:close_stdin()
      p:wait()
      p:close()
    end,
  }
end

--- SIGKILL the dshd of sandbox id (its host pid); returns the time (loop ms).
function M.kill_dshd(id)
  local pid = assert(D.dshd_pid(id), "no dshd runs for sandbox " .. id)
  assert(sys.kill(pid, 9))
  return loop.now_ms()
end

--- Host processes that belong to sandbox id: its supervisor (whose command
-- line names the id), bubblewrap and everything below (the hostname
-- dsh-<id prefix> on bubblewrap's command line), slirp4netns and dshd under them.
function M.host_processes(id)
  local out = {}
  local tag = "dsh-" .. id:sub(1, 12)
  for name in lfs.dir("/proc") do
    if name:match("^%d+$") then
      local cmd = (sys.read_file("/proc/" .. name .. "/cmdline") or ""):gsub("%z", " ")
      if cmd:find(id, 1, true) or cmd:find(tag, 1, true) then
        out[#out + 1] = tonumber(name)
        for _, p in ipairs(D.descendants(name)) do out[#out + 1] = p end
      end
    end
  end
  return out
end

--- Fails unless nothing of sandbox id is left on this host: no record, no
-- state directory, no process.
function M.assert_nothing_left(id)
  local state = require "dsh.sandbox.state"
  assert(not require("dsh.sandbox").exists(id), "sandbox " .. id .. " still exists")
  assert(not sys.exists(state.dir(id)), "the state directory of " .. id .. " is still there")
  local left = {}
  assert(helpers.eventually(function()
    left = M.host_processes(id)
    return #left == 0
  end, 3000), "host processes of sandbox " .. id .. " left: " .. table.concat(left, ", "))
end

--- Dispose ctx (its sandbox is killed: onDispose = "kill") and check nothing
-- of sandbox id (default: ctx's) is left.
function M.dispose(ctx, id)
  id = id or ctx.e2b:sandboxId()
  local ok, err = ctx:dispose()
  assert(ok, "dispose failed: " .. tostring(err))
  M.assert_nothing_left(id)
end

return M
