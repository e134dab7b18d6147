--- Shared spec helpers (loaded by busted --helper and by `require "helpers"`).
--
-- Every async spec ends with helpers.assert_clean(): no dsh object still live,
-- no fd leaked since the snapshot taken in before_each, no process group left.
local M = {}

M.root = os.getenv("PWD")

-- Every error dsh makes while specs run must carry a catalogued code
-- (dsh.errors.CATALOGUE); assert_clean fails the test that made one that is
-- not. Codes a spec makes itself (fault injection) are the spec's to name.
local unknown_codes = {}

--- True when a chunk's source (debug.getinfo(...).source) is a file under spec/.
function M.is_spec_source(src)
  local path = src:match("^@(.*)$")
  if not path then return false end
  if path:sub(1, 1) ~= "/" then path = M.root .. "/" .. path end
  return path:sub(1, #M.root + 6) == M.root .. "/spec/"
end

require("dsh.errors").on_unknown_code(function(code, at)
  if at and M.is_spec_source(at.source) then return end
  unknown_codes[#unknown_codes + 1] = tostring(code) .. " (made at "
    .. (at and (at.short_src .. ":" .. tostring(at.currentline)) or "?") .. ")"
end)
M.build = os.getenv("DSH_BUILD_DIR") or (M.root .. "/build")

--- Path of a fixture program built by CMake (spec/fixtures/<name>.c).
function M.fixture(name)
  return M.build .. "/bin/fixture-" .. name
end

function M.bin(name)
  return M.build .. "/bin/" .. name
end

--- Open fds of this process (a set of numbers).
function M.fds()
  local lfs = require "lfs"
  local set = {}
  for name in lfs.dir("/proc/self/fd") do
    if name:match("^%d+$") then set[tonumber(name)] = true end
  end
  return set
end

local pid
function M.pid()
  if not pid then
    local f = io.open("/proc/self/stat")
    pid = tonumber(f:read("*l"):match("^(%d+)"))
    f:close()
  end
  return pid
end

local snapshot
function M.snapshot()
  require "dsh.async" -- the loop's own fds are not a leak
  snapshot = M.fds()
end

--- True when a process group has members (kill -0 -pgid).
function M.group_alive(pgid)
  return os.execute("kill -0 -- -" .. pgid .. " 2>/dev/null") == 0
end

--- True when a pid exists and is not a zombie.
function M.pid_alive(p)
  local f = io.open("/proc/" .. p .. "/stat")
  if not f then return false end
  local stat = f:read("*l") or ""
  f:close()
  return not stat:match("^%d+ %b() Z")
end

--- Fails when a dsh object is still open or an fd leaked since snapshot().
function M.assert_clean()
  local async = require "dsh.async"
  -- let closes that were queued settle
  for _ = 1, 3 do async.step(0) end
  local live = require("dsh.loop").live()
  local names = {}
  for kind, n in pairs(live) do names[#names + 1] = kind .. "=" .. n end
  table.sort(names)
  assert(#names == 0, "live dsh objects after the test: " .. table.concat(names, ", "))
  if #unknown_codes > 0 then
    local list = unknown_codes
    unknown_codes = {}
    error("error codes missing from dsh.errors.CATALOGUE: " .. table.concat(list, ", "), 2)
  end
  if snapshot then
    local now = M.fds()
    local leaked = {}
    for fd in pairs(now) do
      if not snapshot[fd] then leaked[#leaked + 1] = fd end
    end
    table.sort(leaked)
    snapshot = nil
    assert(#leaked == 0, "leaked fds: " .. table.concat(leaked, ", "))
  end
end

--- Run fn as a dsh task and wait for it (so specs read straight-line).
function M.run(fn)
  local async = require "dsh.async"
  return async.run(fn):await()
end

--- Read a whole file (nil when missing).
function M.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

function M.write_file(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

--- A fresh temporary directory (removed by M.rm_rf).
function M.tmpdir()
  local p = io.popen("mktemp -d /tmp/dsh-spec.XXXXXX")
  local dir = p:read("*l")
  p:close()
  return dir
end

function M.rm_rf(path)
  assert(path and #path > 5 and path:sub(1, 1) == "/", "refusing to remove " .. tostring(path))
  os.execute("rm -rf '" .. path .. "'")
end

return M
