--- dsh.core.sysutil: small host-side file and process helpers (no shell involved).
--
-- Used by the sandbox lifecycle and the CLI: random ids and tokens, atomic
-- file writes, recursive removal, and liveness of a pid recorded with its
-- start time (so a recycled pid is never mistaken for ours).
--
-- Failures return nil, err (dsh.errors) with err.code NOT_FOUND (no such file
-- or process), PERMISSION_DENIED or IO_ERROR, err.message naming the function
-- and what failed, and err.errno when the system gave one. Success returns a
-- value or true.
local errors = require "dsh.errors"
local lfs = require "lfs"
local F = require "dsh.core._ffi"
local ffi = F.ffi
local libc = ffi.C -- declarations in dsh.core._ffi.sys

local M = {}

local EPERM, ENOENT, ESRCH, EACCES = libc.DSH_SYS_EPERM, libc.DSH_SYS_ENOENT, libc.DSH_SYS_ESRCH, libc.DSH_SYS_EACCES

-- The error of a failed call: what ("read_file: /x") and the system's message.
local function fail(what, msg, errno)
  local code = "IO_ERROR"
  if errno == ENOENT or errno == ESRCH then
    code = "NOT_FOUND"
  elseif errno == EACCES or errno == EPERM then
    code = "PERMISSION_DENIED"
  end
  return nil, errors.new(code, what .. ": " .. tostring(msg), { errno = errno })
end

-- The same for a libc call that set errno.
local function fail_errno(what)
  local errno = ffi.errno()
  return fail(what, ffi.string(libc.strerror(errno)), errno)
end

-- io.open/lfs messages start with the path, which what already names.
local function strip_path(msg, path)
  msg = tostring(msg)
  if msg:sub(1, #path + 2) == path .. ": " then return msg:sub(#path + 3) end
  return msg
end

--- n random bytes from the kernel. Raises if the kernel gives none (no
-- /dev/urandom is not a state dsh can work in).
function M.random_bytes(n)
  local f, err = io.open("/dev/urandom", "rb")
  local s = f and f:read(n)
  if f then f:close() end
  if type(s) ~= "string" or #s ~= n then
    error("dsh.core.sysutil: random_bytes: cannot read /dev/urandom: " .. tostring(err or "short read"), 2)
  end
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

--- The whole content of a file.
---@return string|nil, dsh.Error?
function M.read_file(path)
  local f, msg, errno = io.open(path, "rb")
  if not f then return fail("read_file: " .. path, strip_path(msg, path), errno) end
  local s, rmsg, rerrno = f:read("*a")
  f:close()
  if not s then return fail("read_file: " .. path, rmsg, rerrno) end
  return s
end

--- Write data to path atomically (temp file + rename), with mode (octal string
-- such as "600") applied before the rename. On failure path is unchanged and
-- the temp file is gone.
---@return true|nil, dsh.Error?
function M.write_file(path, data, mode)
  local tmp = path .. ".tmp-" .. M.random_hex(4)
  local what = "write_file: " .. path
  local f, msg, errno = io.open(tmp, "wb")
  if not f then return fail(what, strip_path(msg, tmp), errno) end
  local ok, wmsg, werrno = f:write(data)
  local cok, cmsg, cerrno = f:close() -- also reports a failed flush
  if not ok or not cok then
    os.remove(tmp)
    if not ok then return fail(what, wmsg, werrno) end
    return fail(what, cmsg, cerrno)
  end
  if mode then
    local mok, merr = M.chmod(tmp, mode)
    if not mok then
      os.remove(tmp)
      return nil, errors.new(merr.code, what .. ": chmod: " .. merr.message, { errno = merr.errno })
    end
  end
  local rok, rmsg, rerrno = os.rename(tmp, path)
  if not rok then
    os.remove(tmp)
    return fail(what, rmsg, rerrno)
  end
  return true
end

--- Set the mode of path (an octal string such as "600").
---@return true|nil, dsh.Error?
function M.chmod(path, mode)
  if libc.chmod(path, tonumber(mode, 8)) ~= 0 then return fail_errno("chmod: " .. path) end
  return true
end

--- mkdir -p with a mode for the directories it creates.
---@return true|nil, dsh.Error?
function M.mkdir_p(path, mode)
  local cur = path:sub(1, 1) == "/" and "" or "."
  for part in path:gmatch("[^/]+") do
    cur = cur .. "/" .. part
    if lfs.attributes(cur, "mode") == nil then
      local ok, msg, errno = lfs.mkdir(cur)
      if not ok and lfs.attributes(cur, "mode") ~= "directory" then
        return fail("mkdir_p: " .. cur, strip_path(msg, cur), errno)
      end
      if mode then
        local mok, merr = M.chmod(cur, mode)
        if not mok then return nil, errors.new(merr.code, "mkdir_p: " .. merr.message, { errno = merr.errno }) end
      end
    end
  end
  return true
end

--- rm -rf path (symlinks are removed, never followed). Removes what it can
-- and reports the first failure.
---@return true|nil, dsh.Error?
function M.rm_rf(path)
  local mode = lfs.symlinkattributes(path, "mode")
  if mode == nil then return true end
  if mode == "directory" then
    M.chmod(path, "700") -- a read-only directory written by the sandbox must still go
    local first
    local ok, iter, dir = pcall(lfs.dir, path)
    if not ok then return fail("rm_rf: " .. path, iter) end
    for name in iter, dir do
      if name ~= "." and name ~= ".." then
        local rok, rerr = M.rm_rf(path .. "/" .. name)
        if not rok and not first then first = rerr end
      end
    end
    local dok, msg, errno = lfs.rmdir(path)
    if not dok then return nil, first or select(2, fail("rm_rf: " .. path, strip_path(msg, path), errno)) end
  else
    local ok, msg, errno = os.remove(path)
    if not ok then return fail("rm_rf: " .. path, strip_path(msg, path), errno) end
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

--- What /proc/<pid>/stat says of pid: {state=, ppid=, pgrp=, session=,
-- tpgid= (the foreground process group of its terminal; 0 or -1: none),
-- starttime= (clock ticks since boot, a decimal string)}, or nil when no
-- such process is there (a zombie is: state "Z"). The one reader of that
-- file on the host; the command name may hold anything, so fields are
-- counted after its last ")".
---@return table|nil
function M.proc_stat(pid)
  local s = M.read_file("/proc/" .. pid .. "/stat")
  local rest = s and s:match("^%d+ %(.*%) (.*)$")
  if not rest then return nil end
  local f = {}
  for x in rest:gmatch("%S+") do f[#f + 1] = x end
  -- rest starts at field 3 (state): pgrp is field 5, tpgid 8, starttime 22
  return { state = f[1], ppid = tonumber(f[2]), pgrp = tonumber(f[3]), session = tonumber(f[4]),
    tpgid = tonumber(f[6]), starttime = f[20] }
end

--- The process groups with a live (not zombie) member in session sid, sorted:
-- the one walk of /proc over a terminal's session on the host (dshd has its
-- own, remote/dshd/process_terminal.c).
---@param sid integer
---@return integer[]
function M.session_groups(sid)
  local seen, out = {}, {}
  for name in lfs.dir("/proc") do
    if name:match("^%d+$") then
      local st = M.proc_stat(name)
      if st and st.session == sid and st.state ~= "Z" and st.state ~= "X" and not seen[st.pgrp] then
        seen[st.pgrp] = true
        out[#out + 1] = st.pgrp
      end
    end
  end
  table.sort(out)
  return out
end

--- Start time of pid in clock ticks since boot (field 22 of /proc/pid/stat),
-- a decimal string; nil, err (NOT_FOUND) when no such process lives.
---@return string|nil, dsh.Error?
function M.start_time(pid)
  local st = M.proc_stat(pid)
  if not st or not st.starttime or st.state == "Z" then
    return nil, errors.new("NOT_FOUND", "start_time: no live process " .. tostring(pid))
  end
  return st.starttime
end

--- "pid starttime" for this process, to be recorded in a pid file.
function M.pid_record(pid)
  pid = pid or libc.getpid()
  return pid .. " " .. (M.start_time(pid) or "0")
end

--- The pid of a record if that very process is still alive, else nil, err
-- (NOT_FOUND).
---@return integer|nil, dsh.Error?
function M.live_pid(record)
  local pid, start = (record or ""):match("^(%d+) (%d+)")
  pid = tonumber(pid)
  if pid and M.start_time(pid) == start then return pid end
  return nil, errors.new("NOT_FOUND", "live_pid: no live process for record " .. string.format("%q", record or ""))
end

--- kill(2): sig to pid (a negative pid: to that process group).
---@return true|nil, dsh.Error?
function M.kill(pid, sig)
  if libc.kill(pid, sig) ~= 0 then return fail_errno("kill: " .. tostring(pid)) end
  return true
end

function M.getpid()
  return libc.getpid()
end

--- Set (value a string) or unset (value nil) an environment variable of this
-- process, so that children and os.getenv see it.
---@return true|nil, dsh.Error?
function M.setenv(name, value)
  local rc
  if value == nil then rc = libc.unsetenv(name) else rc = libc.setenv(name, value, 1) end
  if rc ~= 0 then return fail_errno("setenv: " .. tostring(name)) end
  return true
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

--- First executable named name in $PATH; nil, err (NOT_FOUND) when none.
---@return string|nil, dsh.Error?
function M.which(name)
  for dir in (os.getenv("PATH") or "/usr/bin:/bin"):gmatch("[^:]+") do
    local p = dir .. "/" .. name
    local mode = lfs.attributes(p, "mode")
    if mode == "file" then return p end
  end
  return nil, errors.new("NOT_FOUND", "which: no " .. name .. " in PATH")
end

return M
