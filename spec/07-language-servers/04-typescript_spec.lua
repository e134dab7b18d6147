-- typescript-language-server with typescript (npm) in a real local
-- sandbox: tsserver hears of changes from dsh's watch (useClientFileWatcher),
-- the cross-file edit case, the operations, organize imports, roots by
-- package.json.
local S = require "helpers.lsp_servers"

local LIB = "// 🙂 lib\nexport function größe(x: number): number { return x * 2; }\n"
  .. "export class Parser { parse(text: string): string[] { return text.split(' '); } }\n"
local MAIN = "// 🙂 main\nimport { größe, Parser } from './lib';\nconsole.log(größe(3), new Parser().parse('a b'));\n"

describe("typescript-language-server in a sandbox", function()
  local W = S.world("typescript")

  it("sees a rewritten module: the broken import shows, through ctx.fs and through Bash", function()
    S.run(function()
      W.write("t1/lib.ts", LIB)
      W.write("t1/main.ts", MAIN)
      assert.equal("", (W.messages("t1/main.ts")))
      W.write("t1/lib.ts", (LIB:gsub("größe", "renamed")))
      assert.matches("has no exported member 'größe'", (W.messages("t1/main.ts")))
      W.sh("cat > t1/lib.ts", LIB)
      assert.equal("", (W.messages("t1/main.ts")))
    end)
  end)

  it("renames across files, organizes imports, finds the type definition", function()
    S.run(function()
      W.write("t2/lib.ts", LIB)
      W.write("t2/main.ts", MAIN)
      assert(W.q("hover", "t2/main.ts", "größe(3")) -- open: tsserver renames in the files of its projects
      local r = assert(W.q("rename", "t2/lib.ts", "größe(x", { newName = "twice" }))
      assert.is_true(r.applied)
      assert.matches("export function twice", W.read("t2/lib.ts"))
      assert.matches("console.log%(twice%(3%)", W.read("t2/main.ts"))
      W.write("t2/imports.ts", "import { twice, Parser } from './lib';\nimport { readFileSync } from 'fs';\n"
        .. "console.log(twice(1));\n")
      local o = assert(W.q("organizeImports", "t2/imports.ts"))
      assert.is_true(o.applied, o.reason)
      -- sorted and merged (tsserver keeps the unused ones of a file that does not compile: no 'fs' types here)
      assert.equal("import { readFileSync } from 'fs';\nimport { Parser, twice } from './lib';\n"
        .. "console.log(twice(1));\n", W.read("t2/imports.ts"))
      W.write("t2/t.ts", "import { Parser } from './lib';\nconst p = new Parser();\np.parse('x');\n")
      assert.same({ "t2/lib.ts:3:14" }, W.places(assert(W.q("goToTypeDefinition", "t2/t.ts", "p.parse"))))
      local sym = assert(W.q("symbol", "t2/lib.ts", nil, { namePath = "Parser/parse", includeBody = true }))
      assert.equal("parse(text: string): string[] { return text.split(' '); }", sym.matches[1].body)
    end)
  end)

  it("completes and helps with signatures", function()
    S.run(function()
      W.write("t3/lib.ts", LIB)
      W.write("t3/c.ts", "import { Parser } from './lib';\nnew Parser().pa\n")
      local c = assert(W.q("completion", "t3/c.ts", { line = 1, character = 15 }))
      assert.equal("parse", c.items[1].label)
      W.write("t3/s.ts", "import { größe } from './lib';\ngröße(\n")
      local sh = assert(W.q("signatureHelp", "t3/s.ts", { line = 1, character = 6 }))
      assert.matches("x: number", sh.signatures[1].label)
    end)
  end)

  it("gives a package its own root", function()
    S.run(function()
      W.write("t4/pkg/package.json", '{ "name": "pkg" }\n')
      W.write("t4/pkg/a.ts", "export const a = 1;\n")
      local r = assert(W.q("hover", "t4/pkg/a.ts", "a ="))
      assert.equal(require("dsh.lsp").uri.from_path(W.ws .. "/t4/pkg"), r.resolvedWorkspaceUri)
    end)
  end)

  W.within_limits("typescript")
end)
