-- bash-language-server (npm) in a real local sandbox: readiness by its log
-- (the first answer waits for the background analysis), the cross-file
-- edit case (a sourced script rewritten), the operations it has.
local S = require "helpers.lsp_servers"

describe("bash-language-server in a sandbox", function()
  local W = S.world("bash")

  it("answers the first workspace query once the workspace was analysed", function()
    S.run(function()
      -- written before the server starts: only the background analysis finds it
      W.write("b1/lib.sh", "# 🙂\ngreet_everyone() { echo hi; }\n")
      W.write("b1/main.sh", "#!/bin/bash\n. ./lib.sh\ngreet_everyone\n")
      local r = assert(W.q("workspaceSymbol", "b1/main.sh", nil, { query = "greet_everyone" }))
      assert.equal(1, #r.symbols)
      assert.matches("b1/lib%.sh$", r.symbols[1].uri)
    end)
  end)

  it("sees a rewritten sourced script", function()
    S.run(function()
      W.write("b2/lib.sh", "# 🙂\nhello_there() { echo hi; }\n")
      W.write("b2/main.sh", "#!/bin/bash\n. ./lib.sh\nhello_there\n")
      assert.same({ "b2/lib.sh:2:1" }, W.places(assert(W.q("goToDefinition", "b2/main.sh", "hello_there"))))
      W.sh("cat > b2/lib.sh", "# 🙂\n\n\nhello_there() { echo hi; }\n")
      assert.same({ "b2/lib.sh:4:1" }, W.places(assert(W.q("goToDefinition", "b2/main.sh", "hello_there"))))
    end)
  end)

  it("renames and finds references", function()
    S.run(function()
      W.write("b3/s.sh", "#!/bin/bash\ncount=1\necho \"$count\"\n")
      local refs = assert(W.q("findReferences", "b3/s.sh", "count="))
      assert.equal(2, #refs.locations)
      local r = assert(W.q("rename", "b3/s.sh", "count=", { newName = "total" }))
      assert.is_true(r.applied)
      assert.equal("#!/bin/bash\ntotal=1\necho \"$total\"\n", W.read("b3/s.sh"))
    end)
  end)

  W.within_limits("bash")
end)
