--- dsh.pty.config: the configuration every PTY backend takes (reference §2.4
-- "pty-e2b config"), validated once, with the reference's messages.
--
-- Numbers are positive safe integers (`<prefix>: <key> must be a positive safe
-- integer`); backendType is non-empty; maxReadBytes <= scrollbackMaxBytes.
-- Beyond the reference: `shell` (the argv of the shell), `term` (the TERM the
-- shell gets; "dumb" as the reference sets), `maxPending` (the sanitizer's
-- bound on a sequence held across chunks) and `rows`/`cols` at most 1000 (the
-- screen's bound).
local errors = require "dsh.errors"
local schema = require "dsh.schema"

local M = {}

M.DEFAULTS = {
  backendType = "shell",
  rows = 40,
  cols = 160,
  scrollbackLines = 10000,
  scrollbackMaxBytes = 4194304,
  maxReadBytes = 262144,
  pollIntervalMs = 50,
  idleSilenceMs = 3000,
  timeoutMs = 30000,
  disposeGraceMs = 3000,
  maxPending = 4096,
  term = "dumb",
}
M.DEFAULT_SHELL = { "/bin/bash", "--noprofile", "--norc", "-i" }
M.NUMBERS = {
  "rows", "cols", "scrollbackLines", "scrollbackMaxBytes", "maxReadBytes", "pollIntervalMs",
  "idleSilenceMs", "timeoutMs", "disposeGraceMs", "maxPending",
}
local function fail(prefix, msg)
  errors.misuse(prefix, "%s", msg)
end

--- Every key a PTY provider takes: shell, the DEFAULTS' keys and extra's
--- (name -> true), sorted.
---@param extra table|nil
---@return string[]
function M.keys(extra)
  local out = { "shell" }
  for k in pairs(M.DEFAULTS) do out[#out + 1] = k end
  for k in pairs(extra or {}) do out[#out + 1] = k end
  table.sort(out)
  return out
end

--- Validate cfg for the provider named prefix; returns a new table with the
--- defaults filled in. Raises with the reference's messages. extra: keys the
--- provider adds (name -> true), accepted as they are.
---@param prefix string e.g. "pty-e2b"
---@param cfg table
---@param extra table|nil
---@return table
function M.validate(prefix, cfg, extra)
  schema.keys(prefix, cfg, M.keys(extra))
  local out = {}
  for k, v in pairs(cfg) do out[k] = v end
  for k, v in pairs(M.DEFAULTS) do
    if out[k] == nil then out[k] = v end
  end
  if type(out.backendType) ~= "string" or out.backendType == "" then
    fail(prefix, "backendType must be a non-empty string")
  end
  for _, k in ipairs(M.NUMBERS) do schema.positive(prefix, k, out[k]) end
  for _, k in ipairs { "rows", "cols" } do
    if out[k] > 1000 then fail(prefix, k .. " must be at most 1000") end
  end
  if out.maxReadBytes > out.scrollbackMaxBytes then
    fail(prefix, "maxReadBytes must be at most scrollbackMaxBytes")
  end
  if type(out.term) ~= "string" or out.term == "" then fail(prefix, "term must be a non-empty string") end
  local shell = out.shell or M.DEFAULT_SHELL
  if type(shell) ~= "table" or type(shell[1]) ~= "string" or shell[1] == "" then
    fail(prefix, "shell must be a non-empty list of strings (the shell's argv)")
  end
  for i = 1, #shell do
    if type(shell[i]) ~= "string" then fail(prefix, "shell must be a non-empty list of strings") end
  end
  out.shell = { unpack(shell) }
  return out
end

return M
