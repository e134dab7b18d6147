--- dsh.sandbox.uids: the host identities of a local sandbox, and the host
-- processes that belong to it.
--
-- A sandbox has two identities, as an E2B sandbox does (envd as root,
-- commands as `user`): dshd runs as the sandbox's root (uid 0 inside) and
-- commands as `user` (uid 1000 inside), two different host uids, so code the
-- sandbox runs can neither signal, trace, read the memory of nor take the
-- file descriptors of the daemon the host trusts. Where they come from:
--   dedicated    the host runs as root: a pair of unprivileged host uids that
--                nothing else uses, root = BASE + 2k, user = root + 1, taken at
--                random in [BASE, BASE + COUNT) and claimed machine-wide under
--                CLAIMS (a directory per pair naming the sandbox that holds
--                it), so RLIMIT_NPROC counts exactly that sandbox's processes,
--                its files on the host are its own, and every process of it
--                can be found by uid
--   subordinate  a host user with subordinate ids (/etc/subuid and
--                /etc/subgid, as rootless containers have): root is the host
--                user, as in rootless containers, and `user` one of its
--                subordinate ids, claimed under the user's state directory
--   shared       neither: dshd and commands share the host user's uid (uid
--                1000 inside), and the sandbox reports that weaker isolation
--                in its limits (`identities = "shared"`)
-- A claim is kept while the sandbox exists (running or paused) and released
-- when it is killed; a claim whose sandbox is gone and that no process uses
-- is taken over.
local hostfs = require "dsh.core.hostfs"
local json = require "dsh.json"
local lfs = require "lfs"
local proc = require "dsh.core.proc"
local sys = require "dsh.core.sysutil"

local M = {}

M.BASE, M.COUNT = 0x70000000, 0x100000
M.CLAIMS = "/run/dsh/uids"
M.INSIDE_ROOT, M.INSIDE_USER = 0, 1000

--- True when sandboxes get dedicated host uids (the host runs as root).
function M.dedicated()
  return sys.getuid() == 0
end

--- True when uid lies in dsh's range (never the host's own users).
function M.ours(uid)
  return type(uid) == "number" and uid >= M.BASE and uid < M.BASE + M.COUNT
end

-- This host user's name (from /etc/passwd), for /etc/subuid's name entries.
local function user_name(uid)
  for line in (sys.read_file("/etc/passwd") or ""):gmatch("[^\n]+") do
    local name, id = line:match("^([^:]*):[^:]*:(%d+):")
    if tonumber(id) == uid then return name end
  end
  return nil
end

-- The first range of /etc/sub{u,g}id for this user: start, count.
local function sub_range(file, uid)
  local name = user_name(uid)
  for line in (sys.read_file(file) or ""):gmatch("[^\n]+") do
    local who, start, count = line:match("^([^:#]+):(%d+):(%d+)")
    if who and (who == name or tonumber(who) == uid) and tonumber(count) >= 1 then
      return tonumber(start), tonumber(count)
    end
  end
  return nil
end

--- How this host gives a sandbox its identities: "dedicated", "subordinate"
-- or "shared" (see above), and for "subordinate" the ranges.
function M.mode()
  if M.dedicated() then return "dedicated" end
  local uid = sys.getuid()
  local us, uc = sub_range("/etc/subuid", uid)
  local gs, gc = sub_range("/etc/subgid", uid)
  if us and gs and sys.which("newuidmap") and sys.which("newgidmap") then
    return "subordinate", { uid = us, gid = gs, count = math.min(uc, gc) }
  end
  return "shared"
end

local function claims()
  return M.dedicated() and M.CLAIMS or sys.state_dir() .. "/uids"
end

local function owner_of(key)
  local text = hostfs.read_regular(claims() .. "/" .. key .. "/owner", 4096)
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

--- Every pid on the host whose real uid is uid (or one of the uids given).
function M.processes(uid, uid2)
  local out = {}
  for name in lfs.dir("/proc") do
    if name:match("^%d+$") then
      local u = M.uid_of(name)
      if u and (u == uid or u == uid2) then out[#out + 1] = tonumber(name) end
    end
  end
  return out
end

-- A claim is stale when the sandbox named in it no longer records it and no
-- process runs as either of its uids.
local function stale(key, other)
  local owner = owner_of(key)
  if owner then
    local meta = hostfs.read_regular(owner .. "/meta.json", 4 * 1048576)
    local m = json.decode(meta or "")
    if type(m) == "table" and (m.root_uid == key or m.uid == key) then return false end
  end
  return #M.processes(key, other) == 0
end

local function write_owner(key, dir)
  return sys.write_file(claims() .. "/" .. key .. "/owner", dir .. "\n", "644")
end

--- Claim key (a uid) for the sandbox at dir: true, or nil and why. other:
-- the second uid of the pair, which must be unused too for a stale claim.
function M.claim(key, dir, other)
  local root = claims()
  local ok = sys.mkdir_p(root, M.dedicated() and "755" or "700")
  if not ok then return nil, "cannot create " .. root end
  local path = root .. "/" .. key
  if lfs.mkdir(path) then
    if not write_owner(key, dir) then return nil, "cannot write " .. path .. "/owner" end
    return true
  end
  if owner_of(key) == dir then return true end
  if not stale(key, other) then return nil, "uid " .. key .. " is held by " .. tostring(owner_of(key)) end
  if not write_owner(key, dir) then return nil, "cannot write " .. path .. "/owner" end
  return true
end

local function random_below(n)
  local b = sys.random_bytes(4)
  return (((b:byte(1) * 256 + b:byte(2)) * 256 + b:byte(3)) * 256 + b:byte(4)) % n
end

---@class dsh.SandboxIdentities
---@field mode "dedicated"|"subordinate"|"shared"
---@field root_uid integer host uid of the sandbox's root (dshd)
---@field root_gid integer
---@field uid integer      host uid of `user` (commands); equals root_uid when shared
---@field gid integer

--- The identities for a new sandbox at dir, claimed: dsh.SandboxIdentities,
-- or nil and why.
function M.allocate(dir)
  local mode, sub = M.mode()
  local me = sys.getuid()
  if mode == "shared" then
    return { mode = mode, root_uid = me, root_gid = me, uid = me, gid = me }
  end
  local why
  for _ = 1, 32 do
    local id
    if mode == "dedicated" then
      local root = M.BASE + 2 * random_below(M.COUNT / 2)
      id = { mode = mode, root_uid = root, root_gid = root, uid = root + 1, gid = root + 1 }
    else
      local k = random_below(sub.count)
      id = { mode = mode, root_uid = me, root_gid = me, uid = sub.uid + k, gid = sub.gid + k }
    end
    local key = mode == "dedicated" and id.root_uid or id.uid
    local ok, err = M.claim(key, dir, mode == "dedicated" and id.uid or nil)
    if ok then return id end
    why = err
  end
  return nil, "no free sandbox uid: " .. tostring(why)
end

--- The claim key of a sandbox's record (meta), or nil when it has none.
function M.key(meta)
  if meta.identities == "dedicated" then return meta.root_uid end
  if meta.identities == "subordinate" then return meta.uid end
  if meta.identities == nil and M.ours(meta.uid) then return meta.uid end -- made before two identities
  return nil
end

--- Release the claim of the sandbox at dir on key (no-op when not its own).
function M.release(key, dir)
  if not key or owner_of(key) ~= dir then return end
  os.remove(claims() .. "/" .. key .. "/owner")
  lfs.rmdir(claims() .. "/" .. key)
end

--- Give paths to uid:gid (recursively: a sandbox created before it had a uid
-- of its own has files of the host's user).
function M.chown(uid, paths, recursive, gid)
  -- never through a link: the tree may hold links to host files planted by
  -- the code that ran there
  local argv = { "chown", "--no-dereference" }
  if recursive then
    argv[#argv + 1] = "-R"
    argv[#argv + 1] = "-P"
  end
  argv[#argv + 1] = uid .. ":" .. (gid or uid)
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
