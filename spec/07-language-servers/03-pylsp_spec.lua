-- pylsp (Debian's python3-pylsp) in a real local sandbox: settings only
-- through workspace/didChangeConfiguration, the cross-file edit case (jedi
-- reads the other module from disk), the operations it has.
local S = require "helpers.lsp_servers"

local LIB = "# 🙂 lib\ndef größe(x):\n    return x * 2\n"
local MAIN = "# 🙂 main\nfrom lib import größe\nprint(größe(3))\n"

describe("pylsp in a sandbox", function()
  -- pycodestyle (on by pylsp's own default) turned off through the settings, pyflakes on
  local W = S.world { pylsp = S.server("pylsp", { configuration = { pylsp = { plugins = {
    pycodestyle = { enabled = false }, mccabe = { enabled = false }, pyflakes = { enabled = true } } } } }) }

  it("takes its settings from didChangeConfiguration", function()
    S.run(function()
      W.write("p1/style.py", "x=1\nprint(y)\n")
      -- pyflakes speaks, pycodestyle (E225 missing whitespace around operator) does not
      assert.equal("undefined name 'y'", (W.messages("p1/style.py")))
    end)
  end)

  it("sees a rewritten module (definition follows the file as it is now)", function()
    S.run(function()
      W.write("p2/lib.py", LIB)
      W.write("p2/main.py", MAIN)
      assert.same({ "p2/lib.py:2:5" }, W.places(assert(W.q("goToDefinition", "p2/main.py", "größe(3"))))
      W.sh("cat > p2/lib.py", "# 🙂 lib\n\n\ndef größe(x):\n    return x * 2\n")
      assert.same({ "p2/lib.py:4:5" }, W.places(assert(W.q("goToDefinition", "p2/main.py", "größe(3"))))
      assert.matches("undefined name 'nope'", (function()
        W.write("p2/main.py", MAIN .. "print(nope)\n")
        return (W.messages("p2/main.py"))
      end)())
    end)
  end)

  it("renames, completes and finds references", function()
    S.run(function()
      W.write("p3/lib.py", LIB)
      W.write("p3/main.py", MAIN)
      local refs = assert(W.q("findReferences", "p3/main.py", "größe(3"))
      assert.is_true(#refs.locations >= 2)
      local r = assert(W.q("rename", "p3/lib.py", "größe", { newName = "twice" }))
      assert.is_true(r.applied)
      assert.matches("def twice", W.read("p3/lib.py"))
      assert.matches("print%(twice%(3%)%)", W.read("p3/main.py"))
      W.write("p3/c.py", "import lib\nlib.tw\n")
      local c = assert(W.q("completion", "p3/c.py", { line = 1, character = 6 }))
      assert.matches("^twice", c.items[1].label)
    end)
  end)

  W.within_limits("pylsp")
end)
