--- dsh.sandbox.cgroups: a local sandbox's control groups, on cgroup v1 or v2.
--
-- A sandbox's groups are children of the supervisor's own group, named
-- dsh-<id>: whatever accounts for the creator of a sandbox also accounts for
-- the sandbox, and nothing is moved out of a group someone else manages.
--   v1  one group per controller: pids, memory, cpu, freezer, cpuacct
--   v2  one group in the unified hierarchy; pids, memory and cpu where the
--       parent has them in cgroup.subtree_control (or lets dsh add them: on
--       a delegated subtree, or the root group); freezing (cgroup.freeze)
--       and membership need no controller
-- A host with both (hybrid) uses v1 when it offers any of the four
-- controllers, else v2; DSH_CGROUP=v1|v2 chooses (for hosts where both work,
-- and for testing the v2 path on a hybrid host).
-- groups (the runtime record's `cgroups`) maps controller -> directory for
-- v1 and {unified = dir} for v2; every function here takes either.
local lfs = require "lfs"
local sys = require "dsh.core.sysutil"

local M = {}

M.V1 = { "pids", "memory", "cpu", "freezer", "cpuacct" } -- cpuacct: CPU time for metrics
M.V2 = { "pids", "memory", "cpu" }
M.CFS_PERIOD_US = 100000

--- A kernel file's text (the first 64 KiB: cgroup and /proc files are
--- small), or nil when it cannot be read.
function M.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read(65536)
  f:close()
  return s
end
local read = M.read

local function write(path, value)
  local f, err = io.open(path, "w")
  if not f then return nil, err end
  local ok, werr = f:write(value)
  local cok, cerr = f:close()
  if not ok or not cok then return nil, tostring(werr or cerr) end
  return true
end

-- Mounts of cgroup hierarchies: {v1 = {controller = {point, root}}, v2 = {point, root}}.
local function mounts()
  local out = { v1 = {} }
  for line in (read("/proc/self/mountinfo") or ""):gmatch("[^\n]+") do
    local root, point, rest = line:match("^%S+ %S+ %S+ (%S+) (%S+) .- %- (.*)$")
    local fstype, opts = (rest or ""):match("^(%S+) %S+ (%S+)")
    if fstype == "cgroup" and opts:match("^rw") then
      for opt in opts:gmatch("[^,]+") do
        if not out.v1[opt] then out.v1[opt] = { point = point, root = root } end
      end
    elseif fstype == "cgroup2" and opts:match("^rw") and not out.v2 then
      out.v2 = { point = point, root = root }
    end
  end
  return out
end

-- The directory of path (from /proc/self/cgroup) under mount m, when this
-- process may create groups in it.
local function own_dir(m, path)
  if not m or not (m.root == "/" or path:sub(1, #m.root) == m.root) then return nil end
  local rel = m.root == "/" and path or path:sub(#m.root + 1)
  local dir = (m.point .. rel):gsub("/+$", "")
  local attr = lfs.attributes(dir)
  if attr and attr.mode == "directory" and (attr.uid == sys.getuid() or sys.getuid() == 0) then return dir end
  return nil
end

--- This process's own groups: {v1 = {controller = dir}, v2 = dir|nil}.
function M.own()
  local m = mounts()
  local out = { v1 = {} }
  for line in (read("/proc/self/cgroup") or ""):gmatch("[^\n]+") do
    local names, path = line:match("^%d+:([^:]*):(.*)$")
    if names == "" then
      out.v2 = own_dir(m.v2, path)
    else
      for name in (names or ""):gmatch("[^,]+") do out.v1[name] = own_dir(m.v1[name], path) end
    end
  end
  return out
end

-- v2: the controllers children of dir may use, enabling the missing ones
-- where the parent lets us (false where it does not).
local function v2_controllers(dir, enable)
  local have = {}
  for c in (read(dir .. "/cgroup.controllers") or ""):gmatch("%S+") do have[c] = true end
  local on = {}
  for c in (read(dir .. "/cgroup.subtree_control") or ""):gmatch("%S+") do on[c] = true end
  local out = {}
  for _, c in ipairs(M.V2) do
    if have[c] and not on[c] and enable then on[c] = write(dir .. "/cgroup.subtree_control", "+" .. c) ~= nil end
    out[c] = have[c] and on[c] or false
  end
  return out
end

--- Which hierarchy this host gives a sandbox, and the controllers it has:
-- "v1"|"v2"|nil, {pids=, memory=, cpu=, freezer=}. enable: on v2, switch on
-- missing controllers in our group's subtree_control (only the supervisor).
function M.available(enable)
  local own = M.own()
  local force = os.getenv("DSH_CGROUP")
  local any1 = false
  for _, c in ipairs(M.V1) do any1 = any1 or own.v1[c] ~= nil end
  if any1 and force ~= "v2" then
    local out = {}
    for _, c in ipairs(M.V1) do out[c] = own.v1[c] ~= nil end
    return "v1", out, own
  end
  if own.v2 and force ~= "v1" then
    local out = v2_controllers(own.v2, enable)
    out.freezer = true
    return "v2", out, own
  end
  return nil, {}, own
end

--- The group directories of sandbox id under this process's own groups.
function M.paths(id, version, controllers)
  local own = M.own()
  local out = {}
  if version == "v2" then
    if own.v2 then out.unified = own.v2 .. "/dsh-" .. id end
    return out
  end
  for _, c in ipairs(controllers or {}) do
    if own.v1[c] then out[c] = own.v1[c] .. "/dsh-" .. id end
  end
  return out
end

-- Limit files of one controller: {file, value} pairs.
local function settings(version, c, plan)
  if c == "pids" then
    return { { version == "v2" and "pids.max" or "pids.max", tostring(plan.maxProcesses) } }
  elseif c == "memory" and plan.memoryMb then
    local bytes = string.format("%d", plan.memoryMb * 1048576)
    if version == "v2" then return { { "memory.max", bytes }, { "memory.swap.max", "0", optional = true } } end
    -- swap too, where swap is accounted (memsw must not be below the limit)
    return { { "memory.limit_in_bytes", bytes }, { "memory.memsw.limit_in_bytes", bytes, optional = true } }
  elseif c == "cpu" and plan.cpus then
    local quota = string.format("%d", math.ceil(plan.cpus * M.CFS_PERIOD_US))
    if version == "v2" then return { { "cpu.max", quota .. " " .. M.CFS_PERIOD_US } } end
    return { { "cpu.cfs_period_us", tostring(M.CFS_PERIOD_US) }, { "cpu.cfs_quota_us", quota } }
  end
  return {}
end

--- Create the groups of a sandbox and set its limits; returns groups or nil,
-- message. Groups left over from an earlier run are reused.
function M.create(id, plan)
  local version = plan.cgroup_version or "v1"
  local groups = M.paths(id, version, plan.cgroups)
  for key, dir in pairs(groups) do
    if not sys.is_dir(dir) then
      local ok, err = lfs.mkdir(dir)
      if not ok then return nil, "cannot create cgroup " .. dir .. ": " .. tostring(err) end
    end
    local controllers = version == "v2" and plan.cgroups or { key }
    for _, c in ipairs(controllers) do
      for _, s in ipairs(settings(version, c, plan)) do
        local path = dir .. "/" .. s[1]
        if not (s.optional and not sys.exists(path)) then
          local ok, err = write(path, s[2])
          if not ok then return nil, "cannot set " .. path .. ": " .. tostring(err) end
        end
      end
    end
  end
  return groups
end

--- The cgroup.procs files a process writes itself into to join them all.
function M.procs_files(groups)
  local out = {}
  for _, d in pairs(groups or {}) do out[#out + 1] = d .. "/cgroup.procs" end
  table.sort(out)
  return out
end

--- The pids in the sandbox's groups (every group holds all of them).
function M.pids(groups)
  local out, seen = {}, {}
  for _, dir in pairs(groups or {}) do
    for pid in (read(dir .. "/cgroup.procs") or ""):gmatch("%d+") do
      if not seen[pid] then
        seen[pid] = true
        out[#out + 1] = tonumber(pid)
      end
    end
  end
  return out
end

local function freezer_of(groups)
  if not groups then return nil end
  if groups.freezer then return groups.freezer, "v1" end
  if groups.unified then return groups.unified, "v2" end
  return nil
end

--- Freeze (true) or thaw (false) the sandbox when it has a freezer; true once
-- asked (or when there is none), false when the freezer refused.
function M.freeze(groups, on)
  local dir, version = freezer_of(groups)
  if not dir or not sys.is_dir(dir) then return true end
  if version == "v2" then return write(dir .. "/cgroup.freeze", on and "1" or "0") ~= nil end
  return write(dir .. "/freezer.state", on and "FROZEN" or "THAWED") ~= nil
end

--- True when a freeze asked for has taken hold (or there is no freezer).
function M.frozen(groups)
  local dir, version = freezer_of(groups)
  if not dir then return true end
  if version == "v2" then
    local events = read(dir .. "/cgroup.events")
    return events == nil or events:match("frozen 1") ~= nil
  end
  return (read(dir .. "/freezer.state") or ""):match("^%u+") ~= "FREEZING"
end

--- True when the sandbox's freezer holds it stopped (FROZEN), the way a
-- host or an operator may stop it from outside.
function M.is_frozen(groups)
  local dir, version = freezer_of(groups)
  if not dir then return false end
  if version == "v2" then return (read(dir .. "/cgroup.freeze") or ""):match("^1") ~= nil end
  return (read(dir .. "/freezer.state") or ""):match("^%u+") == "FROZEN"
end

--- Remove the sandbox's (empty) groups; true when none is left.
function M.remove(groups)
  local all = true
  for _, dir in pairs(groups or {}) do
    if sys.is_dir(dir) and not lfs.rmdir(dir) then all = false end
  end
  return all
end

return M
