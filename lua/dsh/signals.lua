--- dsh.signals: the one table of signal names and numbers.
--
-- Numbers are Linux's generic ones (the same on x86-64 and arm64), which is
-- how every sandbox dsh drives numbers them: a local sandbox runs on this
-- host's kernel and E2B's sandboxes are Linux on x86-64. Remote code (envd
-- requests, `kill` run inside a sandbox, exit statuses a wrapper reports)
-- takes its numbers from here and never loads the host process binding
-- (dsh.core.proc) for them. Pure data: no I/O, no FFI.
--
--   signals.number("TERM"), signals.number("sigterm"), signals.number(15) --> 15
--   signals.name(9)                                                        --> "SIGKILL"
local M = {}

local NUMBERS = {
  SIGHUP = 1, SIGINT = 2, SIGQUIT = 3, SIGILL = 4, SIGTRAP = 5, SIGABRT = 6, SIGBUS = 7, SIGFPE = 8,
  SIGKILL = 9, SIGUSR1 = 10, SIGSEGV = 11, SIGUSR2 = 12, SIGPIPE = 13, SIGALRM = 14, SIGTERM = 15,
  SIGSTKFLT = 16, SIGCHLD = 17, SIGCONT = 18, SIGSTOP = 19, SIGTSTP = 20, SIGTTIN = 21, SIGTTOU = 22,
  SIGURG = 23, SIGXCPU = 24, SIGXFSZ = 25, SIGVTALRM = 26, SIGPROF = 27, SIGWINCH = 28, SIGIO = 29,
  SIGPWR = 30, SIGSYS = 31,
}
local NAMES = {}
for name, num in pairs(NUMBERS) do NAMES[num] = name end

--- The number of "SIGTERM", "TERM" (any case) or of a known number; nil when unknown.
---@param sig string|integer
---@return integer|nil
function M.number(sig)
  if type(sig) == "number" then return NAMES[sig] and sig or nil end
  if type(sig) ~= "string" then return nil end
  local up = sig:upper()
  return NUMBERS[up] or NUMBERS["SIG" .. up]
end

--- The name ("SIGTERM") of a number, or of any spelling number() accepts; nil when unknown.
---@param sig integer|string
---@return string|nil
function M.name(sig)
  local num = M.number(sig)
  return num and NAMES[num] or nil
end

--- Every name, in numeric order.
---@return string[]
function M.names()
  local out = {}
  for num = 1, 31 do out[#out + 1] = NAMES[num] end
  return out
end

return M
