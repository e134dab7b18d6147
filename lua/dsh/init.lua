--- dsh: one remote coding world for Lua agent hosts.
--
-- The façade owns the short names: it loads modules on first use, by the
-- name a user knows (dsh.async, dsh.sandbox, dsh.context, the seams dsh.fs,
-- dsh.subprocess, dsh.bash, dsh.pty, dsh.lsp, dsh.code_runtime, dsh.tools,
-- and the bindings of the C core, dsh.loop, dsh.proc, dsh.http, ..., which
-- live in dsh.core.*). Every asynchronous call also works outside a coroutine
-- (it runs the loop until it completes), so this works line by line in the
-- luajit REPL:
--
--   dsh = require "dsh"
--   sb = dsh.sandbox.create()
--   print(sb.envd:start{ cmd = "/bin/echo", args = { "hi" } }:wait().stdout)
--   sb:kill()
local M = { version = "0.1.0" }

-- short name -> the module it loads (the runtime, seams and clients by their
-- own names; the bindings from lua/dsh/core/)
local modules = {}
for _, name in ipairs { "async", "errors", "json", "signals", "schema", "envd", "sandbox", "context", "fs",
  "subprocess", "bash", "pty", "lsp", "code_runtime", "tools" } do
  modules[name] = "dsh." .. name
end
for _, name in ipairs { "loop", "proc", "http", "base64", "frame", "envelope", "envd_events", "lspframe", "utf8",
  "ledger", "sha256" } do
  modules[name] = "dsh.core." .. name
end

setmetatable(M, {
  __index = function(t, name)
    if modules[name] then
      local mod = require(modules[name])
      rawset(t, name, mod)
      return mod
    end
    return nil
  end,
})

-- Load the core library now, so a broken install fails at require time (the
-- loop is the binding every other one stands on).
require "dsh.core.loop"

return M
