--- bench/leftovers.lua: what `make soak` and `make load` watch on the host:
-- every local sandbox they create is tracked (its uid, supervisor, bwrap and
-- init records), and afterwards nothing of any of them may be left: no
-- process, no sandbox directory, no uid claim, no child of this process, no
-- live dsh object. Also the host's fds and RSS, and a sandbox's dshd RSS.
local lfs = require "lfs"
local loop = require "dsh.core.loop"
local state = require "dsh.sandbox.state"
local sys = require "dsh.core.sysutil"
local uids = require "dsh.sandbox.uids"

local M = {}

local tracked = {} -- id -> {uid=, records = {"pid start", ...}}

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

--- Remember a running sandbox's host-side identity (call while it runs).
---@param id string
function M.track(id)
  local meta = state.read_meta(id) or {}
  local rt = state.read_runtime(id) or {}
  local t = { uid = meta.uid, records = {} }
  for _, r in ipairs { state.supervisor_record(id), rt.bwrap, rt.init } do
    if type(r) == "string" then t.records[#t.records + 1] = r end
  end
  tracked[id] = t
  return t
end

--- How many sandboxes were tracked.
function M.count()
  local n = 0
  for _ in pairs(tracked) do n = n + 1 end
  return n
end

--- Pids of the sandbox's dshd (its processes named dshd, found by its uid).
---@param id string
---@return integer[]
function M.dshd_pids(id)
  local t = tracked[id] or M.track(id)
  local out = {}
  if not t.uid then return out end
  for _, pid in ipairs(uids.processes(t.uid)) do
    if (read("/proc/" .. pid .. "/comm") or ""):match("^dshd") then out[#out + 1] = pid end
  end
  return out
end

--- VmRSS of a pid in KiB (nil when it is gone).
function M.rss_kib(pid)
  local s = read("/proc/" .. tostring(pid) .. "/status")
  return s and tonumber(s:match("VmRSS:%s*(%d+)"))
end

--- Open fds of this process.
function M.fds()
  local n = 0
  for name in lfs.dir("/proc/self/fd") do
    if name ~= "." and name ~= ".." then n = n + 1 end
  end
  return n - 1 -- the directory being listed
end

--- Pids whose parent is this process.
function M.children()
  local me, out = tostring(sys.getpid()), {}
  for name in lfs.dir("/proc") do
    if name:match("^%d+$") then
      local st = read("/proc/" .. name .. "/stat")
      local ppid = st and st:match("^%d+ %b() %S+ (%d+)")
      if ppid == me then out[#out + 1] = tonumber(name) end
    end
  end
  return out
end

--- Everything left behind, as a list of messages (empty: clean). Waits up to
--- wait_ms for processes that are still exiting.
---@param wait_ms integer|nil
---@return string[]
function M.check(wait_ms)
  local async = require "dsh.async"
  local deadline = loop.now_ms() + (wait_ms or 5000)
  local problems
  repeat
    problems = {}
    local function bad(fmt, ...) problems[#problems + 1] = string.format(fmt, ...) end
    for id, t in pairs(tracked) do
      if t.uid then
        local left = uids.processes(t.uid)
        if #left > 0 then bad("sandbox %s: %d processes of uid %d left", id, #left, t.uid) end
        if sys.exists(uids.CLAIMS .. "/" .. t.uid) then bad("sandbox %s: uid claim %d left", id, t.uid) end
      end
      for _, r in ipairs(t.records) do
        if sys.live_pid(r) then bad("sandbox %s: process %s still alive", id, r) end
      end
      if sys.exists(state.dir(id)) then bad("sandbox %s: state directory left", id) end
    end
    local ids = state.ids()
    if #ids > 0 then bad("%d sandboxes still in the state directory: %s", #ids, table.concat(ids, " ")) end
    local kids = M.children()
    if #kids > 0 then
      local list = {}
      for _, pid in ipairs(kids) do list[#list + 1] = pid .. " " .. (read("/proc/" .. pid .. "/comm") or "?") end
      bad("child processes of the host left: %s", table.concat(list, ", "):gsub("\n", ""))
    end
    if #problems == 0 or loop.now_ms() > deadline then break end
    async.sleep(200)
  until false
  collectgarbage()
  collectgarbage()
  local live = {}
  for kind, n in pairs(loop.live()) do live[#live + 1] = kind .. "=" .. n end
  if #live > 0 then problems[#problems + 1] = "live dsh objects: " .. table.concat(live, ", ") end
  return problems
end

--- Least-squares slope of ys over xs.
function M.slope(xs, ys)
  local n = #xs
  if n < 2 then return 0 end
  local sx, sy, sxx, sxy = 0, 0, 0, 0
  for i = 1, n do
    sx, sy = sx + xs[i], sy + ys[i]
    sxx, sxy = sxx + xs[i] * xs[i], sxy + xs[i] * ys[i]
  end
  local d = n * sxx - sx * sx
  return d == 0 and 0 or (n * sxy - sx * sy) / d
end

return M
