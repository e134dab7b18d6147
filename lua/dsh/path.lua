--- dsh.path: POSIX path strings, lexically — the one normaliser of the host.
--
-- Owns: joining a path onto a base and normalising `.` and `..` as POSIX
-- resolution does on text (a sandbox path is a string here: its symlinks are
-- the sandbox's to resolve). Never touches a filesystem: where a path must
-- be resolved canonically (symlinks followed), the world it names does that
-- (fs backends' realpath, the LSP source reader).
local M = {}

--- Lexical normalisation of an absolute path ("/a/./b/../c" -> "/a/c"; ".."
-- above the root stays at the root).
---@param abs string
---@return string
function M.normalize(abs)
  local out = {}
  for seg in abs:gmatch("[^/]+") do
    if seg == ".." then
      out[#out] = nil
    elseif seg ~= "." then
      out[#out + 1] = seg
    end
  end
  return "/" .. table.concat(out, "/")
end

--- path if it is absolute, else path after base (no normalisation: the
--- caller's world may resolve it otherwise).
---@param base string
---@param path string
---@return string
function M.join(base, path)
  if path:sub(1, 1) == "/" then return path end
  return base:gsub("/+$", "") .. "/" .. path
end

--- The POSIX resolution of path (nil: base itself) against the absolute
--- directory base, normalised.
---@param base string
---@param path string|nil
---@return string
function M.resolve(base, path)
  return M.normalize(path and M.join(base, path) or base)
end

return M
