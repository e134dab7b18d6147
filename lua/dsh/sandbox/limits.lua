--- dsh.sandbox.limits: what one local sandbox may take of the host.
--
-- Each limit has a default that keeps the host usable, and a value the host
-- cannot give is refused, naming the host's figure:
--   maxProcesses  processes and threads together (default 1024)
--   memoryMb      memory, page cache, tmpfs and the kernel's own objects
--                 (open files among them) included (default: half the host's
--                 memory, at most 4096)
--   cpus          CPU time, in CPUs (default: all CPUs but one, at least 1)
--   maxOpenFiles  open files per process, a hard limit (default 1024, less
--                 when maxProcesses x maxOpenFiles would pass a quarter of
--                 the host's fs.file-max: one sandbox must never run the host
--                 out of file structures)
--   diskMb        bytes written under /home/user and /tmp (default a quarter
--                 of the free space of the state directory's file system, at
--                 most 10240): dsh.sandbox.disk decides it
-- Processes, memory and CPU are enforced with cgroups (dsh.sandbox.cgroups,
-- v1 or v2) when the host lets dsh create groups, the process limit also with
-- RLIMIT_NPROC under the sandbox's own host uids, open files with
-- RLIMIT_NOFILE set by dshd on every process it starts, inotify (per uid in
-- the sandbox's user namespace) and nested user namespaces (none) with that
-- namespace's sysctls. A limit the caller asks for explicitly and the host
-- cannot enforce is an error; a default that cannot be enforced is recorded
-- as absent (nil) in the sandbox's limits.
local cgroups = require "dsh.sandbox.cgroups"
local errors = require "dsh.errors"

local M = {}

M.DEFAULT_MAX_PROCESSES = 1024
M.MIN_MAX_PROCESSES = 16 -- bubblewrap (2), dshd and a shell with a pipeline
M.MAX_MAX_PROCESSES = 4194304
M.MIN_MEMORY_MB = 64
M.MIN_DISK_MB = 64
M.DEFAULT_MAX_OPEN_FILES = 1024
M.MIN_MAX_OPEN_FILES = 64
M.MAX_MAX_OPEN_FILES = 1048576
M.FILE_SHARE = 4 -- a sandbox holds at most fs.file-max / FILE_SHARE open files
M.INOTIFY_WATCHES = 65536 -- per uid of the sandbox
M.INOTIFY_INSTANCES = 128
M.CFS_PERIOD_US = cgroups.CFS_PERIOD_US

local read = cgroups.read

--- This host's figures: CPUs online, memory (MiB), fs.file-max.
function M.host()
  local cpus = 0
  for part in (read("/sys/devices/system/cpu/online") or "0"):gmatch("[^,%s]+") do
    local a, b = part:match("^(%d+)%-(%d+)$")
    cpus = cpus + (a and (tonumber(b) - tonumber(a) + 1) or 1)
  end
  local kb = tonumber((read("/proc/meminfo") or ""):match("MemTotal:%s*(%d+)")) or 0
  local file_max = tonumber((read("/proc/sys/fs/file-max") or ""):match("%d+")) or 1048576
  return { cpus = math.max(1, cpus), memory_mb = math.floor(kb / 1024), file_max = file_max }
end

--- dshd's own open-file limit for a sandbox of n processes: a few pipes per
-- process it runs, and its connections.
function M.dshd_open_files(n)
  return 4 * n + 1024
end

-- The open files a sandbox of n processes may hold in all.
local function file_budget(host)
  return math.floor(host.file_max / M.FILE_SHARE)
end

function M.defaults(host, max_processes)
  host = host or M.host()
  local n = max_processes or M.DEFAULT_MAX_PROCESSES
  local per = math.floor((file_budget(host) - M.dshd_open_files(n)) / n)
  return {
    maxProcesses = M.DEFAULT_MAX_PROCESSES,
    memoryMb = math.max(M.MIN_MEMORY_MB, math.min(4096, math.floor(host.memory_mb / 2))),
    cpus = math.max(1, host.cpus - 1),
    maxOpenFiles = math.min(M.DEFAULT_MAX_OPEN_FILES, per),
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
  int("maxOpenFiles", M.MIN_MAX_OPEN_FILES, M.MAX_MAX_OPEN_FILES)
  int("diskMb", M.MIN_DISK_MB, 2 ^ 40)
  local c = opts.cpus
  if c ~= nil and (type(c) ~= "number" or c ~= c or c < 0.01 or c > 4096) then
    error(mod .. ": create: cpus must be a number from 0.01 to 4096", 3)
  end
end

local function refuse(fmt, ...)
  return errors.new("failed_precondition", string.format(fmt, ...))
end

-- Values this host cannot give, named with its figure (nil when all fit).
local function beyond_host(opts, host, plan)
  if opts.memoryMb and opts.memoryMb > host.memory_mb then
    return refuse("memoryMb %d is more than this host's memory (%d MiB)", opts.memoryMb, host.memory_mb)
  end
  if opts.cpus and opts.cpus > host.cpus then
    return refuse("cpus %s is more than this host's %d CPUs", tostring(opts.cpus), host.cpus)
  end
  local files = plan.maxProcesses * plan.maxOpenFiles + M.dshd_open_files(plan.maxProcesses)
  if files > file_budget(host) then
    return refuse("maxProcesses %d x maxOpenFiles %d (%d open files, dshd's included) is more than a "
      .. "quarter of this host's fs.file-max (%d)", plan.maxProcesses, plan.maxOpenFiles, files, host.file_max)
  end
  if plan.maxOpenFiles < M.MIN_MAX_OPEN_FILES then
    return refuse("maxProcesses %d leaves fewer than %d open files per process under a quarter of this host's "
      .. "fs.file-max (%d)", plan.maxProcesses, M.MIN_MAX_OPEN_FILES, host.file_max)
  end
  return nil
end

--- Decide the limits of a new sandbox from create's options: the record kept
-- in its meta ({maxProcesses=, memoryMb=, cpus=, maxOpenFiles=,
-- cgroup_version=, cgroups={controller...}}; diskMb is dsh.sandbox.disk's),
-- or nil, err when a value cannot be given or an explicitly requested limit
-- cannot be enforced here.
function M.plan(opts)
  local host = M.host()
  local n = opts.maxProcesses or M.DEFAULT_MAX_PROCESSES
  local d = M.defaults(host, n)
  local version, av = cgroups.available()
  local out = { cgroups = {}, cgroup_version = version }
  for _, c in ipairs(version == "v2" and { "pids", "memory", "cpu" } or cgroups.V1) do
    if av[c] then out.cgroups[#out.cgroups + 1] = c end
  end
  -- RLIMIT_NPROC always bounds processes; the pids controller makes it exact.
  out.maxProcesses = n
  out.maxOpenFiles = opts.maxOpenFiles or d.maxOpenFiles
  local err = beyond_host(opts, host, out)
  if err then return nil, err end
  local function want(name, controller)
    if av[controller] then
      out[name] = opts[name] or d[name]
    elseif opts[name] ~= nil then
      return refuse("%s cannot be enforced here: dsh needs a cgroup %s controller it may create groups in "
        .. "(cgroup v1, or v2 with the controller delegated)", name, controller)
    end
  end
  err = want("memoryMb", "memory") or want("cpus", "cpu")
  if err then return nil, err end
  return out
end

--- The sysctls of the sandbox's user namespace (dsh-launch --ns-sysctl).
function M.ns_sysctls()
  local host_watches = tonumber((read("/proc/sys/fs/inotify/max_user_watches") or ""):match("%d+"))
  return {
    { "user.max_user_namespaces", 0 },
    { "user.max_inotify_watches", math.min(M.INOTIFY_WATCHES, host_watches or M.INOTIFY_WATCHES) },
    { "user.max_inotify_instances", M.INOTIFY_INSTANCES },
  }
end

--- The controllers this host gives a sandbox: {pids=bool, memory=, cpu=, ...}.
function M.available()
  local _, av = cgroups.available()
  return av
end

-- The cgroup functions, for the supervisor and dsh.sandbox.reap.
M.paths = function(id, plan) return cgroups.paths(id, plan.cgroup_version or "v1", plan.cgroups) end
M.create = cgroups.create
M.pids = cgroups.pids
M.freeze = cgroups.freeze
M.frozen = cgroups.frozen
M.remove = cgroups.remove

return M
