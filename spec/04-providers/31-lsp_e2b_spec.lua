-- The ctx.lsp contract with servers in a real local sandbox (lsp-e2b over
-- subprocess-e2b and dshd in bubblewrap): real clangd and the fixture server
-- run in the sandbox, sources are read there. A fresh sandbox per test. The
-- same contract against stock envd's behaviour (a bare `dshd --envd-compat`),
-- as on E2B's cloud. Also the reference's pins of §6.6 that concern lsp-e2b.
local context = require "dsh.context"
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local helpers = require "helpers"
local lsp = require "dsh.lsp"
local lsp_e2b = require "dsh.providers.lsp_e2b"
local sys = require "dsh.core.sysutil"

local function q(s)
  return "'" .. s:gsub("'", [['\'']]) .. "'"
end

-- A started context whose ctx.e2b comes from owner (a provider, or
-- {provider, config}), with fs-e2b, subprocess-e2b, ctx.lsp and lsp-e2b whose
-- servers servers(env) gives; the fixture server is written to fixture there.
local function compose(owner, servers, fixture, done)
  local env = { fixture = { command = "luajit", args = { fixture } } }
  local ok, ctx = pcall(helpers.start_context, {
    owner, require "dsh.providers.fs_e2b", require "dsh.providers.subprocess_e2b", lsp.provider,
    { lsp_e2b, { servers = servers(env) } },
  })
  if not ok then
    if done then done() end
    error(ctx, 0)
  end
  local e2b = ctx.e2b
  local daemon = assert(e2b:getSandbox()).envd
  -- servers start lazily: the fixture is there before any query
  assert(daemon:write_file(fixture, assert(helpers.read_file(helpers.root .. "/spec/fixtures/lsp-fixture-server.lua"))))
  env.root = e2b.cwd .. "/t" .. sys.random_hex(4)
  env.sh = function(cmd)
    local r, rerr = e2b:exec { "/bin/bash", "-c", "cd " .. q(env.root) .. " && (" .. cmd .. ") 2>&1" }
    if not r then return -1, tostring(rerr) end
    return r.exit_code, r.stdout
  end
  assert(e2b:exec { "mkdir", "-p", env.root })
  env.put = function(rel, data) assert(daemon:write_file(env.root .. "/" .. rel, data)) end
  env.ctx = ctx
  env.dispose = function()
    local dok, derr = ctx:dispose()
    if done then done() end
    assert(dok, tostring(derr))
  end
  return env
end

-- A fresh local sandbox (a unique fixture path, so host-side checks find
-- only this test's servers).
local function factory_new(servers)
  return compose({ require "dsh.providers.e2b", {} }, servers,
    "/tmp/lsp-fixture-server-" .. sys.random_hex(6) .. ".lua")
end

-- A bare `dshd --envd-compat` on this host (stock envd's behaviour: the
-- setsid wrapper, no dshd extensions), started and reached as helpers.dshd
-- starts bare daemons (TCP on 127.0.0.1, as E2B's envd listens), through the
-- real dsh.E2B class.
local function compat_new(servers)
  local d = D.bare { "--envd-compat" }
  local client = d.client()
  local cwd = d.dir .. "/workspace"
  local owner = E.envd_owner(client, cwd)
  return compose(owner, servers, d.dir .. "/lsp-fixture-server.lua", d.stop)
end

describe("lsp-e2b on local sandboxes", function()
  D.isolated_state()

  require("helpers.lsp_contract")("lsp-e2b", {
    new = factory_new, name = "lsp-e2b", where = "remote ", module = lsp_e2b,
  })

  require("helpers.lsp_contract")("lsp-e2b on stock envd (dshd --envd-compat)", {
    new = compat_new, name = "lsp-e2b", where = "remote ", module = lsp_e2b,
  })

  describe("lsp-e2b", function()
    before_each(helpers.snapshot)
    after_each(helpers.assert_clean)

    local ext = { [".fx"] = "fixture" }

    it("requires subprocess-e2b as ctx.subprocess and ctx.lsp", function()
      helpers.run(function()
        local ctx = context.new()
        ctx:use(require "dsh.providers.subprocess_local")
        ctx:use(lsp.provider)
        ctx:use(require "dsh.providers.e2b", {})
        ctx:use(lsp_e2b, { servers = { fx = { command = "luajit", extensionToLanguage = ext } } })
        local ok, err = ctx:start()
        assert.is_nil(ok)
        assert.equal("LSP_UNAVAILABLE", err.code)
        assert.equal("lsp-e2b requires dsh.providers.subprocess_e2b as ctx.subprocess", err.message)
        assert(ctx:dispose())
      end)
    end)

    it("resolves every command in the sandbox; a missing one is reported, never fails the start", function()
      helpers.run(function()
        local ctx = context.new()
        ctx:use(require "dsh.providers.e2b", {})
        ctx:use(require "dsh.providers.subprocess_e2b")
        ctx:use(lsp.provider)
        ctx:use(lsp_e2b, { servers = {
          fx = { command = "no-such-language-server", extensionToLanguage = ext },
          py = { preset = "pyright", command = "no-such-pyright-langserver" },
        } })
        assert(ctx:start())
        assert.same({ "fx", "py" }, ctx.lsp:providers())
        local exts, missing = ctx.lsp:extensions()
        assert.equal("py", exts[".py"])
        assert.same({ [".fx"] = "fx", [".py"] = "py", [".pyi"] = "py" }, missing)
        local v, err = ctx.lsp:query { operation = "hover", filePath = "a.py", position = { line = 0, character = 0 },
          workspaceRoot = ctx.e2b.cwd }
        assert.is_nil(v)
        assert.equal("LSP_UNAVAILABLE", err.code)
        assert.equal('lsp-e2b: language server "py" is not available: its command "no-such-pyright-langserver" was '
          .. 'not found in the sandbox (E2B executable "no-such-pyright-langserver" did not resolve to one absolute '
          .. "path); install the npm package pyright (npm install -g pyright), or set servers.py.command to where "
          .. "it is", err.message)
        local st = ctx.lsp:status()
        assert.is_false(st.fx.available)
        assert.matches('language server "fx" is not available: its command "no%-such%-language%-server"', st.fx.problem)
        -- the rest of the world started: commands run
        local r = assert(ctx.e2b:exec { "true" })
        assert.equal(0, r.exit_code)
        assert(ctx:dispose())
      end)
    end)

    it("registers every server; a failed registration undoes the earlier ones (§6.6.8, §6.6.9)", function()
      helpers.run(function()
        local ctx = context.new()
        ctx:use(require "dsh.providers.e2b", {})
        ctx:use(require "dsh.providers.subprocess_e2b")
        ctx:use(lsp.provider)
        assert(ctx:start()) -- the registry stays when the next start fails (only what it set up is undone)
        ctx:use(lsp_e2b, { servers = {
          a = { command = "luajit", extensionToLanguage = { [".a"] = "a" } },
          b = { command = "luajit", extensionToLanguage = { [".b"] = "b", [".B"] = "b" } },
        } })
        local ok, err = ctx:start()
        assert.is_nil(ok)
        assert.equal("LSP_INVALID_PROVIDER", err.code)
        assert.equal('provider "b" lists extension ".b" twice', err.message)
        assert.same({}, ctx.lsp:providers())
        assert(ctx:dispose())

        ctx = context.new()
        ctx:use(require "dsh.providers.e2b", {})
        ctx:use(require "dsh.providers.subprocess_e2b")
        ctx:use(lsp.provider)
        ctx:use(lsp_e2b, { servers = {
          a = { command = "luajit", extensionToLanguage = { [".a"] = "a" } },
          b = { command = "luajit", extensionToLanguage = { [".b"] = "b" } },
        } })
        assert(ctx:start())
        assert.same({ "a", "b" }, ctx.lsp:providers())
        local registry = ctx.lsp
        assert(ctx:dispose())
        assert.same({}, registry:providers()) -- unregistered when lsp-e2b went
      end)
    end)

    it("runs the source reader and every server inside the sandbox, and nothing after dispose", function()
      helpers.run(function()
        local env = factory_new(function(e)
          return { fixture = { command = e.fixture.command, args = e.fixture.args, extensionToLanguage = ext } }
        end)
        local ok, err = pcall(function()
          env.put("a.fx", "cwd here\n")
          local h = assert(env.ctx.lsp:query { operation = "hover", filePath = "a.fx",
            position = { line = 0, character = 0 }, workspaceRoot = env.root })
          assert.equal(env.root, h.hover.contents) -- the sandbox's path, which the host does not have
          local code, out = env.sh("ps -eo args")
          assert.equal(0, code)
          assert.matches(env.fixture.args[1]:gsub("%p", "%%%0"), out) -- the server
          assert.matches("LSP source reader", out)                   -- the reader
        end)
        env.dispose()
        assert(ok, err)
        -- sandboxed processes are host processes too: none of them is left
        assert.same({}, E.survivors(E.procs_with(env.fixture.args[1]), 3000))
      end)
    end)
  end)
end)
