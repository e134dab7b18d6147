--- dsh.sandbox.state: where a local sandbox lives on the host and its records.
--
-- <state>/sandboxes/<id>/      (only the host writes here; the sandbox sees
--                               none of it but the three directories below)
--   meta.json        config, limits, host uid, access token (0600)
--   runtime.json     the running sandbox: its groups and first processes (0600)
--   supervisor.pid   "pid starttime" of the supervisor while running (0600)
--   stopped.json     why and when it last stopped (0600)
--   dshd.sock        dshd's socket, bound here by the launcher and handed to
--                    dshd as a descriptor: the only way the host reaches dshd
--   ready            written by the supervisor once dshd answers there
--   etc/             generated passwd, group, hosts, hostname, resolv.conf
--   sandbox.log      supervisor diagnostics, and the sandbox's stderr (dshd's,
--                    bubblewrap's) on lines marked SANDBOX_TAG (0600)
--   disk.img disk/   the sandbox's files in an ext4 image (dsh.sandbox.disk)
--                    and its mount point, on a root host
--   home/ tmp/       the sandbox's /home/user and /tmp without an image:
--                    writable from inside, so the host never reads anything
--                    in them to find or trust the sandbox
-- Every record is read without following links, as a regular file of bounded
-- size (dsh.core.hostfs.read_regular).
local hostfs = require "dsh.core.hostfs"
local json = require "dsh.json"
local lfs = require "lfs"
local sys = require "dsh.core.sysutil"

local M = {}

M.MAX_META_BYTES = 4 * 1048576
M.MAX_RECORD_BYTES = 65536

function M.root()
  return sys.state_dir() .. "/sandboxes"
end

function M.dir(id)
  return M.root() .. "/" .. id
end

--- Path of dshd's socket as the host uses it.
function M.socket(id)
  return M.dir(id) .. "/dshd.sock"
end

function M.valid_id(id)
  return type(id) == "string" and id:match("^[a-z0-9]+$") ~= nil and #id >= 8 and #id <= 64
end

local function read_json(path, max)
  local text = hostfs.read_regular(path, max)
  if not text then return nil end
  local v = json.decode(text)
  if type(v) ~= "table" then return nil end
  return v
end

function M.read_meta(id)
  return read_json(M.dir(id) .. "/meta.json", M.MAX_META_BYTES)
end

function M.write_meta(id, meta)
  return sys.write_file(M.dir(id) .. "/meta.json", json.encode(meta), "600")
end

--- The running sandbox's record: {cgroups = {controller = dir}, bwrap =
-- "pid start", init = "pid start"} (written by the supervisor).
function M.read_runtime(id)
  return read_json(M.dir(id) .. "/runtime.json", M.MAX_RECORD_BYTES)
end

function M.write_runtime(id, rt)
  return sys.write_file(M.dir(id) .. "/runtime.json", json.encode(rt), "600")
end

--- The supervisor's "pid starttime" record (nil when there is none).
function M.supervisor_record(id)
  return hostfs.read_regular(M.dir(id) .. "/supervisor.pid", 128)
end

--- The supervisor's pid when it is alive, else nil.
function M.supervisor_pid(id)
  return sys.live_pid(M.supervisor_record(id))
end

-- A sandbox being killed has a "killing" marker: gone to everyone from then
-- on, so that nothing (a context resuming it) starts it again meanwhile.
function M.exists(id)
  return M.valid_id(id) and sys.is_dir(M.dir(id)) and sys.exists(M.dir(id) .. "/meta.json")
    and not sys.exists(M.dir(id) .. "/killing")
end

--- Mark the sandbox as being killed (see M.exists).
function M.mark_killing(id)
  return sys.write_file(M.dir(id) .. "/killing", "", "600")
end

function M.ids()
  local out = {}
  for _, name in ipairs(sys.list_dir(M.root())) do
    if M.exists(name) then out[#out + 1] = name end
  end
  return out
end

-- Why and when a sandbox stopped --------------------------------------------------
-- A host that reaches a sandbox after it paused or was deleted learns why
-- and when from these records (ctx.e2b says so in its errors):
--   <state>/sandboxes/<id>/stopped.json  {reason=, at=} of its last stop (a pause)
--   <state>/gone/<id>                    {reason=, at=} of its deletion, kept GONE_KEEP_S
--                                        (and at most GONE_MAX of them)

M.GONE_KEEP_S = 7 * 24 * 3600
M.GONE_MAX = 1000

--- Now as an ISO 8601 UTC timestamp (the records' clock).
function M.now()
  return os.date("!%Y-%m-%dT%H:%M:%SZ")
end

function M.gone_root()
  return sys.state_dir() .. "/gone"
end

--- Record the sandbox's stop: reason ("paused", "paused by its idle timeout ...").
function M.write_stopped(id, reason)
  return sys.write_file(M.dir(id) .. "/stopped.json", json.encode { reason = reason, at = M.now() }, "600")
end

--- {reason=, at=} of the sandbox's last stop, or nil.
function M.read_stopped(id)
  return read_json(M.dir(id) .. "/stopped.json", M.MAX_RECORD_BYTES)
end

-- Drop tombstones older than GONE_KEEP_S, and the oldest beyond GONE_MAX.
local function prune_gone()
  local list = {}
  local oldest = os.time() - M.GONE_KEEP_S
  for _, name in ipairs(sys.list_dir(M.gone_root())) do
    local path = M.gone_root() .. "/" .. name
    local t = lfs.symlinkattributes(path, "modification") or 0
    if t < oldest then os.remove(path) else list[#list + 1] = { path = path, t = t } end
  end
  table.sort(list, function(a, b) return a.t > b.t end)
  for i = M.GONE_MAX + 1, #list do os.remove(list[i].path) end
end

--- Record that the sandbox was deleted, and why ("killed", "killed by its idle timeout ...").
function M.write_gone(id, reason)
  if not M.valid_id(id) then return nil end
  sys.mkdir_p(M.gone_root(), "700")
  local ok, err = sys.write_file(M.gone_root() .. "/" .. id, json.encode { reason = reason, at = M.now() }, "600")
  prune_gone()
  return ok, err
end

--- {reason=, at=} of a deleted sandbox, or nil when there is no record of it.
function M.read_gone(id)
  if not M.valid_id(id) then return nil end
  return read_json(M.gone_root() .. "/" .. id, M.MAX_RECORD_BYTES)
end

-- Lines of the log that carry the sandbox's own text start with this (after
-- the time): never quoted as the host's words.
M.SANDBOX_TAG = "[sandbox]"
M.MAX_LOG_BYTES = 1048576 -- then the log is rotated (sandbox.log.1) at the next start

--- The record the supervisor writes once dshd answers.
function M.ready_path(id)
  return M.dir(id) .. "/ready"
end

--- Last lines the host wrote to the sandbox log, for error messages (its
-- last 8 KiB only; the sandbox's own lines are left out, unless `quoted`:
-- then its last few follow, quoted as the sandbox's, never as the host's).
function M.log_tail(id, n, quoted)
  local f = io.open(M.dir(id) .. "/sandbox.log", "rb")
  if not f then return "" end
  local size = f:seek("end") or 0
  f:seek("set", math.max(0, size - 8192))
  local text = f:read(8192) or ""
  f:close()
  -- a cut first line could be the tail of one of the sandbox's
  if size > 8192 then text = text:match("\n(.*)$") or "" end
  local lines, theirs = {}, {}
  local tag = "^%S+ " .. M.SANDBOX_TAG:gsub("%p", "%%%0") .. " "
  for line in text:gmatch("[^\n]+") do
    if line:match(tag) then theirs[#theirs + 1] = line:gsub(tag, "", 1) else lines[#lines + 1] = line end
  end
  local from = math.max(1, #lines - (n or 5) + 1)
  local out = table.concat(lines, "\n", from)
  if quoted and #theirs > 0 then
    local said = {}
    for i = math.max(1, #theirs - 2), #theirs do said[#said + 1] = string.format("%q", theirs[i]:sub(1, 300)) end
    out = out .. "\n(the sandbox's own last words, unverified: " .. table.concat(said, " ") .. ")"
  end
  return out
end

return M
