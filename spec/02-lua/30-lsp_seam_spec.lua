-- The ctx.lsp seam without a server: registration (§2.5), routing, request
-- checks, UTF-16 positions, file URIs, result normalisation and the
-- per-workspace queue.
local async = require "dsh.async"
local errors = require "dsh.errors"
local helpers = require "helpers"
local json = require "dsh.json"
local lsp = require "dsh.lsp"
local normalize = require "dsh.lsp._normalize"
local queue = require "dsh.lsp._queue"

local function fails(code, message, v, err)
  assert.is_nil(v, "expected a failure")
  assert.equal(code, err.code, tostring(err))
  if message then assert.equal(message, err.message) end
end

-- A provider written against the seam's extension point: it echoes requests.
local function echo(id, map)
  return { id = id, extensionToLanguage = map, seen = {},
    query = function(self, req, signal)
      self.seen[#self.seen + 1] = { req = req, signal = signal }
      return { kind = "hover", hover = { contents = self.id .. ":" .. req.filePath } }
    end }
end

describe("dsh.lsp", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("lists every code it returns, each named as itself and catalogued in dsh.errors", function()
    for k, v in pairs(lsp.codes) do
      assert.equal(k, v)
      assert.is_string(errors.known(k), k .. " is not catalogued")
    end
    for code in pairs(errors.CATALOGUE.lsp) do assert.equal(code, lsp.codes[code]) end
    assert.same({ "ABORTED", "TIMEOUT" }, { lsp.codes.ABORTED, lsp.codes.TIMEOUT })
    for _, c in ipairs { "LSP_UNAVAILABLE", "LSP_INVALID_PROVIDER", "LSP_CONFLICT", "LSP_DISPOSED",
      "LSP_UNSUPPORTED_OPERATION", "LSP_MALFORMED_RESPONSE", "LSP_WORKSPACE_REQUIRED" } do
      assert.equal(c, lsp.codes[c])
    end
  end)

  it("validates a registration completely before registering anything (§2.5)", function()
    local reg = lsp.new()
    local function bad(p, code, msg, before)
      fails(code, msg, reg:register(p))
      assert.same(before or {}, reg:providers())
    end
    bad("x", "LSP_INVALID_PROVIDER", "a provider must be a table")
    bad(echo("", { [".c"] = "c" }), "LSP_INVALID_PROVIDER", "provider id must be a non-empty string")
    bad(echo("a", {}), "LSP_INVALID_PROVIDER", 'provider "a" must handle at least one extension')
    bad(echo("a", { c = "c" }), "LSP_INVALID_PROVIDER", 'provider "a": extension "c" must look like ".ext"')
    bad(echo("a", { [".a.b"] = "c" }), "LSP_INVALID_PROVIDER", 'provider "a": extension ".a.b" must look like ".ext"')
    bad(echo("a", { [".a\\b"] = "c" }), "LSP_INVALID_PROVIDER",
      'provider "a": extension ".a\\b" must look like ".ext"')
    bad(echo("a", { [".c"] = "" }), "LSP_INVALID_PROVIDER",
      'provider "a": extension ".c" needs a non-empty language id')
    bad(echo("a", { [".c"] = "c", [".C"] = "c" }), "LSP_INVALID_PROVIDER", 'provider "a" lists extension ".c" twice')
    bad({ id = "a", extensionToLanguage = { [".c"] = "c" } }, "LSP_INVALID_PROVIDER",
      'provider "a" has no query function')
    local off = assert(reg:register(echo("clangd", { [".c"] = "c", [".H"] = "c" })))
    bad(echo("clangd", { [".py"] = "python" }), "LSP_CONFLICT", 'a provider with id "clangd" is already registered',
      { "clangd" })
    bad(echo("other", { [".py"] = "python", [".h"] = "c" }), "LSP_CONFLICT",
      'extension ".h" is already handled by provider "clangd"', { "clangd" })
    assert.same({ "clangd" }, reg:providers())
    assert(reg:register(echo("pyright", { [".py"] = "python" })))
    assert.same({ "clangd", "pyright" }, reg:providers())
    off()
    off()
    assert.same({ "pyright" }, reg:providers())
    assert(reg:register(echo("ccls", { [".c"] = "c" })))
  end)

  it("routes by the lower-cased final extension, each owned by one provider", function()
    helpers.run(function()
      local reg = lsp.new()
      local c, py = echo("c", { [".c"] = "c", [".h"] = "c" }), echo("py", { [".py"] = "python" })
      assert(reg:register(c))
      assert(reg:register(py))
      local req = { operation = "hover", position = { line = 0, character = 0 }, workspaceRoot = "/w" }
      for path, want in pairs { ["a.C"] = "c:a.C", ["dir.py/x.H"] = "c:dir.py/x.H", ["b.tar.PY"] = "py:b.tar.PY" } do
        req.filePath = path
        assert.equal(want, assert(reg:query(req)).hover.contents)
      end
      req.filePath = "notes.txt"
      fails("LSP_UNAVAILABLE", 'no language server handles ".txt" files (notes.txt)', reg:query(req))
      req.filePath = "dir.c/Makefile"
      fails("LSP_UNAVAILABLE", 'no language server handles "extensionless" files (dir.c/Makefile)', reg:query(req))
      req.filePath, req.workspaceRoot = "a.c", nil
      fails("LSP_WORKSPACE_REQUIRED", "a workspaceRoot is required for language server queries", reg:query(req))
      req.workspaceRoot = "  "
      fails("LSP_WORKSPACE_REQUIRED", nil, reg:query(req))
      -- a provider gets a checked copy, and the signal
      local ctl = async.controller()
      req.workspaceRoot, req.extra = "/w", "dropped"
      assert(reg:query(req, { signal = ctl.signal }))
      local seen = c.seen[#c.seen]
      assert.same({ operation = "hover", filePath = "a.c", workspaceRoot = "/w",
        position = { line = 0, character = 0 } }, seen.req)
      assert.equal(ctl.signal, seen.signal)
      ctl:abort({ why = "reason object" })
      local v, err = reg:query(req, { signal = ctl.signal })
      fails("ABORTED", nil, v, err)
      assert.same({ why = "reason object" }, err.reason)
      -- diagnostics() is a query with a default wait
      assert(reg:diagnostics("a.c", { workspaceRoot = "/w" }))
      assert.same({ operation = "diagnostics", filePath = "a.c", workspaceRoot = "/w", waitMs = 5000 },
        c.seen[#c.seen].req)
      reg:dispose()
      fails("LSP_DISPOSED", "ctx.lsp is disposed", reg:query(req))
      fails("LSP_DISPOSED", "ctx.lsp is disposed", reg:register(echo("late", { [".z"] = "z" })))
    end)
  end)

  it("raises on malformed requests, naming the method", function()
    local reg = lsp.new()
    -- misuse names the method and points at the caller's line (here)
    local function raises(req, msg)
      local line
      local ok, err = pcall(function() line = debug.getinfo(1, "l").currentline; reg:query(req) end)
      assert.is_false(ok)
      assert.equal(debug.getinfo(1, "S").short_src .. ":" .. line .. ": " .. msg, err)
    end
    raises("x", "dsh.lsp: query: expected a request table, got string")
    raises({ operation = "frobnicate", filePath = "a.c" }, "dsh.lsp: query: unknown operation frobnicate")
    raises({ operation = "rename", filePath = "a.c", position = { line = 0, character = 0 } },
      "dsh.lsp: query: rename needs newName, a non-empty string")
    raises({ operation = "symbol", filePath = "a.c" },
      'dsh.lsp: query: symbol needs namePath, a string such as "Parser/parse"')
    raises({ operation = "hover", filePath = "" }, "dsh.lsp: query: filePath must be a non-empty string")
    raises({ operation = "hover", filePath = "a.c" }, "dsh.lsp: query: position must be a table {line=, character=}")
    raises({ operation = "hover", filePath = "a.c", position = { line = 0, character = 0.5 } },
      "dsh.lsp: query: position.character must be a non-negative integer (0-based)")
    raises({ operation = "workspaceSymbol", filePath = "a.c" }, "dsh.lsp: query: workspaceSymbol needs a query string")
    raises({ operation = "diagnostics", filePath = "a.c", waitMs = -1 },
      "dsh.lsp: query: waitMs must be an integer in [0, 600000]")
    local ok, err = pcall(reg.query, reg, { operation = "documentSymbol", filePath = "a.c" }, { timeoutMs = 0 })
    assert.is_false(ok)
    assert.matches("dsh.lsp: query: opts.timeoutMs must be a positive integer", err, 1, true)
    ok, err = pcall(reg.query, reg, { operation = "documentSymbol", filePath = "a.c" }, "soon")
    assert.is_false(ok)
    assert.matches("dsh.lsp: query: opts: expected table, got string", err, 1, true)
  end)

  it("converts byte offsets and UTF-16 positions exactly (CJK, emoji, CRLF, CR)", function()
    local P = lsp.position
    assert.equal(0, P.utf16_len(""))
    assert.equal(2, P.utf16_len("你好"))
    assert.equal(2, P.utf16_len("🙂"))
    assert.equal(5, P.utf16_len("a🙂é好"))
    local text = "ab\r\n你好🙂x\rz\n"
    assert.same({ 1, 5, 17, 19 }, P.line_starts(text))
    assert.equal("你好🙂x", P.line_text(text, 1))
    assert.equal("z", P.line_text(text, 2))
    assert.equal("", P.line_text(text, 3))
    assert.is_nil(P.line_text(text, 4))
    local x = text:find("x", 1, true)
    assert.same({ line = 1, character = 4 }, P.from_index(text, x))
    assert.equal(x, P.to_index(text, { line = 1, character = 4 }))
    assert.equal(text:find("🙂", 1, true), P.to_index(text, { line = 1, character = 2 }))
    -- inside the surrogate pair: the code point's start; past the end: the line's end
    assert.equal(text:find("🙂", 1, true), P.to_index(text, { line = 1, character = 3 }))
    assert.equal(x + 1, P.to_index(text, { line = 1, character = 99 }))
    assert.equal(#text + 1, P.to_index(text, { line = 9, character = 0 }))
    -- a byte inside a code point counts as before it
    assert.same({ line = 1, character = 1 }, P.from_index(text, text:find("好", 1, true) + 1))
    assert.same({ line = 2, character = 0 }, P.of(text, "z"))
    assert.is_nil(P.of(text, "nope"))
    -- every code point boundary round-trips
    local line = "a你🙂b\u{10FFFF}é"
    local i = 1
    while i <= #line + 1 do
      local pos = P.from_index(line, i)
      assert.equal(i, P.to_index(line, pos))
      if i > #line then break end
      local b = line:byte(i)
      i = i + (b < 0x80 and 1 or b < 0xE0 and 2 or b < 0xF0 and 3 or 4)
    end
  end)

  it("makes file URIs as the reference does and reads any file URI back", function()
    local U = lsp.uri
    assert.equal("file:///workspace/a%20b%23c.ts", U.from_path("/workspace/a b#c.ts"))
    assert.equal("file:///w/%E4%BD%A0%F0%9F%99%82!~*'()-_.txt", U.from_path("/w/你🙂!~*'()-_.txt"))
    local line
    local ok, err = pcall(function() line = debug.getinfo(1, "l").currentline; U.from_path("relative/x", "lsp-e2b") end)
    assert.is_false(ok)
    assert.equal(debug.getinfo(1, "S").short_src .. ":" .. line
      .. ': lsp-e2b: expected an absolute remote path, received "relative/x"', err)
    assert.equal("/workspace/a b#c.ts", U.to_path("file:///workspace/a%20b%23c.ts"))
    assert.equal("/w/x", U.to_path("FILE://localhost/w/x"))
    assert.equal("/w/x", U.to_path("file:/w/x"))
    assert.equal("/w/你", U.to_path("file:///w/%e4%bd%a0"))
    assert.is_nil(U.to_path("untitled:Untitled-1"))
    assert.is_nil(U.to_path("file://server/share/x"))
    assert.is_nil(U.to_path("file:///w/%zz"))
    assert.is_nil(U.to_path("file:///w/%00"))
    assert.is_nil(U.to_path(7))
  end)

  it("normalises hover and locations, and names what is malformed", function()
    local null = json.null
    local s = 'language server "x"'
    local function hover(c, r) return normalize.hover(s, { contents = c, range = r }) end
    assert.same({ contents = "plain" }, hover("plain"))
    assert.same({ contents = "**md**" }, hover({ kind = "markdown", value = "**md**" }))
    assert.same({ contents = "```c\nint x\n```" }, hover({ language = "c", value = "int x" }))
    assert.same({ contents = "a\n\n```c\nb\n```" }, hover({ "a", { language = "c", value = "b" }, "  " }))
    local r12 = { start = { line = 1, character = 2 }, ["end"] = { line = 1, character = 3 } }
    assert.same({ contents = "x", range = r12 }, hover("x", r12))
    assert.is_nil(hover(""))
    assert.is_nil(hover({}))
    assert.is_nil(normalize.hover(s, null))
    local function bad_hover(c, r)
      local v, err = hover(c, r)
      fails("LSP_MALFORMED_RESPONSE", s .. " returned a malformed hover", v, err)
    end
    bad_hover(42)
    bad_hover({ kind = "html", value = "x" })
    bad_hover({ "a", 3 })
    local v, err = hover("x", { start = { line = -1, character = 0 }, ["end"] = { line = 0, character = 0 } })
    fails("LSP_MALFORMED_RESPONSE", s .. " returned a malformed hover range", v, err)
    v, err = normalize.hover(s, "text")
    fails("LSP_MALFORMED_RESPONSE", nil, v, err)

    local r = { start = { line = 0, character = 1 }, ["end"] = { line = 0, character = 4 } }
    local r2 = { start = { line = 2, character = 0 }, ["end"] = { line = 2, character = 9 } }
    assert.same({}, normalize.locations(s, nil))
    assert.same({}, normalize.locations(s, null))
    assert.same({}, normalize.locations(s, {}))
    assert.same({ { uri = "file:///a", range = r } }, normalize.locations(s, { uri = "file:///a", range = r }))
    assert.same({ { uri = "file:///b", range = r } }, normalize.locations(s, { { targetUri = "file:///b",
      targetRange = r2, targetSelectionRange = r } }))
    assert.same({ { uri = "file:///b", range = r2 } }, normalize.locations(s, { { targetUri = "file:///b",
      targetRange = r2 } }))
    for _, junk in ipairs { 7, { uri = 7 }, { { uri = "file:///a" } }, { { uri = "file:///a", range = r }, "x" } } do
      v, err = normalize.locations(s, junk)
      fails("LSP_MALFORMED_RESPONSE", s .. " returned a malformed location result", v, err)
    end
    -- diagnostics, symbols
    assert.same({ { range = r, severity = "warning", message = "m", code = 3 } },
      normalize.diagnostics(s, { { range = r, severity = 2, message = "m", code = 3, source = null } }))
    v, err = normalize.diagnostics(s, { { range = r, severity = 9, message = "m" } })
    fails("LSP_MALFORMED_RESPONSE", s .. " returned a malformed diagnostic severity", v, err)
    local nested = { { name = "S", kind = 23, range = r2, selectionRange = r, children = {
      { name = "f", kind = 8, range = r, selectionRange = r } } } }
    -- each with its name path and its whole range (bodyRange)
    assert.same({ { name = "S", kind = 23, uri = "file:///d", range = r, bodyRange = r2, namePath = "S" },
      { name = "f", kind = 8, uri = "file:///d", range = r, bodyRange = r, container = "S", namePath = "S/f" } },
      normalize.symbols(s, nested, "file:///d"))
    -- a member named as its language joins names is split the same way
    assert.same({ "Parser", "parse" }, normalize.name_parts("Parser::parse"))
    assert.same({ "Parser", "Parse" }, normalize.name_parts("(*Parser).Parse"))
    assert.same({ "T", "M" }, normalize.name_parts("T.M"))
  end)

  it("queues per key in arrival order; an abort leaves the line with its reason", function()
    helpers.run(function()
      local qu = queue.new()
      local order = {}
      local r1 = assert(qu:acquire("w1"))
      local r2 = assert(qu:acquire("w2")) -- another key does not wait
      local tasks = {}
      for i = 1, 3 do
        tasks[i] = async.run(function()
          local rel, _, waited = qu:acquire("w1")
          order[#order + 1] = i
          assert.is_true(waited)
          async.sleep(5)
          rel()
        end)
      end
      local ctl = async.controller()
      local aborted = async.run(function() return qu:acquire("w1", ctl.signal) end)
      async.sleep(10)
      ctl:abort("queued stop")
      local rel, err = aborted:await()
      assert.is_nil(rel)
      fails("ABORTED", "queued stop", nil, err)
      assert.equal("queued stop", err.reason)
      r1()
      r1() -- once only
      for _, t in ipairs(tasks) do t:await() end
      assert.same({ 1, 2, 3 }, order)
      local idle = async.run(function() return qu:idle() end)
      async.sleep(5)
      assert.is_false(idle:done())
      r2()
      assert.is_true(idle:await())
      ctl = async.controller()
      ctl:abort("pre")
      fails("ABORTED", "pre", qu:acquire("w3", ctl.signal))
    end)
  end)
end)
