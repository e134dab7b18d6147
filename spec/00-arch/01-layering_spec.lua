-- What may depend on what in dsh — the layering, as a test.
--
-- Data flows down one path, and the folder tree shows it:
--
--   tool          lua/dsh/tools/         what a model calls (bash, ...): speaks to seams only
--   seam          lua/dsh/<seam>*.lua    ctx.fs, ctx.subprocess, ctx.bash, ctx.pty, ctx.lsp,
--                 lua/dsh/<seam>/        ctx.codeRuntime and dsh.context: written once, knows no
--                                        provider, no wire and no FFI
--   provider      providers/<name>/      a seam's backend over ctx.e2b (*_e2b, the e2b owner,
--                                        the overlay): never loads the host process binding
--   local         providers/*_local/,    a seam's backend on this machine: may use dsh.proc
--     provider    providers/e2b/local_backend.lua
--   envd client   lua/dsh/envd/          the envd wire protocol (dshd or E2B's envd)
--   local sandbox lua/dsh/sandbox/       dshd in bubblewrap on this machine
--   binding       lua/dsh/<binding>.lua  the only Lua that touches the FFI (`ffi`, dsh._ffi):
--                                        loop, http, proc, codecs, hostfs, sysutil, ...
--   ffi           lua/dsh/_ffi*          the C declarations
--   core (C)      core/                  includes no Lua header and nothing of remote/
--   dshd (C)      remote/dshd/           the sandbox daemon: links no Lua
--
-- Beside the path: the runtime (dsh.async, dsh.errors, dsh.signals, and
-- dsh.schema, the config checks every provider shares) that every layer may
-- use, the application (bin/dsh, dsh.cli, dsh.poc, dsh.shell) that may use
-- everything, and the façade (lua/dsh/init.lua) that loads modules on demand.
--
-- Every Lua file must belong to a layer (LAYERS: the first matching pattern
-- wins, so the explicit binding list comes before the seam patterns that
-- would also match lua/dsh/lspframe.lua). Seams and providers still to be
-- written are covered by their names: lua/dsh/pty*, lua/dsh/lsp*,
-- lua/dsh/code_runtime*, providers/pty_*, providers/lsp_*,
-- providers/code_runtime_*, providers/overlay. A new binding module is added
-- to BINDINGS on purpose: touching the FFI is a privilege.
--
-- The engine (spec/helpers/layering.lua) reads every `require` (string
-- literals, also in computed and pcall'd requires) and every `#include`,
-- and reports each forbidden edge naming both files and the rule.
local helpers = require "helpers"
local layering = require "helpers.layering"

local BINDINGS = {
  "loop", "http", "proc", "envelope", "frame", "lspframe", "base64", "utf8", "ledger", "sha256", "hostfs",
  "sysutil", "envd_events", "termscreen", "termtext",
  "bridge", -- Code Mode frames decoded and built in C (the host never looks at a payload byte in Lua)
  "tty", -- the host's own terminal (raw mode, window size, stdin on the loop) for `dsh shell`
  "hostwatch", -- inotify on the loop, for fs-local's watch
}

local function binding_paths()
  local out = {}
  for _, b in ipairs(BINDINGS) do
    out[#out + 1] = "^lua/dsh/" .. b .. "%.lua$"
    out[#out + 1] = "^lua/dsh/" .. b .. "/" -- its private parts (dsh.http._response)
  end
  return out
end

local SEAMS = { "fs", "subprocess", "context", "bash", "pty", "lsp", "code_runtime" }

local function seam_paths()
  local out = {}
  for _, s in ipairs(SEAMS) do
    out[#out + 1] = "^lua/dsh/" .. s .. "[%w_]*%.lua$"
    out[#out + 1] = "^lua/dsh/" .. s .. "[%w_]*/"
  end
  return out
end

local LAYERS = {
  { name = "ffi", paths = { "^lua/dsh/_ffi%.lua$", "^lua/dsh/_ffi/" } },
  { name = "binding", paths = binding_paths() },
  { name = "façade", paths = { "^lua/dsh/init%.lua$" } },
  { name = "runtime", paths = { "^lua/dsh/async%.lua$", "^lua/dsh/errors%.lua$", "^lua/dsh/signals%.lua$",
    "^lua/dsh/schema%.lua$",
    "^lua/dsh/json%.lua$", -- lua-cjson configured once: a codec, no ffi, no I/O
    "^lua/dsh/path%.lua$", -- POSIX path strings, lexically: the one normaliser
    "^lua/dsh/faults%.lua$", -- fault-injection points (a seam for specs and dsh poc)
    "^lua/dsh/node%.lua$" } }, -- where the project's Node is: path lookups for the sandbox and Code Mode
  { name = "tool", paths = { "^lua/dsh/tools/" } },
  { name = "seam", paths = seam_paths() },
  { name = "envd client", paths = { "^lua/dsh/envd%.lua$", "^lua/dsh/envd/" } },
  { name = "local sandbox", paths = { "^lua/dsh/sandbox%.lua$", "^lua/dsh/sandbox/" } },
  { name = "application", paths = { "^bin/dsh$", "^lua/dsh/cli%.lua$", "^lua/dsh/poc%.lua$", "^lua/dsh/poc/",
    "^lua/dsh/shell%.lua$", "^lua/dsh/shell/" } },
  { name = "local provider", paths = { "^providers/[%w_]+_local/", "^providers/e2b/local_backend%.lua$" } },
  { name = "provider", paths = {
    "^providers/e2b/", "^providers/[%w_]+_e2b/", "^providers/overlay/", "^providers/bash/",
    "^providers/", -- any other provider is a remote one until it is named a local backend
  } },
}

local ABOVE_BINDINGS = {
  "seam", "tool", "provider", "local provider", "envd client", "local sandbox", "application", "façade",
}

local RULES = {
  { rule = "only binding modules touch ffi or dsh._ffi",
    from_except = { "ffi", "binding", "façade" }, to_modules = { "ffi" }, to_module_prefixes = { "dsh._ffi" } },
  { rule = "a seam requires no provider",
    from = { "seam" }, to_layers = { "provider", "local provider" } },
  { rule = "a seam requires no envd module",
    from = { "seam" }, to_layers = { "envd client" } },
  { rule = "a seam requires no tool (tools sit above seams)",
    from = { "seam" }, to_layers = { "tool" } },
  { rule = "a provider loads the host process binding (dsh.proc) only if it is a local backend",
    transitive = true, from = { "provider" }, never_reach = { "dsh.proc" }, stop = { "local provider" } },
  { rule = "tools require seams only (and the runtime: dsh.errors, dsh.async, dsh.signals, dsh.json)",
    from = { "tool" }, allow_layers = { "seam", "tool", "runtime" } },
  { rule = "the envd client requires nothing above it (no seam, provider, tool or sandbox)",
    from = { "envd client" }, to_layers = { "seam", "tool", "provider", "local provider", "local sandbox",
      "application", "façade" } },
  { rule = "a binding requires only bindings, the runtime and libraries",
    from = { "binding", "ffi" }, to_layers = ABOVE_BINDINGS },
  { rule = "the runtime requires only bindings and itself",
    from = { "runtime" }, to_layers = ABOVE_BINDINGS },
  { rule = "nothing but the application requires the application",
    from_except = { "application" }, to_layers = { "application" } },
}

-- KNOWN EXCEPTIONS: an edge the tree still has while it is being removed,
-- with the reason. An exception that no longer occurs fails the test, so
-- this table can only shrink. It is empty: the tree obeys every rule.
local KNOWN_EXCEPTIONS = {}

-- The rules as the specs below hand them to the engine.
local function check(tree, exceptions)
  return layering.check(tree, LAYERS, RULES, exceptions)
end

-- A tree of the given files plus a clean build description.
local function tree(files)
  local t = { files = {
    ["core/CMakeLists.txt"] = "target_link_libraries(dsh_core PUBLIC ${EV_LIBRARY} PkgConfig::CURL util)",
    ["remote/dshd/CMakeLists.txt"] = "target_link_libraries(dshd dsh_core PkgConfig::MHD)",
  } }
  for k, v in pairs(files) do t.files[k] = v end
  return t
end

-- The one violation of a tree, asserted to name what it must.
local function only_violation(t, ...)
  local v = check(t)
  assert.equal(1, #v, "expected one violation, got:\n" .. table.concat(v, "\n"))
  for i = 1, select("#", ...) do
    local want = select(i, ...)
    assert.is_truthy(v[1]:find(want, 1, true), "«" .. want .. "» not in: " .. v[1])
  end
  return v[1]
end

describe("the layering of the tree", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("holds: no forbidden require, include or link", function()
    local v = check(layering.from_disk(), KNOWN_EXCEPTIONS)
    assert(#v == 0, #v .. " layering violations:\n  " .. table.concat(v, "\n  "))
  end)

  it("reads every require of the tree (a file with none would hide a broken reader)", function()
    local t = layering.from_disk()
    local edges = layering.edges(t, LAYERS)
    local seen = {}
    for _, e in ipairs(edges) do seen[e.from .. " -> " .. e.module] = true end
    -- a literal, a computed require, a pcall'd one, one inside a string-heavy file
    assert.is_true(seen["lua/dsh/fs.lua -> dsh.fs._read"])
    assert.is_true(seen["providers/e2b/init.lua -> dsh.providers.e2b.local_backend"])
    assert.is_true(seen["providers/e2b/init.lua -> dsh.providers.e2b.cloud_backend"])
    assert.is_true(seen["bin/dsh -> lfs"])
    assert.is_true(seen["providers/subprocess_e2b/compat.lua -> dsh.signals"])
    -- a require in a comment is no edge
    assert.is_nil(seen["lua/dsh/context.lua -> dsh.providers.e2b"])
  end)

  it("places the seams and providers to come by their names", function()
    local want = {
      ["lua/dsh/pty.lua"] = "seam", ["lua/dsh/pty/session.lua"] = "seam",
      ["lua/dsh/lsp.lua"] = "seam", ["lua/dsh/lsp/_rpc.lua"] = "seam",
      ["lua/dsh/code_runtime.lua"] = "seam", ["lua/dsh/code_runtime/_wire.lua"] = "seam",
      ["lua/dsh/lspframe.lua"] = "binding", ["lua/dsh/http/_response.lua"] = "binding",
      ["lua/dsh/tools/lsp.lua"] = "tool", ["lua/dsh/tools/run_code.lua"] = "tool",
      ["providers/pty_local/init.lua"] = "local provider", ["providers/lsp_local/init.lua"] = "local provider",
      ["providers/code_runtime_local/init.lua"] = "local provider",
      ["providers/pty_e2b/init.lua"] = "provider", ["providers/lsp_e2b/init.lua"] = "provider",
      ["providers/code_runtime_e2b/init.lua"] = "provider", ["providers/overlay/init.lua"] = "provider",
      ["providers/e2b/local_backend.lua"] = "local provider", ["providers/e2b/cloud_backend.lua"] = "provider",
      ["lua/dsh/poc/lsp.lua"] = "application",
    }
    for path, layer in pairs(want) do
      assert.equal(layer, layering.layer_of(LAYERS, path), path)
    end
  end)
end)

describe("the layering test", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("fails a module touching ffi or dsh._ffi outside the bindings", function()
    only_violation(tree {
      ["lua/dsh/subprocess.lua"] = 'local ffi = require "ffi"',
    }, "lua/dsh/subprocess.lua:1", "requires ffi", "only binding modules touch ffi")
    only_violation(tree {
      ["providers/fs_local/init.lua"] = 'local F = require("dsh._ffi")',
      ["lua/dsh/_ffi.lua"] = "",
    }, "providers/fs_local/init.lua:1", "dsh._ffi = lua/dsh/_ffi.lua", "only binding modules touch ffi")
    assert.same({}, check(tree { ["lua/dsh/hostfs.lua"] = 'local F = require "dsh._ffi"', ["lua/dsh/_ffi.lua"] = "" }))
  end)

  it("fails a seam requiring a provider, an envd module or a tool", function()
    only_violation(tree {
      ["lua/dsh/fs.lua"] = '\n\nlocal p = require "dsh.providers.fs_e2b"',
      ["providers/fs_e2b/init.lua"] = "",
    }, "lua/dsh/fs.lua:3", "providers/fs_e2b/init.lua", "a seam requires no provider")
    only_violation(tree {
      ["lua/dsh/pty/session.lua"] = 'local envd = require "dsh.envd.process"',
      ["lua/dsh/envd/process.lua"] = "",
    }, "lua/dsh/pty/session.lua:1", "lua/dsh/envd/process.lua", "a seam requires no envd module")
    only_violation(tree {
      ["lua/dsh/lsp.lua"] = 'local t = require "dsh.tools.lsp"',
      ["lua/dsh/tools/lsp.lua"] = 'local lsp = require "dsh.lsp"',
    }, "lua/dsh/lsp.lua:1", "lua/dsh/tools/lsp.lua", "a seam requires no tool")
  end)

  it("fails a remote provider that loads dsh.proc, also through another module, but not a local one", function()
    only_violation(tree {
      ["providers/subprocess_e2b/remote.lua"] = 'local n = require("dsh.proc").signum("TERM")',
      ["lua/dsh/proc.lua"] = "",
    }, "providers/subprocess_e2b/remote.lua reaches dsh.proc", "only if it is a local backend")
    only_violation(tree {
      ["providers/code_runtime_e2b/init.lua"] = 'local rt = require "dsh.code_runtime"',
      ["lua/dsh/code_runtime.lua"] = 'local proc = require "dsh.proc"',
      ["lua/dsh/proc.lua"] = "",
    }, "providers/code_runtime_e2b/init.lua reaches dsh.proc through providers/code_runtime_e2b/init.lua"
      .. " -> lua/dsh/code_runtime.lua -> dsh.proc")
    assert.same({}, check(tree {
      ["providers/pty_local/init.lua"] = 'local proc = require "dsh.proc"',
      ["providers/e2b/init.lua"] = 'local b = require "dsh.providers.e2b.local_backend"',
      ["providers/e2b/local_backend.lua"] = 'local proc = require "dsh.proc"',
      ["lua/dsh/proc.lua"] = "",
    }))
  end)

  it("fails a tool requiring anything but seams and the runtime", function()
    only_violation(tree {
      ["lua/dsh/tools/bash.lua"] = 'local b = require "dsh.bash"\nlocal h = require "dsh.http"',
      ["lua/dsh/bash.lua"] = "", ["lua/dsh/http.lua"] = "",
    }, "lua/dsh/tools/bash.lua:2", "lua/dsh/http.lua", "tools require seams only")
    only_violation(tree {
      ["lua/dsh/tools/run_code.lua"] = 'local p = require "dsh.providers.code_runtime_e2b"',
      ["providers/code_runtime_e2b/init.lua"] = "",
    }, "lua/dsh/tools/run_code.lua:1", "providers/code_runtime_e2b/init.lua", "tools require seams only")
  end)

  it("fails lower layers reaching up, and a file no layer names", function()
    only_violation(tree {
      ["lua/dsh/envd/files.lua"] = 'local fs = require "dsh.fs"', ["lua/dsh/fs.lua"] = "",
    }, "lua/dsh/envd/files.lua:1", "lua/dsh/fs.lua", "the envd client requires nothing above it")
    only_violation(tree {
      ["lua/dsh/http.lua"] = 'local envd = require "dsh.envd"', ["lua/dsh/envd/init.lua"] = "",
    }, "lua/dsh/http.lua:1", "lua/dsh/envd/init.lua", "a binding requires only bindings")
    only_violation(tree {
      ["lua/dsh/async.lua"] = 'local s = require "dsh.subprocess"', ["lua/dsh/subprocess.lua"] = "",
    }, "lua/dsh/async.lua:1", "lua/dsh/subprocess.lua", "the runtime requires only bindings")
    only_violation(tree {
      ["providers/bash/init.lua"] = 'local poc = require "dsh.poc"', ["lua/dsh/poc.lua"] = "",
    }, "providers/bash/init.lua:1", "lua/dsh/poc.lua", "nothing but the application")
    only_violation(tree { ["lua/dsh/newthing.lua"] = "" }, "lua/dsh/newthing.lua belongs to no layer")
    only_violation(tree { ["lua/dsh/fs.lua"] = 'require "dsh.fs._gone"' }, "dsh.fs._gone, which is no file")
  end)

  it("fails the C core including a Lua header or anything of remote/", function()
    only_violation(tree {
      ["core/src/loop.c"] = '#include <ev.h>\n#include "lua.h"\n',
    }, "core/src/loop.c:2", "lua.h", "the C core includes no Lua header")
    only_violation(tree {
      ["core/src/buf.c"] = '#include <stdint.h>\n#include <luajit-2.1/lauxlib.h>\n',
    }, "core/src/buf.c:2", "the C core includes no Lua header")
    only_violation(tree {
      ["core/src/http.c"] = '#include "../../remote/dshd/dshd.h"\n',
      ["remote/dshd/dshd.h"] = "",
    }, "core/src/http.c:1", "remote/dshd/dshd.h", "the C core includes nothing of remote/")
    only_violation(tree {
      ["core/src/proc.c"] = '#include "replay.h"\n',
      ["remote/dshd/replay.h"] = "",
    }, "core/src/proc.c:1", "remote/dshd/replay.h", "the C core includes nothing of remote/")
    assert.same({}, check(tree { ["core/src/proc.c"] = '#include "dsh/proc.h"\n', ["core/include/dsh/proc.h"] = "" }))
  end)

  it("fails dshd linking Lua, directly or through a library it links", function()
    local t = tree {}
    t.files["remote/dshd/CMakeLists.txt"] = "target_link_libraries(dshd dsh_core PkgConfig::LUAJIT)"
    only_violation(t, "remote/dshd/CMakeLists.txt links PkgConfig::LUAJIT", "dshd links no Lua")
    t = tree {}
    t.files["core/CMakeLists.txt"] = "target_link_libraries(dsh_core PUBLIC ${EV_LIBRARY} ${LUAJIT_LIBRARIES})"
    only_violation(t, "core/CMakeLists.txt links ${LUAJIT_LIBRARIES} (through dshd -> dsh_core)")
  end)

  it("keeps known exceptions honest: each must still occur", function()
    local t = tree { ["lua/dsh/envd/init.lua"] = 'local F = require "dsh._ffi"', ["lua/dsh/_ffi.lua"] = "" }
    assert.same({}, check(t, { ["lua/dsh/envd/init.lua -> dsh._ffi"] = "being moved" }))
    assert.same({ "known exception lua/dsh/sandbox/init.lua -> dsh._ffi no longer occurs: "
      .. "delete it from KNOWN_EXCEPTIONS" },
      check(t, { ["lua/dsh/envd/init.lua -> dsh._ffi"] = "x", ["lua/dsh/sandbox/init.lua -> dsh._ffi"] = "y" }))
  end)
end)

describe("the built dshd", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("loads no Lua library (its ELF dynamic section)", function()
    local bin = helpers.bin("dshd")
    assert(helpers.read_file(bin), "no dshd at " .. bin .. ": build first")
    local p = assert(io.popen("readelf -d '" .. bin .. "' 2>&1"))
    local out = p:read("*a")
    p:close()
    local needed = {}
    for lib in out:gmatch("%(NEEDED%)%s+Shared library: %[([^%]]+)%]") do needed[#needed + 1] = lib end
    assert.is_true(#needed > 0, "readelf listed no NEEDED entry:\n" .. out)
    for _, lib in ipairs(needed) do
      assert.is_falsy(lib:lower():find("lua", 1, true), "dshd needs " .. lib)
    end
  end)
end)
