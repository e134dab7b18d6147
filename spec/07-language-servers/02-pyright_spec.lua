-- pyright (npm) in a real local sandbox: the cross-file edit case through
-- ctx.fs and through Bash, configuration by section, the operations, and
-- per-subproject roots.
local S = require "helpers.lsp_servers"

local LIB = "# 注释: 计算 🙂\ndef größe(x: int) -> int:\n    \"\"\"Twice x 🙂.\"\"\"\n    return x * 2\n\n\n"
  .. "class Parser:\n    def parse(self, text: str) -> list[str]:\n        return text.split()\n"
local MAIN = "# 🙂 main\nfrom lib import größe, Parser\n\nprint(größe(3))\nprint(Parser().parse(\"a b\"))\n"

describe("pyright in a sandbox", function()
  -- the preset's settings plus one override, answered to pyright's "python.analysis" section
  local W = S.world { pyright = S.server("pyright", { configuration = { python = { analysis = {
    autoSearchPaths = true, useLibraryCodeForTypes = true, diagnosticMode = "openFilesOnly",
    diagnosticSeverityOverrides = { reportUnusedVariable = "error" } } } } }) }

  it("sees a rewritten module: the broken import shows, through ctx.fs and through Bash", function()
    S.run(function()
      W.write("x1/lib.py", LIB)
      W.write("x1/main.py", MAIN)
      local d = assert(W.q("goToDefinition", "x1/main.py", "größe(3"))
      assert.same({ "x1/lib.py:2:5" }, W.places(d))
      assert.equal("", (W.messages("x1/main.py")))
      -- lib.py rewritten through ctx.fs: its name is gone
      W.write("x1/lib.py", (LIB:gsub("größe", "renamed")))
      local text, r = W.messages("x1/main.py")
      assert.is_true(r.settled)
      assert.matches('"größe" is unknown import symbol', text)
      -- and back, this time by a shell command (dshd's watch sees it)
      W.sh("cat > x1/lib.py", LIB)
      assert.equal("", (W.messages("x1/main.py")))
      -- a new module created by Bash is found; a deleted one is missed
      W.sh("printf 'VALUE = 1\\n' > x1/extra.py && printf 'from extra import VALUE\\nprint(VALUE)\\n' > x1/use.py")
      assert.equal("", (W.messages("x1/use.py")))
      W.sh("rm x1/extra.py")
      assert.matches('Import "extra" could not be resolved', (W.messages("x1/use.py")))
    end)
  end)

  it("answers workspace/configuration by section (python.analysis)", function()
    S.run(function()
      -- an unused local is no error unless python.analysis.diagnosticSeverityOverrides says so
      W.write("x5/unused.py", "def f() -> None:\n    spare = 1\n")
      local r = W.diagnostics("x5/unused.py")
      assert.equal(1, #r.diagnostics)
      assert.equal("error", r.diagnostics[1].severity)
      assert.matches('Variable "spare" is not accessed', r.diagnostics[1].message)
    end)
  end)

  it("renames across files through ctx.fs, in one change", function()
    S.run(function()
      W.write("x2/lib.py", LIB)
      W.write("x2/main.py", MAIN)
      local r = assert(W.q("rename", "x2/main.py", "größe(3", { newName = "twice" }))
      assert.equal("edit", r.kind)
      assert.is_true(r.applied)
      local files = {}
      for _, f in ipairs(r.files) do files[#files + 1] = f.path:match("[^/]+$") .. "=" .. f.edits end
      table.sort(files)
      assert.same({ "lib.py=1", "main.py=2" }, files)
      assert.matches("def twice%(x: int%)", W.read("x2/lib.py"))
      assert.matches("from lib import twice, Parser", W.read("x2/main.py"))
      assert.equal("", (W.messages("x2/main.py")))
      -- a file changed behind the server's back since it was read: nothing is written
      local before = W.read("x2/main.py")
      local v = assert(W.q("rename", "x2/main.py", "twice(3", { newName = "thrice", apply = false }))
      assert.is_false(v.applied)
      assert.equal(before, W.read("x2/main.py"))
    end)
  end)

  it("finds a symbol by name path with its whole body", function()
    S.run(function()
      W.write("x3/lib.py", LIB)
      local r = assert(W.q("symbol", "x3/lib.py", nil, { namePath = "Parser/parse", includeBody = true }))
      assert.equal(1, #r.matches)
      local m = r.matches[1]
      assert.equal("Parser/parse", m.namePath)
      assert.equal("def parse(self, text: str) -> list[str]:\n        return text.split()", m.body)
      assert.same({ line = 7, character = 4 }, m.bodyRange.start)
    end)
  end)

  it("completes, helps with signatures, finds type definitions", function()
    S.run(function()
      W.write("x4/lib.py", LIB)
      W.write("x4/main.py", "from lib import Parser, größe\np = Parser()\np.pa\ngröße(\n")
      local c = assert(W.q("completion", "x4/main.py", { line = 2, character = 4 }))
      local labels = {}
      for _, it in ipairs(c.items) do labels[it.label] = true end
      assert.is_true(labels.parse)
      local sh = assert(W.q("signatureHelp", "x4/main.py", { line = 3, character = 6 }))
      assert.matches("x: int", sh.signatures[1].label)
      local td = assert(W.q("goToTypeDefinition", "x4/main.py", "p = ", {}))
      assert.same({ "x4/lib.py:7:7" }, W.places(td))
    end)
  end)

  it("organizes imports (its command, which edits through workspace/applyEdit)", function()
    S.run(function()
      W.write("x6/m.py", "import sys\nimport os\nprint(os.sep, sys.argv)\n")
      local r = assert(W.q("organizeImports", "x6/m.py"))
      assert.is_true(r.applied, r.reason)
      assert.equal("import os\nimport sys\nprint(os.sep, sys.argv)\n", W.read("x6/m.py"))
    end)
  end)

  it("gives each subproject its own root", function()
    S.run(function()
      W.write("mono/a/pyproject.toml", "[project]\nname = 'a'\n")
      W.write("mono/a/m.py", "X = 1\n")
      W.write("mono/b/pyproject.toml", "[project]\nname = 'b'\n")
      W.write("mono/b/m.py", "Y = 2\n")
      local ra = assert(W.q("hover", "mono/a/m.py", "X"))
      local rb = assert(W.q("hover", "mono/b/m.py", "Y"))
      assert.equal(require("dsh.lsp").uri.from_path(W.ws .. "/mono/a"), ra.resolvedWorkspaceUri)
      assert.equal(require("dsh.lsp").uri.from_path(W.ws .. "/mono/b"), rb.resolvedWorkspaceUri)
      local roots = {}
      for _, i in ipairs(W.lsp:status().pyright.instances) do roots[#roots + 1] = i.root:sub(#W.ws + 2) end
      assert.same({ "", "mono/a", "mono/b" }, roots)
    end)
  end)

  W.within_limits("pyright")
end)
