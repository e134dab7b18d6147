-- A server's workspace edit applied through a real ctx.fs (fs-local) as one
-- change, and the glob patterns of watcher registrations.
local edits = require "dsh.lsp._edits"
local glob = require "dsh.lsp._glob"
local helpers = require "helpers"
local lsp = require "dsh.lsp"

local function at(l1, c1, l2, c2)
  return { start = { line = l1, character = c1 }, ["end"] = { line = l2, character = c2 } }
end

describe("dsh.lsp edits", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  local function with_fs(fn)
    helpers.run(function()
      local root = helpers.tmpdir()
      local ok, err = pcall(helpers.with_context, { { require "dsh.providers.fs_local", { root = root } } },
        function(ctx) fn(ctx.fs, root) end)
      helpers.rm_rf(root)
      assert(ok, err)
    end)
  end

  it("applies UTF-16 ranges past emoji in every file, or in none", function()
    with_fs(function(fs, root)
      helpers.write_file(root .. "/a.py", "x = '🙂'; old = 1\nprint(old)\n")
      helpers.write_file(root .. "/b.py", "from a import old\n")
      local n = assert(edits.normalize("srv", { documentChanges = {
        { textDocument = { uri = lsp.uri.from_path(root .. "/a.py"), version = 3 },
          edits = { { range = at(0, 10, 0, 13), newText = "new" }, { range = at(1, 6, 1, 9), newText = "new" } } },
        { textDocument = { uri = lsp.uri.from_path(root .. "/b.py") },
          edits = { { range = at(0, 14, 0, 17), newText = "new" } } } } }))
      local r = assert(edits.apply(fs, n.files, { seen = function(p)
        if p == root .. "/a.py" then return "x = '🙂'; old = 1\nprint(old)\n", 3 end
      end }))
      assert.equal(2, #r.files)
      assert.equal("x = '🙂'; new = 1\nprint(new)\n", helpers.read_file(root .. "/a.py"))
      assert.equal("from a import new\n", helpers.read_file(root .. "/b.py"))

      -- the server saw another text than the file's: nothing is written
      local n2 = assert(edits.normalize("srv", { changes = { [lsp.uri.from_path(root .. "/a.py")] = {
        { range = at(0, 0, 0, 1), newText = "y" } } } }))
      local v, err = edits.apply(fs, n2.files, { seen = function() return "something else", 1 end })
      assert.is_nil(v)
      assert.equal("LSP_EDIT_FAILED", err.code)
      assert.matches("changed since the language server saw it", err.message)
      assert.equal("x = '🙂'; new = 1\nprint(new)\n", helpers.read_file(root .. "/a.py"))

      -- a later file changes between the read and the write: the earlier one is restored
      local n3 = assert(edits.normalize("srv", { changes = {
        [lsp.uri.from_path(root .. "/a.py")] = { { range = at(0, 0, 0, 1), newText = "z" } },
        [lsp.uri.from_path(root .. "/b.py")] = { { range = at(0, 0, 0, 4), newText = "import" } } } }))
      v, err = edits.apply(fs, n3.files, { seen = function(p)
        if p == root .. "/b.py" then helpers.write_file(p, "changed meanwhile\n") end
      end })
      assert.is_nil(v)
      assert.equal("LSP_EDIT_FAILED", err.code)
      assert.matches("b%.py could not be written %(.*%); nothing was changed", err.message)
      assert.equal("x = '🙂'; new = 1\nprint(new)\n", helpers.read_file(root .. "/a.py"))
      assert.equal("changed meanwhile\n", helpers.read_file(root .. "/b.py"))

      -- overlapping edits and file operations are refused
      v, err = edits.apply(fs, { { path = root .. "/a.py", edits = { { range = at(0, 0, 0, 5), newText = "" },
        { range = at(0, 2, 0, 3), newText = "" } } } }, {})
      assert.is_nil(v)
      assert.matches("overlap", err.message)
      v, err = edits.normalize("srv", { documentChanges = { { kind = "create", uri = "file:///x" } } })
      assert.is_nil(v)
      assert.equal('srv asked to create a file, which dsh does not do in an edit', err.message)
    end)
  end)
end)

describe("dsh.lsp watcher globs", function()
  it("match as LSP says", function()
    local function m(p, s) return glob.compile(p)(s) end
    assert.is_true(m("**/*.py", "a.py"))
    assert.is_true(m("**/*.py", "x/y/a.py"))
    assert.is_false(m("**/*.py", "a.pyc"))
    assert.is_true(m("**/*.{go,mod}", "sub/go.mod"))
    assert.is_false(m("*.py", "x/a.py"))
    assert.is_true(m("src/**/t?.[ch]", "src/a/b/t1.c"))
    assert.is_false(m("src/**/t?.[!ch]", "src/t1.c"))
    assert.is_true(m("**/pyrightconfig.json", "pyrightconfig.json"))
    assert.is_nil(glob.compile("{a,{b}}"))
    assert.is_nil(glob.compile(string.rep("a", 2000)))
  end)
end)
