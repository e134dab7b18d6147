--- dsh.core._ffi: the loaded core library and its C declarations.
--
-- Only binding modules in lua/dsh/ may require this. The declarations are not
-- written in Lua: the build preprocesses every header in core/include/dsh into
-- plain declarations (core/ffi/cdefs.cmake) and compiles that text into
-- libdsh.so, whose dsh_ffi_cdefs() hands it to ffi.cdef here. The same list
-- of functions is the library's linker version script, so what Lua can declare
-- is exactly what the library exports. Statuses and other constants are used
-- by name (C.DSH_EAGAIN, C.DSH_EV_HTTP_DONE), never as numbers.
-- spec/01-core/10-ffi_contract_spec.lua checks the loaded declarations against
-- the compiled library (every function, struct size, field offset and
-- constant; every exported symbol declared) with dsh.core._ffi.check.
--
-- A new core primitive adds its header and nothing else: put the FFI surface
-- in core/include/dsh/<name>.h (fixed-width integers, opaque or plain structs,
-- enums, prototypes; no macros in prototypes, no varargs, attributes, static
-- inline functions or bitfields, and no includes but <stddef.h>, <stdint.h> and
-- other dsh/ headers: the build stops on any of them, naming the header), the
-- code in core/src/<name>.c, and C-only helpers (for core modules and dshd) in
-- core/internal/dsh/<name>.h, which Lua never sees and the library does not
-- export. Rebuild, and C.dsh_<name>_* is callable from the binding module
-- lua/dsh/<name>.lua. Only libc calls are declared by hand, in
-- lua/dsh/core/_ffi/{sys,hostfs}.lua.
--
-- The library is found, in order, at $DSH_LIB, $DSH_BUILD_DIR/lib, this
-- tree's build/lib, package.cpath (where luarocks and cmake --install put it),
-- then by the system loader.
local ffi = require "ffi"

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
  candidates[#candidates + 1] = here() .. "/../../../../build/lib/libdsh.so"
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

-- The one declaration written here: how to ask the library for the rest.
ffi.cdef "const char *dsh_ffi_cdefs(void);"
local cdefs = ffi.string(C.dsh_ffi_cdefs())
ffi.cdef(cdefs)
for _, part in ipairs { "sys", "hostfs" } do
  ffi.cdef(require("dsh.core._ffi." .. part))
end

local M = { ffi = ffi, C = C, path = path, cdefs = cdefs }

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
