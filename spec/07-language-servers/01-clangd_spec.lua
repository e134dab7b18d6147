-- clangd (Debian) in a real local sandbox: a header rewritten behind the
-- server (the cross-file case), the operations clangd has, and roots by
-- compile_flags.txt.
local S = require "helpers.lsp_servers"

local H = "/* 形状 🙂 */\nint area(int side);\nstruct Shape { int side; };\n"
local C = '#include "shape.h"\n/* 🙂 main */\nint main(void) {\n  struct Shape s = { 3 };\n  return area(s.side);\n}\n'

describe("clangd in a sandbox", function()
  local W = S.world("clangd")

  it("sees a rewritten header: the call breaks, through ctx.fs and through Bash", function()
    S.run(function()
      W.write("c1/shape.h", H)
      W.write("c1/main.c", C)
      assert.same({ "c1/shape.h:2:5" }, W.places(assert(W.q("goToDeclaration", "c1/main.c", "area(s"))))
      assert.equal("", (W.messages("c1/main.c")))
      W.write("c1/shape.h", (H:gsub("area", "surface")))
      assert.matches("[Ii]mplicit declaration of function 'area'", (W.messages("c1/main.c")))
      W.sh("cat > c1/shape.h", H)
      assert.equal("", (W.messages("c1/main.c")))
    end)
  end)

  it("renames, formats, completes and finds symbols by name path", function()
    S.run(function()
      W.write("c2/shape.h", H)
      W.write("c2/main.c", C)
      local r = assert(W.q("rename", "c2/main.c", "s = ", { newName = "sq" }))
      assert.is_true(r.applied)
      assert.matches("struct Shape sq = { 3 };\n  return area%(sq%.side%);", W.read("c2/main.c"))
      W.write("c2/ugly.c", "int   f( int x ){return x*2;}\n")
      local f = assert(W.q("format", "c2/ugly.c"))
      assert.is_true(f.applied)
      assert.equal("int f(int x) { return x * 2; }\n", W.read("c2/ugly.c"))
      W.write("c2/use.c", '#include "shape.h"\nint g(void) { return ar; }\n')
      local c = assert(W.q("completion", "c2/use.c", { line = 1, character = 23 }))
      local found = false
      for _, it in ipairs(c.items) do if it.label:find("area") then found = true end end
      assert.is_true(found)
      local sym = assert(W.q("symbol", "c2/main.c", nil, { namePath = "main", includeBody = true }))
      assert.equal(1, #sym.matches)
      assert.matches("^int main%(void%) {.*}$", sym.matches[1].body)
      local sh = assert(W.q("signatureHelp", "c2/use.c", { line = 1, character = 20 }))
      assert.is_table(sh.signatures)
    end)
  end)

  it("walks the type hierarchy of C++ classes", function()
    S.run(function()
      W.write("c4/shapes.cpp", "// 形状 🙂\nstruct Shape { virtual ~Shape() {} };\nstruct Square : Shape {};\n"
        .. "struct Cube : Square {};\n")
      local up = assert(W.q("supertypes", "c4/shapes.cpp", "Square :"))
      assert.equal("Square", up.item.name)
      assert.equal("Shape", up.types[1].name)
      local down = assert(W.q("subtypes", "c4/shapes.cpp", "Square :"))
      assert.equal("Cube", down.types[1].name)
    end)
  end)

  it("is reachable through the lsp tool: a rename, a symbol's body, compact answers", function()
    S.run(function()
      local tool = require "dsh.tools.lsp"
      local null = require("dsh.json").null
      W.write("c5/shape.h", H)
      W.write("c5/main.c", C)
      local function run(input)
        for _, k in ipairs { "line", "character", "query", "name_path", "new_name", "title" } do
          if input[k] == nil then input[k] = null end
        end
        return tool.run(W.ctx, input, { workspaceRoot = W.ws })
      end
      local text = assert(run { operation = "rename", file_path = "c5/main.c", line = 4, character = 16,
        new_name = "cube" })
      assert.equal("Applied 2 edit(s) to 1 file(s):\n  c5/main.c (2 edit(s))\n"
        .. "Read the files again before editing them further.", text)
      local body = assert(run { operation = "symbol", file_path = "c5/main.c", name_path = "main" })
      assert.equal("function main at c5/main.c:3:1-6:2\n     3\tint main(void) {\n"
        .. "     4\t  struct Shape cube = { 3 };\n"
        .. "     5\t  return area(cube.side);\n     6\t}", body)
      assert.matches("Files with a language server here: %.c %.cc %.cpp", tool.describe(W.lsp))
    end)
  end)

  it("gives a project marked by compile_flags.txt its own root", function()
    S.run(function()
      W.write("c3/proj/compile_flags.txt", "-DANSWER=42\n")
      W.write("c3/proj/a.c", "int x = ANSWER;\n")
      local r = W.diagnostics("c3/proj/a.c")
      assert.equal(0, #r.diagnostics) -- the flags of that root applied
      assert.equal(require("dsh.lsp").uri.from_path(W.ws .. "/c3/proj"), r.resolvedWorkspaceUri)
    end)
  end)

  W.within_limits("clangd")
end)
