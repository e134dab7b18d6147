--- dsh.sandbox.state: where a local sandbox lives on the host and its records.
--
-- <state>/sandboxes/<id>/      (only the host writes here; the sandbox sees
--                               none of it but the three directories below)
--   meta.json        config, limits, host uid, access token (0600)
--   runtime.json     the running sandbox: its groups and first processes (0600)
--   supervisor.pid   "pid starttime" of the supervisor while running (0600)
--   dshd.sock        dshd's socket, moved here by the supervisor once dshd
--                    listens: the only way the host reaches dshd
--   dshd             mount point for the dshd binary (host uid sandboxes)
--   etc/             generated passwd, group, hosts, hostname, resolv.conf
--   sandbox.log      supervisor and dshd diagnostics (0600)
--   home/ tmp/ run/  the sandbox's /home/user, /tmp and /run/dsh: writable
--                    from inside, so the host never reads anything in them
--                    to find or trust the sandbox
-- Every record is read without following links, as a regular file of bounded
-- size (dsh.hostfs.read_regular).
local hostfs = require "dsh.hostfs"
local json = require "dsh.json"
local sys = require "dsh.sysutil"

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
  local ok, v = pcall(json.decode, text)
  if not ok or type(v) ~= "table" then return nil end
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

function M.exists(id)
  return M.valid_id(id) and sys.is_dir(M.dir(id)) and sys.exists(M.dir(id) .. "/meta.json")
end

function M.ids()
  local out = {}
  for _, name in ipairs(sys.list_dir(M.root())) do
    if M.exists(name) then out[#out + 1] = name end
  end
  return out
end

--- Last lines of the sandbox log, for error messages (its last 8 KiB only).
function M.log_tail(id, n)
  local f = io.open(M.dir(id) .. "/sandbox.log", "rb")
  if not f then return "" end
  local size = f:seek("end") or 0
  f:seek("set", math.max(0, size - 8192))
  local text = f:read(8192) or ""
  f:close()
  local lines = {}
  for line in text:gmatch("[^\n]+") do lines[#lines + 1] = line end
  local from = math.max(1, #lines - (n or 5) + 1)
  return table.concat(lines, "\n", from)
end

return M
