-- gopls (Debian, with the go command) in a real local sandbox: the "gopls"
-- settings section, the cross-file edit case, the operations, nested
-- modules as roots.
local S = require "helpers.lsp_servers"

local MOD = "module example.com/m\n\ngo 1.19\n"
local LIB = "package main\n\n// Größe doubles 🙂.\nfunc Größe(x int) int { return x * 2 }\n"
local MAIN = "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(Größe(3)) }\n"

describe("gopls in a sandbox", function()
  local W = S.world { gopls = S.server("gopls", { env = { GOFLAGS = "-mod=mod", GOPROXY = "off",
    GOCACHE = "/tmp/gocache", HOME = "/home/user" } }) }

  it("sees a rewritten file of the package, through ctx.fs and through Bash", function()
    S.run(function()
      W.write("g1/go.mod", MOD)
      W.write("g1/lib.go", LIB)
      W.write("g1/main.go", MAIN)
      assert.same({ "g1/lib.go:4:6" }, W.places(assert(W.q("goToDefinition", "g1/main.go", "Größe(3", {}))))
      assert.equal("", (W.messages("g1/main.go")))
      W.write("g1/lib.go", (LIB:gsub("func Größe", "func Renamed")))
      assert.matches("undeclared name: Größe", (W.messages("g1/main.go")))
      W.sh("cat > g1/lib.go", LIB)
      assert.equal("", (W.messages("g1/main.go")))
    end)
  end)

  it("renames across files and formats", function()
    S.run(function()
      W.write("g2/go.mod", MOD)
      W.write("g2/lib.go", LIB)
      W.write("g2/main.go", MAIN)
      local r = assert(W.q("rename", "g2/main.go", "Größe(3", { newName = "Twice" }))
      assert.is_true(r.applied)
      assert.matches("func Twice%(x int%)", W.read("g2/lib.go"))
      assert.matches("fmt.Println%(Twice%(3%)%)", W.read("g2/main.go"))
      W.write("g2/ugly.go", "package main\nfunc  ugly( ) int {return 1}\n")
      assert.is_true(assert(W.q("format", "g2/ugly.go")).applied)
      assert.equal("package main\n\nfunc ugly() int { return 1 }\n", W.read("g2/ugly.go"))
    end)
  end)

  it("organizes imports", function()
    S.run(function()
      W.write("g4/go.mod", MOD)
      W.write("g4/m.go", "package main\n\nimport (\n\t\"os\"\n\t\"fmt\"\n)\n\nfunc main() { fmt.Println(1) }\n")
      local r = assert(W.q("organizeImports", "g4/m.go"))
      assert.is_true(r.applied, r.reason)
      assert.equal("package main\n\nimport (\n\t\"fmt\"\n)\n\nfunc main() { fmt.Println(1) }\n", W.read("g4/m.go"))
    end)
  end)

  it("gives a nested module its own root", function()
    S.run(function()
      W.write("g3/inner/go.mod", "module example.com/inner\n\ngo 1.19\n")
      W.write("g3/inner/x.go", "package inner\n\nconst X = 1\n")
      local r = assert(W.q("hover", "g3/inner/x.go", "X = 1"))
      assert.equal(require("dsh.lsp").uri.from_path(W.ws .. "/g3/inner"), r.resolvedWorkspaceUri)
      assert.matches("const X", r.hover.contents)
    end)
  end)

  W.within_limits("gopls")
end)
