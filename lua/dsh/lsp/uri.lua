--- dsh.lsp.uri: file URIs for absolute POSIX paths, both ways.
--
-- from_path follows the reference's e2bFileUri: "file://" and each path
-- segment percent-encoded as encodeURIComponent does (A-Z a-z 0-9 and
-- -_.!~*'() stay as they are), so `/workspace/a b#c.ts` becomes
-- `file:///workspace/a%20b%23c.ts`. to_path accepts any file URI a server
-- sends (other encodings of the same path, an empty or `localhost`
-- authority) and returns nil for other schemes, so results compare by path.
local errors = require "dsh.errors"

local M = {}

local function encode_segment(s)
  return (s:gsub("[^%w%-_%.!~%*'%(%)]", function(c) return string.format("%%%02X", c:byte()) end))
end

--- file:// URI of an absolute path; raises (naming prefix) for a relative one.
---@param path string
---@param prefix string|nil message prefix, default "dsh.lsp"
---@return string
function M.from_path(path, prefix)
  if type(path) ~= "string" or path:sub(1, 1) ~= "/" then
    errors.misuse(prefix or "dsh.lsp", 'expected an absolute remote path, received "%s"', tostring(path))
  end
  local segs = {}
  for seg in (path .. "/"):gmatch("([^/]*)/") do segs[#segs + 1] = encode_segment(seg) end
  return "file://" .. table.concat(segs, "/")
end

--- The absolute path a file URI names, or nil (another scheme, a remote
--- authority, a bad escape, a NUL).
---@param uri string
---@return string|nil
function M.to_path(uri)
  if type(uri) ~= "string" then return nil end
  local scheme, rest = uri:match("^([%a][%w+.-]*):(.*)$")
  if not scheme or scheme:lower() ~= "file" then return nil end
  local path
  if rest:sub(1, 2) == "//" then
    local auth, p = rest:match("^//([^/]*)(.*)$")
    if auth ~= "" and auth:lower() ~= "localhost" then return nil end
    path = p
  else
    path = rest
  end
  path = path:gsub("[?#].*$", "")
  if path:sub(1, 1) ~= "/" then return nil end
  if path:find("%%[^%x]") or path:find("%%%x?$") or path:find("%%%x[^%x]") then return nil end
  path = path:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end)
  if path:find("\0", 1, true) then return nil end
  return path
end

return M
