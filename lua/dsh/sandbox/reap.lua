--- dsh.sandbox.reap: end every process of a sandbox and wait until none is left.
--
-- A sandbox's processes are found three ways, each enough on its own: the
-- members of its cgroups, else the processes of its own host uids (root
-- hosts: its root's and its user's), and its pid namespace, which ends with its first process (bubblewrap's
-- pid 1: the kernel kills every other process of the namespace and that
-- process exits only once all of them are gone). With a freezer group the
-- sandbox is frozen first, so nothing can fork while it is being killed.
-- Used by the supervisor when it stops a sandbox and by the host after it,
-- so that pause and kill return only when every process is gone.
local async = require "dsh.async"
local errors = require "dsh.errors"
local limits = require "dsh.sandbox.limits"
local loop = require "dsh.core.loop"
local sys = require "dsh.core.sysutil"
local uids = require "dsh.sandbox.uids"

local M = {}

M.TIMEOUT_MS = 30000

-- The pid of a "pid starttime" record while that process exists, also as a
-- zombie (a recycled pid has another start time).
local function recorded(record)
  local pid, start = (record or ""):match("^(%d+) (%d+)")
  local st = pid and sys.proc_stat(pid)
  if st and st.starttime == start then return tonumber(pid) end
  return nil
end

-- Live pids of the sandbox (first processes by record, so a recycled pid is
-- never taken for one of them).
local function members(rt, uid, uid2)
  local out, seen = {}, {}
  local function add(pid)
    -- a zombie has ended (and a zombie first process means its namespace has)
    if pid and not seen[pid] and pid ~= sys.getpid() and sys.start_time(pid) then
      seen[pid] = true
      out[#out + 1] = pid
    end
  end
  add(sys.live_pid(rt and rt.bwrap))
  -- The namespace's first process counts until it is reaped, zombie or not:
  -- the kernel lets it go only after every other process of the namespace
  -- has been reaped, so "gone" then means no zombie is left either.
  local init = recorded(rt and rt.init)
  if init and not seen[init] then
    seen[init] = true
    out[#out + 1] = init
  end
  -- a process cannot leave its cgroups (the sandbox sees no cgroupfs), so
  -- when there are any they hold every process; else the sandbox's own uid
  if rt and rt.cgroups and next(rt.cgroups) then
    for _, pid in ipairs(limits.pids(rt.cgroups)) do add(pid) end
  elseif uids.ours(uid) or uids.ours(uid2) then
    for _, pid in ipairs(uids.processes(uids.ours(uid) and uid or uid2, uids.ours(uid2) and uid2 or nil)) do
      add(pid)
    end
  end
  return out
end

--- SIGKILL every process of the sandbox and wait (at most timeout_ms) until
-- none is left: true, or nil, err naming what survived.
---@param rt table|nil the runtime record (state.read_runtime)
---@param uid integer|nil a host uid of the sandbox's own (its root's)
---@param uid2 integer|nil its other one (its user's)
function M.all(rt, uid, uid2, timeout_ms)
  local deadline = loop.now_ms() + (timeout_ms or M.TIMEOUT_MS)
  local groups = rt and rt.cgroups
  local thawed = true
  if groups and groups.freezer and limits.freeze(groups, true) then
    thawed = false
    while not limits.frozen(groups) and loop.now_ms() < deadline do async.sleep(1) end
  end
  local left
  while true do
    left = members(rt, uid, uid2)
    for _, pid in ipairs(left) do sys.kill(pid, 9) end
    if not thawed then
      -- frozen tasks die once thawed; none of them could fork meanwhile
      limits.freeze(groups, false)
      thawed = true
    end
    if #left == 0 then return true end
    if loop.now_ms() > deadline then break end
    async.sleep(2)
  end
  return nil, errors.new("internal", "sandbox processes still alive after "
    .. (timeout_ms or M.TIMEOUT_MS) .. " ms: " .. table.concat(left, " ", 1, math.min(#left, 20)))
end

return M
