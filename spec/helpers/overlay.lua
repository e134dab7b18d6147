--- helpers.overlay: what the overlay specs share (local and on the E2B stand-in).
local context = require "dsh.context"
local overlay = require "dsh.providers.overlay"

local M = {}

M.C_SOURCE = "static int twice(int x) { return 2 * x; }\nint main(void) { return twice(2); }\n"
M.CLANGD = { clangd = { command = "clangd", args = { "--log=error" }, extensionToLanguage = { [".c"] = "c" },
  shutdownTimeoutMs = 1000, killGraceMs = 500 } }

--- A context composed by the overlay with cfg and started; raises at the caller when it does not start.
function M.start(cfg)
  local ctx = context.new()
  ctx:use(overlay, cfg)
  local ok, err = ctx:start()
  if not ok then
    ctx:dispose()
    error("the overlay did not start: " .. tostring(err), 2)
  end
  return ctx
end

--- Send a line to terminal id as agent and wait for the answer.
function M.send(ctx, agent, id, text)
  return assert(assert(ctx.pty:startSend(agent, id, { text = text, submit = true })):wait())
end

--- The lines of `ps -eo args=` output, but for the daemon and the ps itself.
function M.processes(ps_output)
  local out = {}
  for line in ps_output:gmatch("[^\n]+") do
    if not line:match("^ps %-eo") and not line:match("dshd") then out[#out + 1] = line end
  end
  return out
end

return M
