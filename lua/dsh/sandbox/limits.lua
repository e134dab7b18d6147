--- dsh.sandbox.limits: what one local sandbox may take of the host.
--
-- Three limits, each with a default that keeps the host usable:
--   maxProcesses  processes and threads together (default 1024)
--   memoryMb      memory, page cache and tmpfs included (default: half the
--                 host's memory, at most 4096)
--   cpus          CPU time, in CPUs (default: all CPUs but one, at least 1)
-- They are enforced with cgroup v1 controllers (pids, memory, cpu; freezer to
-- stop a sandbox without a fork race) when the host lets dsh create groups,
-- and the process limit also with RLIMIT_NPROC under the sandbox's own host
-- uid. A sandbox's groups are children of the supervisor's own group in each
-- hierarchy, named dsh-<id>: whatever accounts for the creator of a sandbox
-- also accounts for the sandbox. A limit the caller asks for explicitly and
-- the host cannot enforce is an error; a default that cannot be enforced is
-- recorded as absent (nil) in the sandbox's limits.
local errors = require "dsh.errors"
local lfs = require "lfs"
local sys = require "dsh.sysutil"

local M = {}

M.DEFAULT_MAX_PROCESSES = 1024
M.MIN_MAX_PROCESSES = 16 -- bubblewrap (2), dshd and a shell with a pipeline
M.MAX_MAX_PROCESSES = 4194304
M.MIN_MEMORY_MB = 64
M.CFS_PERIOD_US = 100000

local CONTROLLERS = { "pids", "memory", "cpu", "freezer" }

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read(65536)
  f:close()
  return s
end

--- CPUs online and memory of this host (MiB).
function M.host()
  local cpus = 0
  for part in (read("/sys/devices/system/cpu/online") or "0"):gmatch("[^,%s]+") do
    local a, b = part:match("^(%d+)%-(%d+)$")
    cpus = cpus + (a and (tonumber(b) - tonumber(a) + 1) or 1)
  end
  local kb = tonumber((read("/proc/meminfo") or ""):match("MemTotal:%s*(%d+)")) or 0
  return { cpus = math.max(1, cpus), memory_mb = math.floor(kb / 1024) }
end

function M.defaults()
  local h = M.host()
  return {
    maxProcesses = M.DEFAULT_MAX_PROCESSES,
    memoryMb = math.max(M.MIN_MEMORY_MB, math.min(4096, math.floor(h.memory_mb / 2))),
    cpus = math.max(1, h.cpus - 1),
  }
end

--- Check the limit options of create (raises a misuse error naming the
-- option, at the line that called create).
function M.check(mod, opts)
  local function int(name, lo, hi)
    local v = opts[name]
    if v == nil then return end
    if type(v) ~= "number" or v % 1 ~= 0 or v < lo or v > hi then
      error(string.format("%s: create: %s must be an integer from %d to %d", mod, name, lo, hi), 4)
    end
  end
  int("maxProcesses", M.MIN_MAX_PROCESSES, M.MAX_MAX_PROCESSES)
  int("memoryMb", M.MIN_MEMORY_MB, 2 ^ 40)
  local c = opts.cpus
  if c ~= nil and (type(c) ~= "number" or c ~= c or c < 0.01 or c > 4096) then
    error(mod .. ": create: cpus must be a number from 0.01 to 4096", 3)
  end
end

-- cgroup v1 hierarchies ---------------------------------------------------------

-- controller -> mount point and the mount's root, from /proc/self/mountinfo.
local function mounts()
  local out = {}
  for line in (read("/proc/self/mountinfo") or ""):gmatch("[^\n]+") do
    local root, point, rest = line:match("^%S+ %S+ %S+ (%S+) (%S+) .- %- (.*)$")
    local fstype, opts = (rest or ""):match("^(%S+) %S+ (%S+)")
    if fstype == "cgroup" and opts:match("^rw") then
      for opt in opts:gmatch("[^,]+") do
        if not out[opt] then out[opt] = { point = point, root = root } end
      end
    end
  end
  return out
end

-- controller -> this process's own group directory, for the controllers this
-- process may create child groups in.
local function own_groups()
  local m = mounts()
  local out = {}
  for line in (read("/proc/self/cgroup") or ""):gmatch("[^\n]+") do
    local names, path = line:match("^%d+:([^:]*):(.*)$")
    for name in (names or ""):gmatch("[^,]+") do
      local mt = m[name]
      if mt and (mt.root == "/" or path:sub(1, #mt.root) == mt.root) then
        local rel = mt.root == "/" and path or path:sub(#mt.root + 1)
        local dir = (mt.point .. rel):gsub("/+$", "")
        local attr = lfs.attributes(dir)
        if attr and attr.mode == "directory" and (attr.uid == sys.getuid() or sys.getuid() == 0) then
          out[name] = dir
        end
      end
    end
  end
  return out
end

--- The controllers this host lets dsh use for a sandbox: {pids=bool, ...}.
function M.available()
  local own = own_groups()
  local out = {}
  for _, c in ipairs(CONTROLLERS) do out[c] = own[c] ~= nil end
  return out
end

--- Decide the limits of a new sandbox from create's options: the record kept
-- in its meta ({maxProcesses=, memoryMb=, cpus=, cgroups={controller...}}),
-- or nil, err when an explicitly requested limit cannot be enforced here.
function M.plan(opts)
  local d = M.defaults()
  local av = M.available()
  local out = { cgroups = {} }
  for _, c in ipairs(CONTROLLERS) do
    if av[c] then out.cgroups[#out.cgroups + 1] = c end
  end
  -- RLIMIT_NPROC always bounds processes; the pids controller makes it exact.
  out.maxProcesses = opts.maxProcesses or d.maxProcesses
  local function want(name, controller)
    if av[controller] then
      out[name] = opts[name] or d[name]
    elseif opts[name] ~= nil then
      return errors.new("failed_precondition", string.format(
        "%s cannot be enforced here: dsh needs a cgroup v1 %s controller it may create groups in", name, controller))
    end
  end
  local err = want("memoryMb", "memory") or want("cpus", "cpu")
  if err then return nil, err end
  return out
end

--- The group directory of sandbox id for each controller of the plan.
function M.paths(id, plan)
  local own = own_groups()
  local out = {}
  for _, c in ipairs(plan.cgroups or {}) do
    if own[c] then out[c] = own[c] .. "/dsh-" .. id end
  end
  return out
end

local function write(path, value)
  local f, err = io.open(path, "w")
  if not f then return nil, err end
  local ok, werr = f:write(value)
  local cok, cerr = f:close()
  if not ok or not cok then return nil, tostring(werr or cerr) end
  return true
end

--- Create the groups of a sandbox and set its limits; returns {controller=dir}
-- or nil, message. Groups left over from an earlier run are reused.
function M.create(id, plan)
  local groups = M.paths(id, plan)
  for c, dir in pairs(groups) do
    if not sys.is_dir(dir) then
      local ok, err = lfs.mkdir(dir)
      if not ok then return nil, "cannot create cgroup " .. dir .. ": " .. tostring(err) end
    end
    local ok, err = true, nil
    if c == "pids" then
      ok, err = write(dir .. "/pids.max", tostring(plan.maxProcesses))
    elseif c == "memory" and plan.memoryMb then
      local bytes = string.format("%d", plan.memoryMb * 1048576)
      ok, err = write(dir .. "/memory.limit_in_bytes", bytes)
      -- swap too, where swap is accounted (memsw must not be below the limit)
      if ok and sys.exists(dir .. "/memory.memsw.limit_in_bytes") then
        ok, err = write(dir .. "/memory.memsw.limit_in_bytes", bytes)
      end
    elseif c == "cpu" and plan.cpus then
      ok, err = write(dir .. "/cpu.cfs_period_us", tostring(M.CFS_PERIOD_US))
      if ok then
        ok, err = write(dir .. "/cpu.cfs_quota_us", string.format("%d", math.ceil(plan.cpus * M.CFS_PERIOD_US)))
      end
    end
    if not ok then return nil, "cannot set the limits of cgroup " .. dir .. ": " .. tostring(err) end
  end
  return groups
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

--- Freeze (true) or thaw (false) the sandbox when it has a freezer group;
-- returns true once the state is reached (or there is no freezer).
function M.freeze(groups, on)
  local dir = groups and groups.freezer
  if not dir or not sys.is_dir(dir) then return true end
  local want = on and "FROZEN" or "THAWED"
  if not write(dir .. "/freezer.state", want) then return false end
  return true
end

function M.frozen(groups)
  local dir = groups and groups.freezer
  if not dir then return true end
  return (read(dir .. "/freezer.state") or ""):match("^%u+") ~= "FREEZING"
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
