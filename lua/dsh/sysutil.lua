--- dsh.sysutil: small host-side file and process helpers (no shell involved).
--
-- Used by the sandbox lifecycle and the CLI: random ids and tokens, atomic
-- file writes, recursive removal, and liveness of a pid recorded with its
-- start time (so a recycled pid is never mistaken for ours).
local lfs = require "lfs"
local F = require "dsh._ffi"
local ffi = F.ffi
local libc = ffi.C -- declarations in dsh._ffi.sys

local M = {}

--- n random bytes from the kernel.
function M.random_bytes(n)
  local f = assert(io.open("/dev/urandom", "rb"))
  local s = f:read(n)
  f:close()
  return s
end

--- A random lowercase alphanumeric string of length n.
function M.random_id(n)
  local alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
  local bytes = M.random_bytes(n)
  local out = {}
  for i = 1, n do
    local b = bytes:byte(i) % #alphabet + 1
    out[i] = alphabet:sub(b, b)
  end
  return table.concat(out)
end

function M.random_hex(nbytes)
  return (M.random_bytes(nbytes):gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

function M.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

--- Write data to path atomically (temp file + rename), with mode (octal string
-- such as "600") applied before the rename.
function M.write_file(path, data, mode)
  local tmp = path .. ".tmp-" .. M.random_hex(4)
  local f, err = io.open(tmp, "wb")
  if not f then return nil, err end
  f:write(data)
  f:close()
  if mode then M.chmod(tmp, mode) end
  local ok, rerr = os.rename(tmp, path)
  if not ok then
    os.remove(tmp)
    return nil, rerr
  end
  return true
end

function M.chmod(path, mode)
  return libc.chmod(path, tonumber(mode, 8)) == 0
end

--- mkdir -p with a mode for the directories it creates.
function M.mkdir_p(path, mode)
  local cur = path:sub(1, 1) == "/" and "" or "."
  for part in path:gmatch("[^/]+") do
    cur = cur .. "/" .. part
    if lfs.attributes(cur, "mode") == nil then
      local ok, err = lfs.mkdir(cur)
      if not ok and lfs.attributes(cur, "mode") ~= "directory" then return nil, err end
      if mode then M.chmod(cur, mode) end
    end
  end
  return true
end

--- rm -rf path (symlinks are removed, never followed).
function M.rm_rf(path)
  local mode = lfs.symlinkattributes(path, "mode")
  if mode == nil then return true end
  if mode == "directory" then
    M.chmod(path, "700") -- a read-only directory written by the sandbox must still go
    for name in lfs.dir(path) do
      if name ~= "." and name ~= ".." then M.rm_rf(path .. "/" .. name) end
    end
    local ok, err = lfs.rmdir(path)
    if not ok then return nil, err end
  else
    local ok, err = os.remove(path)
    if not ok then return nil, err end
  end
  return true
end

function M.exists(path)
  return lfs.attributes(path, "mode") ~= nil
end

function M.is_dir(path)
  return lfs.attributes(path, "mode") == "directory"
end

function M.list_dir(path)
  local out = {}
  if not M.is_dir(path) then return out end
  for name in lfs.dir(path) do
    if name ~= "." and name ~= ".." then out[#out + 1] = name end
  end
  table.sort(out)
  return out
end

--- Start time of pid in clock ticks since boot (field 22 of /proc/pid/stat), or nil.
function M.start_time(pid)
  local s = M.read_file("/proc/" .. pid .. "/stat")
  if not s then return nil end
  local rest = s:match("^%d+ %b() (.*)$")
  if not rest then return nil end
  local fields = {}
  for f in rest:gmatch("%S+") do fields[#fields + 1] = f end
  -- rest starts at field 3 (state); field 22 is starttime
  if fields[1] == "Z" then return nil end
  return fields[20]
end

--- "pid starttime" for this process, to be recorded in a pid file.
function M.pid_record(pid)
  pid = pid or libc.getpid()
  return pid .. " " .. (M.start_time(pid) or "0")
end

--- The pid of a record if that very process is still alive, else nil.
function M.live_pid(record)
  local pid, start = (record or ""):match("^(%d+) (%d+)")
  pid = tonumber(pid)
  if not pid then return nil end
  if M.start_time(pid) ~= start then return nil end
  return pid
end

function M.kill(pid, sig)
  return libc.kill(pid, sig) == 0
end

function M.getpid()
  return libc.getpid()
end

--- Set (value a string) or unset (value nil) an environment variable of this
-- process, so that children and os.getenv see it.
function M.setenv(name, value)
  if value == nil then return libc.unsetenv(name) == 0 end
  return libc.setenv(name, value, 1) == 0
end

--- This process's environment now, name -> value (environ(7), so what
-- setenv() changed is seen, unlike /proc/self/environ).
---@return table<string, string>
function M.environ()
  local env, p = {}, libc.environ
  local i = 0
  while p ~= nil and p[i] ~= nil do
    local name, value = ffi.string(p[i]):match("^([^=]+)=(.*)$")
    if name then env[name] = value end
    i = i + 1
  end
  return env
end

function M.getuid()
  return libc.getuid()
end

--- Directory that holds dsh's state: $DSH_STATE_DIR, else $XDG_STATE_HOME/dsh,
-- else ~/.local/state/dsh.
function M.state_dir()
  local explicit = os.getenv("DSH_STATE_DIR")
  if explicit and explicit ~= "" then return explicit end
  local xdg = os.getenv("XDG_STATE_HOME")
  if xdg and xdg:sub(1, 1) == "/" then return xdg .. "/dsh" end
  local home = os.getenv("HOME") or "/tmp"
  return home .. "/.local/state/dsh"
end

--- First executable named name in $PATH, or nil.
function M.which(name)
  for dir in (os.getenv("PATH") or "/usr/bin:/bin"):gmatch("[^:]+") do
    local p = dir .. "/" .. name
    local mode = lfs.attributes(p, "mode")
    if mode == "file" then return p end
  end
  return nil
end

return M
