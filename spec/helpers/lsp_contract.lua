--- The ctx.lsp contract (reference §2.5, the pins of §6.6 that are not about
-- the stdio proxy, §6.8.6) plus diagnostics, symbols, calls and kept-open
-- documents, shared by every language-server provider. Real clangd on C and
-- C++ with CJK and emoji in strings and comments; the fixture server
-- (spec/fixtures/lsp-fixture-server.lua) for what clangd will not do.
--
--   require("helpers.lsp_contract")("lsp-local", factory)
--
-- factory.new(servers) runs inside a task and returns an env for one test:
--   env.ctx            a started context: ctx.fs, ctx.subprocess, ctx.lsp and the
--                      provider under test configured with {servers = servers}
--   env.root           a fresh, empty workspace directory in that world (canonical)
--   env.sh(cmd)        a shell command in that world, in env.root -> exit code, stdout
--   env.put(rel, s)    write env.root/rel behind the seam's back
--   env.fixture        the fixture server's command line there: {command=, args={}}
--   env.dispose()      dispose the context
-- factory.name is the provider's name (message prefix), factory.where "remote "
-- or "", factory.module the provider module.
local async = require "dsh.async"
local helpers = require "helpers"
local loop = require "dsh.core.loop"
local lsp = require "dsh.lsp"

local C_SOURCE = table.concat({
  "/* 注释: 计算面积 🙂 — a comment with CJK and emoji */",
  'static const char *greeting = "你好, 世界 🌍🚀";',
  "static int square_area(int side) { return side * side; }",
  "int total_area(void) {",
  '  const char *tag = "🙂🙂"; int a = square_area(3); /* 再见 👋 */',
  "  return a + (int)(tag[0] == 0) + (int)(greeting[0] == 0);",
  "}",
  "int twice(void) { return total_area() * 2; }",
  "",
}, "\n")

local CPP_SOURCE = table.concat({
  "// 形状 🙂",
  "struct Shape { virtual int area() const = 0; virtual ~Shape() {} };",
  "struct Square : Shape { int s; int area() const override { return s * s; } }; // 正方形 🟦",
  'int use(const Shape &x) { const char *e = "🙂"; return x.area() + (e[0] == 0); }',
  "",
}, "\n")

local FIXTURE_TEXT = "hello world stats cwd\nmultibyte 你好 café\nfunction foo_bar\n"

-- Every flavour of the fixture, one extension each (servers start lazily).
local function servers(env, extra)
  local function fx(ext, args, limits)
    local s = { command = env.fixture.command, args = {}, extensionToLanguage = { [ext] = "fixture" },
      killGraceMs = 300, shutdownTimeoutMs = 1000 }
    for _, a in ipairs(env.fixture.args) do s.args[#s.args + 1] = a end
    for _, a in ipairs(args or {}) do s.args[#s.args + 1] = a end
    for k, v in pairs(limits or {}) do s[k] = v end
    return s
  end
  local out = {
    clangd = { command = "clangd", args = { "--log=error" }, killGraceMs = 1000,
      extensionToLanguage = { [".c"] = "c", [".h"] = "c", [".cpp"] = "cpp" } },
    fixture = fx(".fx", { "--stderr", "fixture says hello\n" },
      { maxMessageBytes = 100000, configuration = { fixture = { answer = 42 } } }),
    utf8enc = fx(".enc", { "--encoding", "utf-8" }),
    nohover = fx(".nohover", { "--without", "hoverProvider" }),
    noopen = fx(".noopen", { "--no-openclose" }),
    sync0 = fx(".sync0", { "--sync", "0" }),
    stubborn = fx(".ign", { "--ignore-cancel" }),
    pull = fx(".pull", { "--pull" }),
    small = fx(".small", nil, { maxDocumentBytes = 20 }),
    late = fx(".late", { "--diag-delay", "3000", "--no-version" }),
    gone = fx(".gone", { "--exit-on-start" }),
  }
  for k, v in pairs(extra or {}) do out[k] = v end
  return out
end

return function(name, factory)
  -- busted's describe/it/assert live in the calling spec's environment
  setfenv(1, getfenv(2))
  local where = factory.where

  describe(name .. " (lsp contract)", function()
    before_each(helpers.snapshot)
    after_each(helpers.assert_clean)

    local function with_env(fn, extra)
      return function()
        helpers.run(function()
          local env = factory.new(function(e) return servers(e, extra) end)
          env.lsp = env.ctx.lsp
          env.query = function(op, file, pos, more)
            local req = { operation = op, filePath = file, position = pos, workspaceRoot = env.root }
            for k, v in pairs(more or {}) do req[k] = v end
            return env.lsp:query(req, more and more.opts)
          end
          -- the position of the n-th occurrence of needle in text (UTF-16 columns)
          env.at = function(text, needle, n)
            local i = 0
            for _ = 1, n or 1 do i = assert(text:find(needle, i + 1, true), needle .. " not found") end
            return lsp.position.from_index(text, i), i
          end
          env.pids = function(id)
            local out = {}
            for ws, inst in pairs(env.lsp._by_id[id]._pool) do out[ws] = inst._h.pid end
            return out
          end
          env.alive = function(pgid) return env.sh("kill -0 -- -" .. pgid .. " 2>/dev/null") == 0 end
          -- true once server id's instance for the root has a request out
          env.sent = function(id)
            return helpers.eventually(function()
              local inst = env.lsp._by_id[id]._pool[env.root]
              return inst and inst._conn:pending_count() > 0
            end, 30000)
          end
          local ok, err = xpcall(fn, debug.traceback, env)
          env.lsp:injectFault("beforeRead", nil)
          env.dispose()
          if not ok then error(err, 0) end
        end)
      end
    end

    local function test(title, fn, extra)
      it(title, with_env(fn, extra))
    end

    local function fails(code, message, v, err)
      assert.is_nil(v, "expected a failure, got a value")
      assert.is_table(err, "expected an error value")
      assert.equal(code, err.code, "error: " .. tostring(err))
      if message then
        if message:sub(1, 1) == "^" then
          assert.matches(message, err.message)
        else
          assert.equal(message, err.message)
        end
      end
    end

    local function pesc(s)
      return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"))
    end

    local function aborted_after(ms, reason)
      local ctl = async.controller()
      local t = loop.timer(function() ctl:abort(reason) end)
      t:start(ms)
      return ctl.signal, function() t:close() end
    end

    describe("with clangd", function()
      test("hover, definition and references land on exact UTF-16 columns past CJK and emoji", function(env)
        env.put("area.c", C_SOURCE)
        local pos, i = env.at(C_SOURCE, "square_area", 2)
        -- 34 code points before it, two of them emoji: 36 UTF-16 code units
        assert.same({ line = 4, character = 36 }, pos)
        local h = assert(env.query("hover", "area.c", pos))
        assert.equal("hover", h.kind)
        assert.matches("square_area", h.hover.contents)
        assert.matches("static int square_area%(int side%)", h.hover.contents)
        assert.equal(i, lsp.position.to_index(C_SOURCE, h.hover.range.start))

        local d = assert(env.query("goToDefinition", "area.c", pos))
        assert.equal("locations", d.kind)
        assert.equal(lsp.uri.from_path(env.root), d.resolvedWorkspaceUri)
        assert.equal(1, #d.locations)
        assert.equal(lsp.uri.from_path(env.root .. "/area.c"), d.locations[1].uri)
        local _, decl = env.at(C_SOURCE, "square_area", 1)
        assert.equal(decl, lsp.position.to_index(C_SOURCE, d.locations[1].range.start))
        assert.equal(decl + #"square_area", lsp.position.to_index(C_SOURCE, d.locations[1].range["end"]))

        local r = assert(env.query("findReferences", "area.c", pos))
        local got = {}
        for _, l in ipairs(r.locations) do got[#got + 1] = lsp.position.to_index(C_SOURCE, l.range.start) end
        table.sort(got)
        assert.same({ decl, i }, got) -- the declaration is included

        -- greeting: used after a line of four-byte characters
        local gpos, gi = env.at(C_SOURCE, "greeting", 2)
        local gd = assert(env.query("goToDefinition", "area.c", gpos))
        local _, gdecl = env.at(C_SOURCE, "greeting", 1)
        assert.equal(gdecl, lsp.position.to_index(C_SOURCE, gd.locations[1].range.start))
        assert.is_true(gi > gdecl)
      end)

      test("goToImplementation finds an override; symbols and incoming calls", function(env)
        env.put("shapes.cpp", CPP_SOURCE)
        local pos = env.at(CPP_SOURCE, "area", 3) -- x.area(), after an emoji string
        local impl = assert(env.query("goToImplementation", "shapes.cpp", pos))
        assert.equal(1, #impl.locations)
        local _, over = env.at(CPP_SOURCE, "area", 2)
        assert.equal(over, lsp.position.to_index(CPP_SOURCE, impl.locations[1].range.start))

        local syms = assert(env.query("documentSymbol", "shapes.cpp"))
        local names = {}
        for _, s in ipairs(syms.symbols) do names[#names + 1] = (s.container or "") .. "/" .. s.name end
        assert.same({ "/Shape", "Shape/area", "Shape/~Shape", "/Square", "Square/s", "Square/area", "/use" }, names)

        local calls = assert(env.query("incomingCalls", "shapes.cpp", pos))
        assert.equal("incoming", calls.direction)
        assert.equal("area", calls.item.name)
        assert.equal(1, #calls.calls)
        assert.equal("use", calls.calls[1].name)
        assert.equal(pos.character, calls.calls[1].fromRanges[1].start.character)
        -- clangd 14 advertises call hierarchy but has no outgoing calls
        fails("LSP_UNSUPPORTED_OPERATION", '^language server "clangd" does not support outgoingCalls',
          env.query("outgoingCalls", "shapes.cpp", pos))

        local ws = assert(env.query("workspaceSymbol", "shapes.cpp", nil, { query = "Squ" }))
        assert.equal("Square", ws.symbols[1].name)
      end)

      test("diagnostics follow edits made through ctx.fs", function(env)
        env.put("area.c", C_SOURCE)
        local d = assert(env.lsp:diagnostics("area.c", { workspaceRoot = env.root }))
        assert.same({ kind = "diagnostics", diagnostics = {}, settled = true,
          uri = lsp.uri.from_path(env.root .. "/area.c"), resolvedWorkspaceUri = lsp.uri.from_path(env.root) }, d)
        local broken = C_SOURCE:gsub("return a %+", "return missing_thing + a +")
        assert(env.ctx.fs:writeText(env.root .. "/area.c", broken))
        d = assert(env.lsp:diagnostics("area.c", { workspaceRoot = env.root }))
        assert.is_true(d.settled)
        assert.equal(1, #d.diagnostics)
        local diag = d.diagnostics[1]
        assert.equal("error", diag.severity)
        assert.matches("missing_thing", diag.message)
        local _, at = env.at(broken, "missing_thing")
        assert.equal(at, lsp.position.to_index(broken, diag.range.start))
        assert(env.ctx.fs:writeText(env.root .. "/area.c", C_SOURCE))
        d = assert(env.lsp:diagnostics("area.c", { workspaceRoot = env.root }))
        assert.same({}, d.diagnostics)
        assert.is_true(d.settled)
      end)

      test("a file changed by Bash between two queries is seen as changed", function(env)
        env.put("area.c", C_SOURCE)
        local pos = env.at(C_SOURCE, "square_area", 2)
        local h = assert(env.query("hover", "area.c", pos))
        assert.matches("static int square_area%(int side%)", h.hover.contents)
        local pid = env.pids("clangd")[env.root]
        assert.equal(0, (env.sh("sed -i 's/static int square_area(int side)/static long square_area(long side)/'"
          .. " area.c")))
        h = assert(env.query("hover", "area.c", pos))
        assert.matches("static long square_area%(long side%)", h.hover.contents)
        assert.equal(pid, env.pids("clangd")[env.root]) -- the same server saw the change
      end)

      test("disposal shuts every server down and leaves no group behind", function(env)
        env.put("area.c", C_SOURCE)
        env.put("x.fx", FIXTURE_TEXT)
        assert(env.query("hover", "area.c", (env.at(C_SOURCE, "square_area", 2))))
        assert(env.query("hover", "x.fx", { line = 0, character = 0 }))
        local pids = { env.pids("clangd")[env.root], env.pids("fixture")[env.root] }
        for _, p in ipairs(pids) do assert.is_true(env.alive(p)) end
        env.ctx:dispose()
        for _, p in ipairs(pids) do assert.is_false(env.alive(p)) end
        fails("LSP_DISPOSED", nil, env.query("hover", "area.c", { line = 0, character = 0 }))
      end)
    end)

    describe("queries", function()
      test("route by lower-cased extension; refuse what no server handles", function(env)
        env.put("Upper.FX", FIXTURE_TEXT)
        local h = assert(env.query("hover", "Upper.FX", { line = 0, character = 7 }))
        assert.equal("word `world` at 0:7", h.hover.contents)
        fails("LSP_UNAVAILABLE", 'no language server handles ".txt" files (notes.txt)',
          env.query("hover", "notes.txt", { line = 0, character = 0 }))
        fails("LSP_UNAVAILABLE", nil, env.query("hover", "Makefile", { line = 0, character = 0 }))
        fails("LSP_WORKSPACE_REQUIRED", nil, env.lsp:query { operation = "hover", filePath = "Upper.FX",
          position = { line = 0, character = 0 } })
        assert.has_error(function() env.query("hover", "x.fx", { line = -1, character = 0 }) end,
          "dsh.lsp: query: position.line must be a non-negative integer (0-based)")
        assert.has_error(function() env.query("frobnicate", "x.fx", { line = 0, character = 0 }) end,
          "dsh.lsp: query: unknown operation frobnicate")
      end)

      test("multibyte text survives the trip; the server runs in the workspace with processId null", function(env)
        env.put("multibyte # file.fx", FIXTURE_TEXT)
        local h = assert(env.query("hover", "multibyte # file.fx", { line = 1, character = 3 }))
        assert.equal("**remote hover** 你好 café", h.hover.contents)
        local d = assert(env.query("goToDefinition", env.root .. "/multibyte # file.fx",
          { line = 1, character = 3 }))
        assert.equal(lsp.uri.from_path(env.root .. "/multibyte # file.fx"), d.locations[1].uri)
        assert.matches("multibyte%%20%%23%%20file%.fx$", d.locations[1].uri)
        assert.same({ start = { line = 1, character = 0 }, ["end"] = { line = 1, character = 9 } },
          d.locations[1].range)
        assert.equal(env.root, assert(env.query("hover", "multibyte # file.fx", { line = 0, character = 19 }))
          .hover.contents)
        -- implementation answers LocationLinks; references every occurrence
        local impl = assert(env.query("goToImplementation", "multibyte # file.fx", { line = 1, character = 3 }))
        assert.same(d.locations, impl.locations)
      end)

      test("two queries share one server per workspace; another workspace gets its own", function(env)
        env.put("a.fx", FIXTURE_TEXT)
        assert.equal(0, (env.sh("mkdir other && cp a.fx other/b.fx")))
        assert(env.query("hover", "a.fx", { line = 0, character = 0 }))
        assert(env.query("hover", "a.fx", { line = 0, character = 6 }))
        local first = env.pids("fixture")[env.root]
        assert(env.lsp:query { operation = "hover", filePath = "b.fx", position = { line = 0, character = 0 },
          workspaceRoot = env.root .. "/other" })
        local pids = env.pids("fixture")
        assert.equal(first, pids[env.root])
        assert.is_number(pids[env.root .. "/other"])
        assert.are_not.equal(first, pids[env.root .. "/other"])
      end)

      test("documents stay open while unchanged, and change when the file does", function(env)
        env.put("a.fx", FIXTURE_TEXT)
        local stats = { line = 0, character = 13 }
        for _ = 1, 3 do assert(env.query("hover", "a.fx", stats)) end
        assert.equal("opens=1 changes=0 closes=0", assert(env.query("hover", "a.fx", stats)).hover.contents)
        env.put("a.fx", FIXTURE_TEXT .. "more\n")
        assert.equal("opens=1 changes=1 closes=0", assert(env.query("hover", "a.fx", stats)).hover.contents)
        -- a server that takes no changes gets the document closed and opened again
        env.put("a.sync0", FIXTURE_TEXT)
        assert(env.query("hover", "a.sync0", stats))
        env.put("a.sync0", FIXTURE_TEXT .. "x\n")
        assert.equal("opens=2 changes=0 closes=1", assert(env.query("hover", "a.sync0", stats)).hover.contents)
      end)

      test("re-syncs every open document before a query; closes gone ones and those the agent is done with",
        function(env)
        env.put("a.fx", FIXTURE_TEXT)
        env.put("b.fx", "hello\n")
        env.put("c.fx", "hello\n")
        local stats = { line = 0, character = 13 }
        assert(env.query("hover", "b.fx", { line = 0, character = 1 }))
        assert(env.query("hover", "c.fx", { line = 0, character = 1 }))
        local h = assert(env.query("hover", "a.fx", stats))
        assert.equal("opens=3 changes=0 closes=0", h.hover.contents)
        assert.equal(lsp.uri.from_path(env.root), h.resolvedWorkspaceUri)
        -- b.fx changes behind the server's back: the query on a.fx sends it, and a.fx
        -- again (as a new version: the server analyses it against the changed b.fx)
        env.put("b.fx", "hello again\n")
        assert.equal("opens=3 changes=2 closes=0", assert(env.query("hover", "a.fx", stats)).hover.contents)
        -- c.fx is deleted: closed at the next query (and a.fx sent again)
        assert.equal(0, (env.sh("rm c.fx")))
        assert.equal("opens=3 changes=3 closes=1", assert(env.query("hover", "a.fx", stats)).hover.contents)
        -- the agent is done with b.fx
        assert(env.lsp:closeDocuments { workspaceRoot = env.root, filePath = "b.fx" })
        assert.equal("opens=3 changes=3 closes=2", assert(env.query("hover", "a.fx", stats)).hover.contents)
        local docs = env.lsp:status().fixture.instances[1].documents
        assert.same({ env.root .. "/a.fx" }, docs)
      end)

      test("symbols, calls and a server's own errors", function(env)
        env.put("a.fx", FIXTURE_TEXT .. "failing weird\n")
        local s = assert(env.query("documentSymbol", "a.fx"))
        local r = { start = { line = 2, character = 0 }, ["end"] = { line = 2, character = 16 } }
        assert.same({ { name = "foo_bar", kind = 12, uri = lsp.uri.from_path(env.root .. "/a.fx"), namePath = "foo_bar",
          range = r, bodyRange = r } }, s.symbols)
        local ws = assert(env.query("workspaceSymbol", "a.fx", nil, { query = "foo" }))
        assert.equal("foo_bar", ws.symbols[1].name)
        local inc = assert(env.query("incomingCalls", "a.fx", { line = 2, character = 10 }))
        assert.equal("caller_of_foo_bar", inc.calls[1].name)
        local out = assert(env.query("outgoingCalls", "a.fx", { line = 2, character = 10 }))
        assert.equal("callee_of_foo_bar", out.calls[1].name)
        fails("LSP_REQUEST_FAILED", 'language server "fixture" failed textDocument/hover: fixture failure '
          .. "(code -32603)", env.query("hover", "a.fx", { line = 3, character = 1 }))
        fails("LSP_MALFORMED_RESPONSE", 'language server "fixture" returned a malformed hover',
          env.query("hover", "a.fx", { line = 3, character = 9 }))
        fails("LSP_MALFORMED_RESPONSE", 'language server "fixture" returned a malformed location result',
          env.query("goToDefinition", "a.fx", { line = 3, character = 9 }))
        -- the instance survived all of that
        assert(env.query("hover", "a.fx", { line = 0, character = 0 }))
      end)

      test("answers the server's own requests: configuration by section, unknown ones refused", function(env)
        env.put("a.fx", "ask\n")
        local h = assert(env.query("hover", "a.fx", { line = 0, character = 1 }))
        local config, folders, unknown = h.hover.contents:match("^result (.-); result (.-); (error %-?%d+)$")
        assert.equal('[{"answer":42},42,{"fixture":{"answer":42}},null]', config)
        local f = require("dsh.json").decode(folders)
        assert.same({ { uri = lsp.uri.from_path(env.root), name = env.root:match("([^/]+)$") } }, f)
        assert.equal("error -32601", unknown)
      end)

      test("keeps what the server shows and logs; the shown errors come with the answer", function(env)
        env.put("a.fx", "say hello\n")
        local h = assert(env.query("hover", "a.fx", { line = 0, character = 1 }))
        assert.same({ { type = "error", text = "fixture: something is wrong" } }, h.serverMessages)
        local st = env.lsp:status().fixture
        assert.is_true(st.available)
        local msgs = st.instances[1].messages
        local kinds = {}
        for _, m in ipairs(msgs) do kinds[#kinds + 1] = m.kind .. " " .. m.type .. " " .. m.text end
        assert.same({ "show error fixture: something is wrong", "log info fixture: a log line" }, kinds)
        -- the next answer has no old news
        assert.is_nil(assert(env.query("hover", "a.fx", { line = 0, character = 5 })).serverMessages)
      end)

      test("tracks work done progress; a query waits while the server is busy", function(env)
        env.put("a.fx", "busy\n")
        env.put("b.fx", "hello\n")
        assert(env.query("hover", "a.fx", { line = 0, character = 1 }))
        local inst = env.lsp:status().fixture.instances[1]
        assert.same({ "fixture busy" }, inst.busy)
        -- opening b.fx ends the fixture's work; the query goes on once it ended
        assert(env.query("hover", "b.fx", { line = 0, character = 1 }))
        assert.same({}, env.lsp:status().fixture.instances[1].busy)
      end)

      test("refuses operations the server lacks", function(env)
        env.put("a.nohover", FIXTURE_TEXT)
        env.put("a.noopen", FIXTURE_TEXT)
        fails("LSP_UNSUPPORTED_OPERATION", 'language server "nohover" does not support hover',
          env.query("hover", "a.nohover", { line = 0, character = 0 }))
        assert(env.query("goToDefinition", "a.nohover", { line = 0, character = 0 }))
        fails("LSP_UNSUPPORTED_OPERATION", '^language server "noopen" does not support hover: it does not open',
          env.query("hover", "a.noopen", { line = 0, character = 0 }))
      end)
    end)

    describe("diagnostics", function()
      test("pushed, pulled, and bounded by waitMs", function(env)
        env.put("a.fx", "fine\nan ERROR here\nWARN me\n")
        local d = assert(env.lsp:diagnostics("a.fx", { workspaceRoot = env.root }))
        assert.is_true(d.settled)
        assert.same({ "error", "warning" }, { d.diagnostics[1].severity, d.diagnostics[2].severity })
        assert.same({ start = { line = 1, character = 3 }, ["end"] = { line = 1, character = 8 } },
          d.diagnostics[1].range)
        assert.equal("E1", d.diagnostics[1].code)
        env.put("a.pull", "ERROR 🙂 ERROR\n")
        d = assert(env.lsp:diagnostics("a.pull", { workspaceRoot = env.root }))
        assert.is_true(d.settled)
        assert.equal(1, #d.diagnostics)
        -- a server that publishes late, without versions: a short wait is not enough
        env.put("a.late", "ERROR\n")
        local t0 = loop.now_ms()
        d = assert(env.lsp:diagnostics("a.late", { workspaceRoot = env.root, waitMs = 50 }))
        assert.is_false(d.settled)
        assert.same({}, d.diagnostics)
        assert.is_true(loop.now_ms() - t0 < 2500, "waited for the publish (3 s), not waitMs")
        d = assert(env.lsp:diagnostics("a.late", { workspaceRoot = env.root, waitMs = 60000 }))
        assert.is_true(d.settled)
        assert.equal(1, #d.diagnostics)
      end)
    end)

    describe("sources", function()
      test("resolves the workspace canonically and keeps sources inside it", function(env)
        env.put("a.fx", FIXTURE_TEXT)
        assert.equal(0, (env.sh("ln -s . alias && ln -s /etc/hosts out.fx && mkdir dir.fx && mkfifo pipe.fx")))
        -- through a symlinked root: results name the canonical workspace
        local d = assert(env.lsp:query { operation = "goToDefinition", filePath = "a.fx",
          position = { line = 0, character = 0 }, workspaceRoot = env.root .. "/alias" })
        assert.equal(lsp.uri.from_path(env.root), d.resolvedWorkspaceUri)
        local origin = { line = 0, character = 0 }
        fails("LSP_INVALID_SOURCE", 'source "out.fx" resolves outside the workspace',
          env.query("hover", "out.fx", origin))
        assert.equal(0, (env.sh("mkdir inner")))
        fails("LSP_INVALID_SOURCE", 'source "../a.fx" resolves outside the workspace',
          env.lsp:query { operation = "hover", filePath = "../a.fx", position = origin,
            workspaceRoot = env.root .. "/inner" })
        fails("LSP_INVALID_SOURCE", 'source "/etc/hosts.fx" did not resolve canonically (No such file or directory)',
          env.query("hover", "/etc/hosts.fx", origin))
        fails("LSP_INVALID_SOURCE", 'source "dir.fx" is not a regular file', env.query("hover", "dir.fx", origin))
        fails("LSP_INVALID_SOURCE", 'source "pipe.fx" is not a regular file', env.query("hover", "pipe.fx", origin))
        fails("LSP_INVALID_WORKSPACE", 'workspace root "' .. env.root .. '/a.fx" is not a directory',
          env.lsp:query { operation = "hover", filePath = "a.fx", position = origin,
            workspaceRoot = env.root .. "/a.fx" })
        local missing = where .. 'path "' .. env.root .. '/missing" did not resolve canonically'
        fails("LSP_INVALID_WORKSPACE", "^" .. pesc(missing),
          env.lsp:query { operation = "hover", filePath = "a.fx", position = origin,
            workspaceRoot = env.root .. "/missing" })
      end)

      test("refuses sizes over the limit, invalid UTF-8, and a symlink swapped in before the read", function(env)
        env.put("ok.small", ("x"):rep(20))
        env.put("big.small", ("x"):rep(21))
        env.put("bad.fx", "ok\xff\n")
        env.put("swap.fx", FIXTURE_TEXT)
        local origin = { line = 0, character = 0 }
        assert(env.query("hover", "ok.small", origin))
        fails("LSP_INVALID_SOURCE", 'source "big.small" is 21 bytes, over the 20-byte limit',
          env.query("hover", "big.small", origin))
        fails("LSP_INVALID_SOURCE", 'source "bad.fx" is not valid UTF-8 text', env.query("hover", "bad.fx", origin))
        env.lsp:injectFault("beforeRead", function(path)
          env.lsp:injectFault("beforeRead", nil)
          assert.equal(env.root .. "/swap.fx", path)
          assert.equal(0, (env.sh("rm swap.fx && ln -s /etc/hosts swap.fx")))
        end)
        fails("LSP_INVALID_SOURCE",
          '^source "swap.fx" could not be opened safely: .*[Tt]oo many levels of symbolic links',
          env.query("hover", "swap.fx", origin))
      end)

      test("aborts: before the query, while queued, and while the server is silent", function(env)
        env.put("a.fx", FIXTURE_TEXT .. "silent\n")
        local ctl = async.controller()
        ctl:abort("stop")
        local v, err = env.query("hover", "a.fx", { line = 0, character = 0 }, { opts = { signal = ctl.signal } })
        fails("ABORTED", "stop", v, err)
        assert.equal("stop", err.reason)
        -- a silent request holds the workspace's queue; the next one waits and is aborted there
        local ctl1 = async.controller()
        local first = async.run(function()
          return env.query("hover", "a.fx", { line = 3, character = 1 }, { opts = { signal = ctl1.signal } })
        end)
        assert.is_truthy(env.sent("fixture"), "the first request never reached the server")
        local sig2, stop2 = aborted_after(100, "queued stop")
        v, err = env.query("hover", "a.fx", { line = 0, character = 0 }, { opts = { signal = sig2 } })
        fails("ABORTED", "queued stop", v, err)
        assert.is_false(first:done())
        ctl1:abort("slow stop")
        v, err = first:await()
        fails("ABORTED", "slow stop", v, err)
        stop2()
        -- the server honoured $/cancelRequest: the same instance still answers
        local pid = env.pids("fixture")[env.root]
        assert(env.query("hover", "a.fx", { line = 0, character = 0 }))
        assert.equal(pid, env.pids("fixture")[env.root])
      end)
    end)

    describe("failing servers", function()
      test("a malformed stream, an oversized message, bad JSON or bad UTF-8 kill the server", function(env)
        local cases = {
          { "malformed", "sent a bad message: LSP message has a missing or invalid Content-Length" },
          -- (8 MB: more than a pipe holds, so a server blocked writing it must still be killed and reaped)
          { "huge", "^sent a bad message: LSP message of 80000%d%d bytes exceeds the 100000%-byte limit$" },
          { "badjson", "^sent invalid JSON: " },
          { "badutf8", "^sent a message that is not valid UTF%-8 %(byte 4%d%)$" },
        }
        for _, c in ipairs(cases) do
          env.put("a.fx", c[1] .. "\n")
          local before = env.pids("fixture")[env.root]
          local v, err = env.query("hover", "a.fx", { line = 0, character = 1 })
          local want = c[2]:sub(1, 1) == "^" and ('^language server "fixture" ' .. c[2]:sub(2))
            or ('language server "fixture" ' .. c[2])
          fails("LSP_SERVER_FAILED", want, v, err)
          -- retried once on a fresh server, which failed the same way; both are gone
          assert.is_nil(env.pids("fixture")[env.root])
          if before then assert.is_false(env.alive(before)) end
        end
      end)

      test("a server that dies mid-request is retried once; one that dies for good says why", function(env)
        env.put("a.fx", "dieonce\ndie\nexitafter\n")
        local h = assert(env.query("hover", "a.fx", { line = 0, character = 1 }))
        assert.equal("word `dieonce` at 0:1", h.hover.contents) -- the second server answered
        assert.equal(0, (env.sh("test -e .fixture-died")))
        local v, err = env.query("hover", "a.fx", { line = 1, character = 1 })
        fails("LSP_SERVER_FAILED",
          '^language server "fixture" exited with code 3; stderr: .*fixture: dying mid%-request$',
          v, err)
        assert.matches("fixture says hello", err.message)
        assert.is_nil(env.pids("fixture")[env.root])
        -- an instance that ends after answering is evicted; the next query gets a new one
        assert.equal("bye", assert(env.query("hover", "a.fx", { line = 2, character = 1 })).hover.contents)
        local pid = env.pids("fixture")[env.root]
        assert(env.query("hover", "a.fx", { line = 0, character = 1 }))
        assert.are_not.equal(pid, env.pids("fixture")[env.root])
        -- a server that exits at start
        env.put("a.gone", "x\n")
        fails("LSP_SERVER_FAILED", '^language server "gone" exited with code 4; stderr: fixture: exiting at start',
          env.query("hover", "a.gone", { line = 0, character = 0 }))
      end)

      test("an ordinary error from a server that then dies is returned; the next query gets a new one", function(env)
        env.put("a.fx", "failexit\nhello\n")
        assert(env.query("hover", "a.fx", { line = 1, character = 1 }))
        local pid = env.pids("fixture")[env.root]
        fails("LSP_REQUEST_FAILED", 'language server "fixture" failed textDocument/hover: leaving (code -32603)',
          env.query("hover", "a.fx", { line = 0, character = 1 }))
        local h = assert(env.query("hover", "a.fx", { line = 1, character = 1 }))
        assert.equal("word `hello` at 1:1", h.hover.contents)
        assert.are_not.equal(pid, env.pids("fixture")[env.root])
        assert.is_false(env.alive(pid))
      end)

      test("disposal waits for a running query, then refuses (§6.6.6)", function(env)
        env.put("a.fx", "slow\n")
        assert(env.query("hover", "a.fx", { line = 0, character = 2 }))
        local provider = env.lsp._by_id.fixture
        local running = async.run(function() return env.query("hover", "a.fx", { line = 0, character = 1 }) end)
        assert.is_truthy(env.sent("fixture"), "the request never reached the server")
        assert.is_false(running:done())
        local pid = env.pids("fixture")[env.root]
        provider:disposeAll()
        assert.is_true(running:done())
        assert.equal("word `slow` at 0:1", assert(running:await()).hover.contents)
        assert.is_false(env.alive(pid))
        fails("LSP_DISPOSED", factory.name .. " provider is disposed", provider:query({ operation = "hover",
          filePath = "a.fx", position = { line = 0, character = 0 }, workspaceRoot = env.root }))
      end)

      test("a server that ignores $/cancelRequest is torn down after killGraceMs", function(env)
        env.put("a.ign", "silent\nhello\n")
        local sig, stop = aborted_after(100, "impatient")
        local v, err = env.query("hover", "a.ign", { line = 0, character = 1 }, { opts = { signal = sig } })
        stop()
        fails("ABORTED", "impatient", v, err)
        local pid = env.pids("stubborn")[env.root]
        assert.is_true(env.alive(pid))
        local deadline = loop.now_ms() + 30000 -- a ceiling: it goes 300 ms after the cancel
        while env.alive(pid) and loop.now_ms() < deadline do async.sleep(20) end
        assert.is_false(env.alive(pid), "killGraceMs (300) passed and the server still runs")
        -- the next query gets a fresh server
        local h = assert(env.query("hover", "a.ign", { line = 1, character = 1 }))
        assert.equal("word `hello` at 1:1", h.hover.contents)
        assert.are_not.equal(pid, env.pids("stubborn")[env.root])
      end)

      test("a server that picks another position encoding is refused", function(env)
        env.put("a.enc", FIXTURE_TEXT)
        fails("LSP_SERVER_FAILED", 'language server "utf8enc" chose position encoding "utf-8"; dsh requires "utf-16"',
          env.query("hover", "a.enc", { line = 0, character = 0 }))
        assert.is_nil(env.pids("utf8enc")[env.root])
      end)
    end)

    describe("setup", function()
      it("validates config with the reference's messages", function()
        local p = factory.module
        local context = require "dsh.context"
        local pre = factory.name .. ": "
        local here = debug.getinfo(1, "S").short_src
        -- misuse, raised at the ctx:use line
        local function bad(cfg, msg)
          local line
          local ok, err = pcall(function() line = debug.getinfo(1, "l").currentline; context.new():use(p, cfg) end)
          assert.is_false(ok)
          assert.equal(here .. ":" .. line .. ": " .. pre .. msg, err)
        end
        local ext = { [".c"] = "c" }
        bad({}, "servers must contain at least one server")
        bad({ servers = {} }, "servers must contain at least one server")
        bad({ servers = { [""] = { command = "x", extensionToLanguage = ext } } },
          "server ids must be non-empty strings")
        bad({ servers = { a = { command = "", extensionToLanguage = ext } } }, "servers.a.command must be non-empty")
        bad({ servers = { a = { command = "x", extensionToLanguage = ext, maxMessageBytes = 0 } } },
          "servers.a.maxMessageBytes must be a positive safe integer")
        bad({ servers = { a = { command = "x", extensionToLanguage = ext, maxStderrBytes = 1.5 } } },
          "servers.a.maxStderrBytes must be a positive safe integer")
        bad({ servers = { a = { command = "x", extensionToLanguage = ext, shutdownTimeoutMs = 2 ^ 31 } } },
          "servers.a.shutdownTimeoutMs must be a positive safe integer no greater than 2147483647")
        bad({ servers = { a = { command = "x", extensionToLanguage = ext, colour = 1 } } },
          'servers.a: unknown key "colour"')
      end)
    end)
  end)
end
