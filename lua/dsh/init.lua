--- dsh: one remote coding world for Lua agent hosts.
--
-- The façade loads modules on first use: dsh.async, dsh.proc, dsh.http,
-- dsh.envd, dsh.sandbox, dsh.context, the seams (dsh.fs, dsh.subprocess,
-- dsh.bash, dsh.pty, dsh.lsp, dsh.code_runtime), dsh.tools, ... Every
-- asynchronous call also works outside a coroutine (it runs the loop until it
-- completes), so this works line by line in the luajit REPL:
--
--   dsh = require "dsh"
--   sb = dsh.sandbox.create()
--   print(sb.envd:start{ cmd = "/bin/echo", args = { "hi" } }:wait().stdout)
--   sb:kill()
local M = { version = "0.1.0" }

local modules = {
  async = true, loop = true, errors = true, json = true, proc = true, http = true,
  envd = true, sandbox = true, context = true, fs = true, subprocess = true, bash = true,
  base64 = true, frame = true, envelope = true, envd_events = true, lspframe = true, utf8 = true, ledger = true,
  sha256 = true, signals = true, schema = true, pty = true, lsp = true, code_runtime = true, tools = true,
}

setmetatable(M, {
  __index = function(t, name)
    if modules[name] then
      local mod = require("dsh." .. name)
      rawset(t, name, mod)
      return mod
    end
    return nil
  end,
})

-- Load the core library now, so a broken install fails at require time.
require "dsh._ffi"

return M
