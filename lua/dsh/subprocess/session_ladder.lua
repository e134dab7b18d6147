--- dsh.subprocess.session_ladder: how a terminal's session is closed
-- (reference §2.4 "close", §4 "Kill ladders"), written once for every
-- backend that runs terminals (dsh.subprocess terminals, pty-local).
--
-- TERM (then CONT, so a stopped job sees it) to every process group of the
-- session; wait up to grace_ms for every job — each group but the shell's —
-- to end; then hang up the shell when no job is left, or KILL the whole
-- session when one outlived the grace (an interactive shell ignores TERM, so
-- waiting the grace for it would only make every close slow); KILL the
-- session if the shell has not ended grace_ms later; last, wait up to
-- grace_ms (KILLing what is left each round) until the session is empty.
-- The caller gives the primitives:
--   p.groups()       → process groups (pgids) with a live member in the session, the shell's
--                      included | nil, err (unknown: the ladder goes on without waiting for jobs)
--   p.signal(sig)    sig to every group of the session ("SIGTERM" also sends SIGCONT)
--   p.hangup()       SIGHUP to the shell's group
--   p.ended(ms)      → true once the shell ended, waiting at most ms
--   p.quiet(ms)      → true once the shell's group is empty, waiting at most ms | false | nil, err
local async = require "dsh.async"
local loop = require "dsh.core.loop"

local M = {}

-- fn() until it returns true or ms passed, backing off from 2 to 100 ms:
-- nothing reports the end of a job of another group, so it is looked at.
local function poll(ms, fn)
  local deadline = loop.now_ms() + ms
  local delay = 2
  while true do
    if fn() then return true end
    local left = deadline - loop.now_ms()
    if left <= 0 then return false end
    async.sleep(math.min(delay, left))
    delay = math.min(delay * 2, 100)
  end
end
M.poll = poll

-- The jobs of groups (every group but the leader's), sorted.
local function jobs_of(groups, leader)
  local out = {}
  for _, g in ipairs(groups) do
    if g ~= leader then out[#out + 1] = g end
  end
  table.sort(out)
  return out
end

--- Close the session led by leader (its pid, group and session id).
--- Returns true once nothing of it is left, or nil and what survived
--- ("surviving process groups: 12, 34", or "surviving pid: <leader>").
---@param leader integer
---@param grace_ms integer
---@param p table  the primitives (see the module comment)
---@return true|nil, string|nil
function M.close(leader, grace_ms, p)
  p.signal("SIGTERM")
  local jobs
  poll(grace_ms, function()
    local groups = p.groups()
    jobs = groups and jobs_of(groups, leader)
    return not jobs or #jobs == 0
  end)
  if jobs and #jobs > 0 then
    p.signal("SIGKILL")
  else
    p.hangup()
  end
  if not p.ended(grace_ms) then p.signal("SIGKILL") end
  local quiet, qerr = p.quiet(grace_ms)
  local left
  poll(grace_ms, function()
    local groups = p.groups()
    if not groups then return true end -- unknowable here (no way to list the session): the shell's group decides
    left = groups
    if #groups == 0 then return true end
    p.signal("SIGKILL")
    return false
  end)
  if left and #left > 0 then
    table.sort(left)
    if #left == 1 and left[1] == leader then return nil, "surviving pid: " .. leader end
    return nil, "surviving process groups: " .. table.concat(left, ", ")
  end
  if not quiet then
    return nil, "surviving pid: " .. leader .. (qerr and (" (" .. tostring(qerr.message or qerr) .. ")") or "")
  end
  return true
end

return M
