--- dsh._ffi: the C declarations of the core and the loaded library.
--
-- The declarations are kept one file per primitive in lua/dsh/_ffi/ (each
-- mirrors its header in core/include/dsh/) and all declared here, once.
-- Only lua/dsh/* modules may require this. The library is found, in order, at
-- $DSH_LIB, $DSH_BUILD_DIR/lib, this tree's build/lib, package.cpath (where
-- luarocks installs it), then by the system loader.
local ffi = require "ffi"

ffi.cdef [[
/* errors.h */
const char *dsh_strerror(int status);
const char *dsh_status_name(int status);
]]

for _, part in ipairs { "loop", "codecs", "proc", "http", "sys", "sha256", "hostfs", "envd",
  "termtext", "termscreen", "tty" } do
  ffi.cdef(require("dsh._ffi." .. part))
end

local function here()
  local src = debug.getinfo(1, "S").source
  return src:sub(1, 1) == "@" and src:sub(2):match("^(.*)/[^/]*$") or "."
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

local function load_library()
  local candidates = {}
  if os.getenv("DSH_LIB") then candidates[#candidates + 1] = os.getenv("DSH_LIB") end
  if os.getenv("DSH_BUILD_DIR") then
    candidates[#candidates + 1] = os.getenv("DSH_BUILD_DIR") .. "/lib/libdsh.so"
  end
  candidates[#candidates + 1] = here() .. "/../../build/lib/libdsh.so"
  -- an installed tree (cmake --install or luarocks): beside the C modules
  local installed = package.searchpath("libdsh", package.cpath)
  if installed then candidates[#candidates + 1] = installed end
  for _, path in ipairs(candidates) do
    if exists(path) then return ffi.load(path), path end
  end
  local ok, lib = pcall(ffi.load, "dsh")
  if ok then return lib, "libdsh.so" end
  error("dsh: cannot find libdsh.so (build with `make`, or set DSH_LIB); tried: "
    .. table.concat(candidates, ", "), 0)
end

local C, path = load_library()

local M = { ffi = ffi, C = C, path = path }

--- Name and message of a core status, e.g. "ELIMIT", "limit exceeded".
function M.status(rc)
  return ffi.string(C.dsh_status_name(rc)), ffi.string(C.dsh_strerror(rc))
end

--- A reusable error buffer for calls that take (char *err, size_t errlen).
M.ERRLEN = 512
function M.errbuf()
  return ffi.new("char[?]", M.ERRLEN)
end

return M
