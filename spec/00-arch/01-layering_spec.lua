-- What may depend on what in dsh — the layering, as a test.
--
-- Data flows down one path, and the folder tree shows it: a module's layer is
-- the folder it is in, never a list of names.
--
--   application   lua/dsh/app/, bin/dsh  the command line (cli, poc, shell): may use everything
--   tool          lua/dsh/tools/         what a model calls (bash, ...): speaks to seams only
--   seam          lua/dsh/<seam>/        ctx.fs, ctx.subprocess, ctx.bash, ctx.pty, ctx.lsp,
--                                        ctx.codeRuntime and dsh.context, each an init.lua and
--                                        its parts: written once, knows no provider, no wire
--                                        and no FFI
--   provider      providers/<name>/      a seam's backend over ctx.e2b (*_e2b, the e2b owner,
--                                        the overlay, bash): never loads the host process binding
--   local         providers/*_local/,    a seam's backend on this machine: may use dsh.core.proc
--     provider    providers/e2b/local_backend.lua
--   envd client   lua/dsh/envd/          the envd wire protocol (dshd or E2B's envd)
--   local sandbox lua/dsh/sandbox/       dshd in bubblewrap on this machine
--   binding       lua/dsh/core/          the only Lua that touches the FFI (`ffi`,
--                                        dsh.core._ffi): loop, http, proc, codecs, hostfs, ...
--   ffi           lua/dsh/core/_ffi/     the C declarations
--   core (C)      core/                  includes no Lua header and nothing of remote/
--   dshd (C)      remote/dshd/           the sandbox daemon: links no Lua
--
-- Beside the path: the runtime, the flat files of lua/dsh/ (dsh.async,
-- dsh.errors, dsh.signals, dsh.schema, dsh.json, dsh.path, dsh.faults,
-- dsh.node), that every layer may use, and the façade (lua/dsh/init.lua)
-- that loads modules on demand by their short names.
--
-- Every Lua file must belong to a layer (LAYERS: the first matching pattern
-- wins, so the named folders come before the seam pattern, which takes any
-- other folder of lua/dsh/: a new folder there is a seam until it is named
-- otherwise). A new binding goes into lua/dsh/core/ on purpose: touching the
-- FFI is a privilege.
--
-- A module whose name has a part starting with `_` is private to the folder
-- that part is in (dsh.lsp._config to lua/dsh/lsp/, dsh.core._ffi to
-- lua/dsh/core/): nothing outside that folder requires it.
--
-- The engine (spec/helpers/layering.lua) reads every `require` (string
-- literals, also in computed and pcall'd requires) and every `#include`,
-- and reports each forbidden edge naming both files and the rule.
local helpers = require "helpers"
local layering = require "helpers.layering"
local lfs = require "lfs"

local LAYERS = {
  { name = "ffi", paths = { "^lua/dsh/core/_ffi/" } },
  { name = "binding", paths = { "^lua/dsh/core/" } },
  { name = "façade", paths = { "^lua/dsh/init%.lua$" } },
  { name = "runtime", paths = { "^lua/dsh/[%w_]+%.lua$" } },
  { name = "application", paths = { "^bin/dsh$", "^lua/dsh/app/" } },
  { name = "tool", paths = { "^lua/dsh/tools/" } },
  { name = "envd client", paths = { "^lua/dsh/envd/" } },
  { name = "local sandbox", paths = { "^lua/dsh/sandbox/" } },
  { name = "seam", paths = { "^lua/dsh/[%w_]+/" } },
  { name = "local provider", paths = { "^providers/[%w_]+_local/", "^providers/e2b/local_backend%.lua$" } },
  { name = "provider", paths = { "^providers/" } }, -- a remote one until it is named a local backend
}

local ABOVE_BINDINGS = {
  "seam", "tool", "provider", "local provider", "envd client", "local sandbox", "application", "façade",
}

local RULES = {
  { rule = "only binding modules touch ffi or dsh.core._ffi",
    from_except = { "ffi", "binding" }, to_modules = { "ffi" }, to_module_prefixes = { "dsh.core._ffi" } },
  { rule = "a private module (a `_` part) is required only from its own folder",
    private = true },
  { rule = "a seam requires no provider",
    from = { "seam" }, to_layers = { "provider", "local provider" } },
  { rule = "a seam requires no envd module",
    from = { "seam" }, to_layers = { "envd client" } },
  { rule = "a seam requires no tool (tools sit above seams)",
    from = { "seam" }, to_layers = { "tool" } },
  { rule = "a provider loads the host process binding (dsh.core.proc) only if it is a local backend",
    transitive = true, from = { "provider" }, never_reach = { "dsh.core.proc" }, stop = { "local provider" } },
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

  it("has one module per seam (lua/dsh/<seam>/init.lua) and no module beside a folder of its name", function()
    local root = helpers.root .. "/lua/dsh"
    local problems, seams = {}, 0
    local function walk(dir, rel)
      for name in lfs.dir(dir) do
        local mode = lfs.symlinkattributes(dir .. "/" .. name, "mode")
        if mode == "directory" and name:match("^[%w_]+$") then
          if rel == "lua/dsh" and layering.layer_of(LAYERS, rel .. "/" .. name .. "/x.lua") == "seam" then
            seams = seams + 1
            if not lfs.attributes(dir .. "/" .. name .. "/init.lua") then
              problems[#problems + 1] = rel .. "/" .. name .. "/ has no init.lua"
            end
          end
          if lfs.attributes(dir .. "/" .. name .. ".lua") then
            problems[#problems + 1] = rel .. "/" .. name .. ".lua beside " .. rel .. "/" .. name .. "/"
          end
          walk(dir .. "/" .. name, rel .. "/" .. name)
        end
      end
    end
    walk(root, "lua/dsh")
    assert.equal(7, seams) -- fs, subprocess, context, bash, pty, lsp, code_runtime
    assert(#problems == 0, table.concat(problems, "\n"))
  end)

  it("reads every require of the tree (a file with none would hide a broken reader)", function()
    local t = layering.from_disk()
    local edges = layering.edges(t, LAYERS)
    local seen = {}
    for _, e in ipairs(edges) do seen[e.from .. " -> " .. e.module] = true end
    -- a literal, a computed require, a pcall'd one, one inside a string-heavy file
    assert.is_true(seen["lua/dsh/fs/init.lua -> dsh.fs._read"])
    assert.is_true(seen["providers/e2b/init.lua -> dsh.providers.e2b.local_backend"])
    assert.is_true(seen["providers/e2b/init.lua -> dsh.providers.e2b.cloud_backend"])
    assert.is_true(seen["bin/dsh -> lfs"])
    assert.is_true(seen["providers/subprocess_e2b/compat.lua -> dsh.signals"])
    -- a require in a comment is no edge
    assert.is_nil(seen["lua/dsh/context/init.lua -> dsh.providers.e2b"])
  end)

  it("places each file by its folder", function()
    local want = {
      ["lua/dsh/context/init.lua"] = "seam", ["lua/dsh/fs/hosttree.lua"] = "seam",
      ["lua/dsh/newseam/init.lua"] = "seam", -- a folder to come is a seam until named otherwise
      ["lua/dsh/path.lua"] = "runtime", ["lua/dsh/newthing.lua"] = "runtime",
      ["lua/dsh/init.lua"] = "façade", ["lua/dsh/core/_ffi/init.lua"] = "ffi", ["lua/dsh/core/_ffi/check.lua"] = "ffi",
      ["lua/dsh/core/loop.lua"] = "binding", ["lua/dsh/core/proc/_opts.lua"] = "binding",
      ["lua/dsh/app/cli.lua"] = "application", ["bin/dsh"] = "application",
      ["lua/dsh/envd/_stream.lua"] = "envd client", ["lua/dsh/sandbox/bwrap.lua"] = "local sandbox",
      ["lua/dsh/pty/init.lua"] = "seam", ["lua/dsh/pty/session.lua"] = "seam",
      ["lua/dsh/lsp/init.lua"] = "seam", ["lua/dsh/lsp/_rpc.lua"] = "seam",
      ["lua/dsh/code_runtime/init.lua"] = "seam", ["lua/dsh/code_runtime/_wire.lua"] = "seam",
      ["lua/dsh/core/lspframe.lua"] = "binding", ["lua/dsh/core/http/_response.lua"] = "binding",
      ["lua/dsh/tools/lsp.lua"] = "tool", ["lua/dsh/tools/run_code.lua"] = "tool",
      ["providers/pty_local/init.lua"] = "local provider", ["providers/lsp_local/init.lua"] = "local provider",
      ["providers/code_runtime_local/init.lua"] = "local provider",
      ["providers/pty_e2b/init.lua"] = "provider", ["providers/lsp_e2b/init.lua"] = "provider",
      ["providers/code_runtime_e2b/init.lua"] = "provider", ["providers/overlay/init.lua"] = "provider",
      ["providers/e2b/local_backend.lua"] = "local provider", ["providers/e2b/cloud_backend.lua"] = "provider",
      ["lua/dsh/app/poc/lsp.lua"] = "application",
    }
    for path, layer in pairs(want) do
      assert.equal(layer, layering.layer_of(LAYERS, path), path)
    end
  end)
end)

describe("the layering test", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("fails a module touching ffi or dsh.core._ffi outside the bindings", function()
    only_violation(tree {
      ["lua/dsh/subprocess/init.lua"] = 'local ffi = require "ffi"',
    }, "lua/dsh/subprocess/init.lua:1", "requires ffi", "only binding modules touch ffi")
    only_violation(tree {
      ["lua/dsh/init.lua"] = 'local ffi = require "ffi"',
    }, "lua/dsh/init.lua:1", "requires ffi", "only binding modules touch ffi")
    -- dsh.core._ffi is also private to lua/dsh/core/: two rules, each named
    local v = check(tree {
      ["providers/fs_local/init.lua"] = 'local F = require("dsh.core._ffi")',
      ["lua/dsh/core/_ffi/init.lua"] = "",
    })
    assert.equal(2, #v, table.concat(v, "\n"))
    local all = table.concat(v, "\n")
    for _, rule in ipairs { "only binding modules touch ffi", "is required only from its own folder, lua/dsh/core/" } do
      assert.is_truthy(all:find(rule, 1, true), all)
    end
    for _, msg in ipairs(v) do
      assert.is_truthy(msg:find("providers/fs_local/init.lua:1", 1, true), msg)
      assert.is_truthy(msg:find("dsh.core._ffi = lua/dsh/core/_ffi/init.lua", 1, true), msg)
    end
    assert.same({}, check(tree {
      ["lua/dsh/core/hostfs.lua"] = 'local F = require "dsh.core._ffi"', ["lua/dsh/core/_ffi/init.lua"] = "",
    }))
  end)

  it("fails a private module required from outside its folder", function()
    only_violation(tree {
      ["providers/lsp_local/init.lua"] = 'local lsp = require "dsh.lsp"\nlocal c = require "dsh.lsp._config"',
      ["lua/dsh/lsp/init.lua"] = "", ["lua/dsh/lsp/_config.lua"] = "",
    }, "providers/lsp_local/init.lua:2", "dsh.lsp._config = lua/dsh/lsp/_config.lua",
      "a private module (a `_` part) is required only from its own folder, lua/dsh/lsp/")
    only_violation(tree {
      ["lua/dsh/tools/lsp.lua"] = 'local e = require "dsh.lsp._edits"', ["lua/dsh/lsp/_edits.lua"] = "",
    }, "lua/dsh/tools/lsp.lua:1", "lua/dsh/lsp/_edits.lua", "required only from its own folder")
    only_violation(tree {
      ["providers/fs_e2b/init.lua"] = 'local s = require "dsh.providers.e2b._session"',
      ["providers/e2b/_session.lua"] = "",
    }, "providers/fs_e2b/init.lua:1", "providers/e2b/_session.lua", "required only from its own folder, providers/e2b/")
    -- inside the folder, at any depth, and a public part of a seam from anywhere
    assert.same({}, check(tree {
      ["lua/dsh/lsp/init.lua"] = 'local c = require "dsh.lsp._config"', ["lua/dsh/lsp/_config.lua"] = "",
      ["lua/dsh/lsp/_provider.lua"] = 'local c = require "dsh.lsp._config"',
      ["lua/dsh/core/http/init.lua"] = 'local r = require "dsh.core.http._response"',
      ["lua/dsh/core/http/_response.lua"] = "",
      ["lua/dsh/core/_ffi/check.lua"] = 'local F = require "dsh.core._ffi"', ["lua/dsh/core/_ffi/init.lua"] = "",
      ["providers/fs_local/init.lua"] = 'local t = require "dsh.fs.hosttree"', ["lua/dsh/fs/hosttree.lua"] = "",
    }))
  end)

  it("fails a seam requiring a provider, an envd module or a tool", function()
    only_violation(tree {
      ["lua/dsh/fs/init.lua"] = '\n\nlocal p = require "dsh.providers.fs_e2b"',
      ["providers/fs_e2b/init.lua"] = "",
    }, "lua/dsh/fs/init.lua:3", "providers/fs_e2b/init.lua", "a seam requires no provider")
    only_violation(tree {
      ["lua/dsh/pty/session.lua"] = 'local envd = require "dsh.envd.process"',
      ["lua/dsh/envd/process.lua"] = "",
    }, "lua/dsh/pty/session.lua:1", "lua/dsh/envd/process.lua", "a seam requires no envd module")
    only_violation(tree {
      ["lua/dsh/lsp/init.lua"] = 'local t = require "dsh.tools.lsp"',
      ["lua/dsh/tools/lsp.lua"] = 'local lsp = require "dsh.lsp"',
    }, "lua/dsh/lsp/init.lua:1", "lua/dsh/tools/lsp.lua", "a seam requires no tool")
  end)

  it("fails a remote provider that loads dsh.core.proc, also through another module, but not a local one", function()
    only_violation(tree {
      ["providers/subprocess_e2b/remote.lua"] = 'local n = require("dsh.core.proc").signum("TERM")',
      ["lua/dsh/core/proc/init.lua"] = "",
    }, "providers/subprocess_e2b/remote.lua reaches dsh.core.proc", "only if it is a local backend")
    only_violation(tree {
      ["providers/code_runtime_e2b/init.lua"] = 'local rt = require "dsh.code_runtime"',
      ["lua/dsh/code_runtime/init.lua"] = 'local proc = require "dsh.core.proc"',
      ["lua/dsh/core/proc/init.lua"] = "",
    }, "providers/code_runtime_e2b/init.lua reaches dsh.core.proc through providers/code_runtime_e2b/init.lua"
      .. " -> lua/dsh/code_runtime/init.lua -> dsh.core.proc")
    assert.same({}, check(tree {
      ["providers/pty_local/init.lua"] = 'local proc = require "dsh.core.proc"',
      ["providers/e2b/init.lua"] = 'local b = require "dsh.providers.e2b.local_backend"',
      ["providers/e2b/local_backend.lua"] = 'local proc = require "dsh.core.proc"',
      ["lua/dsh/core/proc/init.lua"] = "",
    }))
  end)

  it("fails a tool requiring anything but seams and the runtime", function()
    only_violation(tree {
      ["lua/dsh/tools/bash.lua"] = 'local b = require "dsh.bash"\nlocal h = require "dsh.core.http"',
      ["lua/dsh/bash/init.lua"] = "", ["lua/dsh/core/http/init.lua"] = "",
    }, "lua/dsh/tools/bash.lua:2", "lua/dsh/core/http/init.lua", "tools require seams only")
    only_violation(tree {
      ["lua/dsh/tools/run_code.lua"] = 'local p = require "dsh.providers.code_runtime_e2b"',
      ["providers/code_runtime_e2b/init.lua"] = "",
    }, "lua/dsh/tools/run_code.lua:1", "providers/code_runtime_e2b/init.lua", "tools require seams only")
  end)

  it("fails lower layers reaching up, and a file no layer names", function()
    only_violation(tree {
      ["lua/dsh/envd/files.lua"] = 'local fs = require "dsh.fs"', ["lua/dsh/fs/init.lua"] = "",
    }, "lua/dsh/envd/files.lua:1", "lua/dsh/fs/init.lua", "the envd client requires nothing above it")
    only_violation(tree {
      ["lua/dsh/core/http/init.lua"] = 'local envd = require "dsh.envd"', ["lua/dsh/envd/init.lua"] = "",
    }, "lua/dsh/core/http/init.lua:1", "lua/dsh/envd/init.lua", "a binding requires only bindings")
    only_violation(tree {
      ["lua/dsh/async.lua"] = 'local s = require "dsh.subprocess"', ["lua/dsh/subprocess/init.lua"] = "",
    }, "lua/dsh/async.lua:1", "lua/dsh/subprocess/init.lua", "the runtime requires only bindings")
    only_violation(tree {
      ["providers/bash/init.lua"] = 'local poc = require "dsh.app.poc"', ["lua/dsh/app/poc/init.lua"] = "",
    }, "providers/bash/init.lua:1", "lua/dsh/app/poc/init.lua", "nothing but the application")
    only_violation(tree { ["lua/newthing.lua"] = "" }, "lua/newthing.lua belongs to no layer")
    only_violation(tree { ["lua/dsh/fs/init.lua"] = 'require "dsh.fs._gone"' }, "dsh.fs._gone, which is no file")
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
    local t = tree {
      ["lua/dsh/envd/init.lua"] = 'local F = require "dsh.core._ffi"', ["lua/dsh/core/_ffi/init.lua"] = "",
    }
    assert.same({}, check(t, { ["lua/dsh/envd/init.lua -> dsh.core._ffi"] = "being moved" }))
    assert.same({ "known exception lua/dsh/sandbox/init.lua -> dsh.core._ffi no longer occurs: "
      .. "delete it from KNOWN_EXCEPTIONS" },
      check(t, { ["lua/dsh/envd/init.lua -> dsh.core._ffi"] = "x",
        ["lua/dsh/sandbox/init.lua -> dsh.core._ffi"] = "y" }))
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
