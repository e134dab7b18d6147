--- dsh.sandbox.metrics: what a local sandbox uses of the host, in the shape
-- of E2B's sandbox metrics (SandboxMetric: cpuCount, cpuUsedPct, memUsed,
-- memTotal, memCache, diskUsed, diskTotal, timestamp, timestampUnix).
--
-- CPU and memory come from the cgroups the sandbox's supervisor recorded
-- (state.read_runtime(id).cgroups, controller -> directory), in either
-- cgroup version: v1 cpuacct.usage (ns) or v2 cpu.stat usage_usec; v1
-- memory.usage_in_bytes / memory.limit_in_bytes / memory.stat cache, or v2
-- memory.current / memory.max / memory.stat file. cpuUsedPct is the CPU
-- time used over a short window (CPU_SAMPLE_MS) against the sandbox's CPUs.
-- Disk is what its file system holds: the used space of its disk image (as
-- its own df says while it runs, else what the image takes on the host), or,
-- without an image, the space its files take under its home and tmp (du's
-- count: allocated blocks, each hard link once, symlinks not followed). A figure
-- that cannot be read (no such controller on this host, a paused sandbox,
-- more than MAX_DISK_ENTRIES files) is nil, never a guess.
local async = require "dsh.async"
local cgroups = require "dsh.sandbox.cgroups"
local disk = require "dsh.sandbox.disk"
local errors = require "dsh.errors"
local lfs = require "lfs"
local loop = require "dsh.core.loop"
local limits = require "dsh.sandbox.limits"
local state = require "dsh.sandbox.state"

local M = {}

M.CPU_SAMPLE_MS = 200
M.MAX_DISK_ENTRIES = 200000
M.CGROUP_ROOT = "/sys/fs/cgroup/"
-- cgroup v1 reports "no limit" as a page-rounded 2^63-1
local UNLIMITED = 2 ^ 62

local read = cgroups.read

local function number_in(dir, name)
  local s = read(dir .. "/" .. name)
  return s and tonumber(s:match("^%s*(%d+)%s*$")) or nil
end

-- The value of key in a "key value" file (memory.stat, cpu.stat).
local function stat_in(dir, name, key)
  local s = read(dir .. "/" .. name)
  if not s then return nil end
  return tonumber(s:match("\n" .. key .. " (%d+)") or s:match("^" .. key .. " (%d+)"))
end

-- The recorded group directories that are cgroup directories.
local function dirs_of(groups)
  local out = {}
  for _, dir in pairs(groups or {}) do
    if type(dir) == "string" and dir:sub(1, #M.CGROUP_ROOT) == M.CGROUP_ROOT and not dir:find("/%.%./")
      and not dir:find("/%.%.$") then
      out[#out + 1] = dir
    end
  end
  table.sort(out)
  return out
end

--- Cumulative CPU time of the groups, in ns (nil when no group accounts it).
function M.cpu_ns(groups)
  for _, dir in ipairs(dirs_of(groups)) do
    local v1 = number_in(dir, "cpuacct.usage")
    if v1 then return v1 end
    local v2 = stat_in(dir, "cpu.stat", "usage_usec")
    if v2 then return v2 * 1000 end
  end
  return nil
end

--- Memory of the groups: used, cache, limit (bytes; each nil when unknown).
function M.memory(groups)
  for _, dir in ipairs(dirs_of(groups)) do
    local used = number_in(dir, "memory.usage_in_bytes")
    if used then
      local limit = number_in(dir, "memory.limit_in_bytes")
      local cache = stat_in(dir, "memory.stat", "total_cache") or stat_in(dir, "memory.stat", "cache")
      return used, cache, limit and limit < UNLIMITED and limit or nil
    end
    used = number_in(dir, "memory.current")
    if used then
      return used, stat_in(dir, "memory.stat", "file"), number_in(dir, "memory.max") -- "max": nil
    end
  end
  return nil, nil, nil
end

--- Bytes the files under dirs take (nil past MAX_DISK_ENTRIES entries).
function M.disk_used(dirs)
  local total, entries, seen = 0, 0, {}
  local function walk(dir)
    local ok, iter, d = pcall(lfs.dir, dir)
    if not ok then return true end
    for name in iter, d do
      if name ~= "." and name ~= ".." then
        entries = entries + 1
        if entries > M.MAX_DISK_ENTRIES then return false end
        local p = dir .. "/" .. name
        local a = lfs.symlinkattributes(p)
        if a then
          local key = a.nlink and a.nlink > 1 and (a.dev .. ":" .. a.ino) or nil
          if not (key and seen[key]) then
            if key then seen[key] = true end
            total = total + (a.blocks or 0) * 512
          end
          if a.mode == "directory" and not walk(p) then return false end
        end
      end
    end
    return true
  end
  for _, dir in ipairs(dirs) do
    if not walk(dir) then return nil end
  end
  return total
end

local function running_groups(id)
  if not state.supervisor_pid(id) then return nil end
  local rt = state.read_runtime(id)
  return type(rt) == "table" and type(rt.cgroups) == "table" and rt.cgroups or nil
end

--- One sample of sandbox id now, or nil, err (not_found). opts.sample_ms:
-- the window cpuUsedPct is measured over (default CPU_SAMPLE_MS).
function M.sample(id, opts)
  opts = opts or {}
  if not state.exists(id) then return nil, errors.new("not_found", "sandbox " .. tostring(id) .. " not found") end
  local meta = state.read_meta(id) or {}
  local lim = meta.limits or {}
  local cpus = lim.cpus or limits.host().cpus
  local groups = running_groups(id)
  local cpu_pct
  if groups then
    local t0, c0 = loop.now_ms(), M.cpu_ns(groups)
    if c0 then
      async.sleep(opts.sample_ms or M.CPU_SAMPLE_MS)
      local t1, c1 = loop.now_ms(), M.cpu_ns(running_groups(id) or groups)
      if c1 and t1 > t0 and c1 >= c0 then
        cpu_pct = math.min(100, (c1 - c0) / ((t1 - t0) * 1e6 * cpus) * 100)
      end
    end
  end
  local used, cache, limit
  if groups then used, cache, limit = M.memory(groups) end
  local dir = state.dir(id)
  local now = os.time()
  local disk_used
  if disk.has_image(dir) then
    local rt = groups and state.read_runtime(id)
    local init = rt and type(rt.init) == "string" and tonumber(rt.init:match("^(%d+)"))
    disk_used = (init and disk.fs_used_bytes(init)) or disk.used_bytes(dir)
  else
    disk_used = M.disk_used { dir .. "/home", dir .. "/tmp" }
  end
  return {
    timestamp = os.date("!%Y-%m-%dT%H:%M:%SZ", now), timestampUnix = now, cpuCount = cpus,
    cpuUsedPct = cpu_pct, memUsed = used, memCache = cache,
    memTotal = limit or (lim.memoryMb and lim.memoryMb * 1048576) or nil,
    diskUsed = disk_used,
    diskTotal = lim.diskMb and lim.diskMb * 1048576 or nil,
  }
end

return M
