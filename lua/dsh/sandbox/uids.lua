--- dsh.sandbox.uids: a host uid of its own for each local sandbox, and the
-- host processes that belong to a sandbox.
--
-- When the host runs as root, the sandbox's user (uid 1000 inside) is an
-- unprivileged host uid that nothing else uses, taken at random from
-- [BASE, BASE + COUNT) and claimed machine-wide under CLAIMS (a directory per
-- uid naming the sandbox that holds it), so that RLIMIT_NPROC counts exactly
-- that sandbox's processes, its files on the host belong to it alone, and
-- every process of it can be found by its uid. A claim is kept while the
-- sandbox exists (running or paused) and released when it is killed; a claim
-- whose sandbox is gone and that no process uses is taken over.
local hostfs = require "dsh.hostfs"
local json = require "dsh.json"
local lfs = require "lfs"
local proc = require "dsh.proc"
local sys = require "dsh.sysutil"

local M = {}

M.BASE, M.COUNT = 0x70000000, 0x100000
M.CLAIMS = "/run/dsh/uids"

--- True when sandboxes get a dedicated host uid (the host runs as root).
function M.dedicated()
  return sys.getuid() == 0
end

--- True when uid lies in dsh's range (never the host's own users).
function M.ours(uid)
  return type(uid) == "number" and uid >= M.BASE and uid < M.BASE + M.COUNT
end

local function owner_of(uid)
  local text = hostfs.read_regular(M.CLAIMS .. "/" .. uid .. "/owner", 4096)
  return text and text:gsub("\n$", "")
end

--- Real uid of a live process (from /proc/pid/status), or nil.
function M.uid_of(pid)
  local f = io.open("/proc/" .. pid .. "/status", "rb")
  if not f then return nil end
  local s = f:read(4096) or ""
  f:close()
  return tonumber(s:match("\nUid:%s*(%d+)"))
end

--- Every pid on the host whose real uid is uid.
function M.processes(uid)
  local out = {}
  for name in lfs.dir("/proc") do
    if name:match("^%d+$") and M.uid_of(name) == uid then out[#out + 1] = tonumber(name) end
  end
  return out
end

-- A claim is stale when the sandbox named in it no longer records this uid
-- and no process runs as it.
local function stale(uid)
  local owner = owner_of(uid)
  if owner then
    local meta = hostfs.read_regular(owner .. "/meta.json", 4 * 1048576)
    local ok, m = pcall(json.decode, meta or "")
    if ok and type(m) == "table" and m.uid == uid then return false end
  end
  return #M.processes(uid) == 0
end

local function write_owner(uid, dir)
  return sys.write_file(M.CLAIMS .. "/" .. uid .. "/owner", dir .. "\n", "644")
end

--- Claim uid for the sandbox at dir: true, or nil and why.
function M.claim(uid, dir)
  local ok = sys.mkdir_p(M.CLAIMS, "755")
  if not ok then return nil, "cannot create " .. M.CLAIMS end
  local path = M.CLAIMS .. "/" .. uid
  if lfs.mkdir(path) then
    if not write_owner(uid, dir) then return nil, "cannot write " .. path .. "/owner" end
    return true
  end
  if owner_of(uid) == dir then return true end
  if not stale(uid) then return nil, "uid " .. uid .. " is held by " .. tostring(owner_of(uid)) end
  if not write_owner(uid, dir) then return nil, "cannot write " .. path .. "/owner" end
  return true
end

--- Take a free uid for the sandbox at dir: uid, or nil and why.
function M.allocate(dir)
  local why
  for _ = 1, 32 do
    local b = sys.random_bytes(4)
    local n = ((b:byte(1) * 256 + b:byte(2)) * 256 + b:byte(3)) % M.COUNT
    local uid = M.BASE + n
    local ok, err = M.claim(uid, dir)
    if ok then return uid end
    why = err
  end
  return nil, "no free sandbox uid: " .. tostring(why)
end

--- Release the claim of the sandbox at dir on uid (no-op when not its own).
function M.release(uid, dir)
  if not M.ours(uid) or owner_of(uid) ~= dir then return end
  os.remove(M.CLAIMS .. "/" .. uid .. "/owner")
  lfs.rmdir(M.CLAIMS .. "/" .. uid)
end

--- Give the sandbox's writable directories to uid (recursively: a sandbox
-- created before it had a uid of its own has files of the host's user).
function M.chown(uid, paths, recursive)
  -- never through a link: the tree may hold links to host files planted by
  -- the code that ran there
  local argv = { "chown", "--no-dereference" }
  if recursive then
    argv[#argv + 1] = "-R"
    argv[#argv + 1] = "-P"
  end
  argv[#argv + 1] = uid .. ":" .. uid
  argv[#argv + 1] = "--"
  for _, p in ipairs(paths) do argv[#argv + 1] = p end
  local p, err = proc.spawn { argv = argv, env = { PATH = "/usr/bin:/bin" }, stdout = "null" }
  if not p then return nil, err.message end
  local out = p:read_all("stderr") or ""
  local st = p:wait()
  p:close()
  if st.exit_code ~= 0 then return nil, "chown failed: " .. out end
  return true
end

return M
