-- The façade (require "dsh"): every public module on first use, the same
-- table require gives, and nil for anything else.
describe("require \"dsh\"", function()
  local dsh = require "dsh"

  it("loads each public module on first use", function()
    for _, name in ipairs { "async", "errors", "json", "sandbox", "context", "fs", "subprocess", "bash", "pty",
      "lsp", "code_runtime", "tools", "signals", "schema" } do
      assert.equal(require("dsh." .. name), dsh[name], name)
    end
    -- the bindings keep their short names; they live in lua/dsh/core/
    for _, name in ipairs { "loop", "proc", "http", "sha256", "base64", "frame" } do
      assert.equal(require("dsh.core." .. name), dsh[name], name)
    end
    assert.is_string(dsh.version)
    assert.is_nil(dsh.no_such_module)
    assert.is_nil(dsh._ffi)
    assert.is_nil(dsh.core) -- the folder is no module
  end)
end)
