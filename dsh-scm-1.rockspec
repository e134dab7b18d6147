rockspec_format = "3.0"
package = "dsh"
version = "scm-1"
source = { url = "git+file://." }
description = {
  summary = "One remote coding world for Lua agent hosts: files, commands, PTYs and more on one sandbox",
  detailed = [[
dsh is a C core with LuaJIT glue. Files, one-shot commands and Bash, terminals,
language servers and a Code Mode runtime all act on the same sandbox: a local
dshd in Linux namespaces by default, or an E2B cloud sandbox.]],
  license = "MIT",
}
dependencies = { "lua == 5.1" } -- LuaJIT 2.1; lua-cjson and busted come from Debian
-- libev, libcurl, libmicrohttpd and jansson are found by CMake (pkg-config),
-- which also knows Debian's multiarch include directories.
-- bin/dsh runs under LuaJIT and finds its modules beside its own bin
-- directory: no wrapper (LuaRocks' would run it with lua5.1). Where a
-- LuaRocks configuration wraps it anyway, it runs itself again under luajit.
deploy = { wrap_bin_scripts = false }
build = {
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
    DSH_CLIBDIR = "$(LIBDIR)",
    CMAKE_INSTALL_BINDIR = "$(BINDIR)",
    DSH_LUADIR = "$(LUADIR)",
    DSH_SPECS = "OFF",
  },
}
