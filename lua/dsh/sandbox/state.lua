--- dsh.sandbox.state: where a local sandbox lives on the host and its record.
--
-- <state>/sandboxes/<id>/
--   meta.json        config, token, state ("running"|"paused"), address (0600)
--   home/ tmp/       the sandbox's /home/user and /tmp
--   run/             /run/dsh inside: dshd's ready file and unix socket
--   etc/             generated passwd, group, hosts, hostname
--   supervisor.pid   "pid starttime" of the supervisor while running
--   sandbox.log      supervisor and dshd diagnostics
local json = require "dsh.json"
local sys = require "dsh.sysutil"

local M = {}

function M.root()
  return sys.state_dir() .. "/sandboxes"
end

function M.dir(id)
  return M.root() .. "/" .. id
end

function M.valid_id(id)
  return type(id) == "string" and id:match("^[a-z0-9]+$") ~= nil and #id >= 8 and #id <= 64
end

function M.read_meta(id)
  local text = sys.read_file(M.dir(id) .. "/meta.json")
  if not text then return nil end
  local meta = json.decode(text)
  if type(meta) ~= "table" then return nil end
  return meta
end

function M.write_meta(id, meta)
  return sys.write_file(M.dir(id) .. "/meta.json", json.encode(meta), "600")
end

--- The supervisor's pid when it is alive, else nil.
function M.supervisor_pid(id)
  return sys.live_pid(sys.read_file(M.dir(id) .. "/supervisor.pid"))
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

--- Last lines of the sandbox log, for error messages.
function M.log_tail(id, n)
  local text = sys.read_file(M.dir(id) .. "/sandbox.log") or ""
  local lines = {}
  for line in text:gmatch("[^\n]+") do lines[#lines + 1] = line end
  local from = math.max(1, #lines - (n or 5) + 1)
  return table.concat(lines, "\n", from)
end

return M
