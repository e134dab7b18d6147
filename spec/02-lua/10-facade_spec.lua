-- The façade (require "dsh"): every public module on first use, the same
-- table require gives, and nil for anything else.
describe("require \"dsh\"", function()
  local dsh = require "dsh"

  it("loads each public module on first use", function()
    for _, name in ipairs { "async", "errors", "json", "sandbox", "context", "fs", "subprocess", "bash", "pty",
      "lsp", "code_runtime", "tools", "signals", "schema", "http", "sha256" } do
      assert.equal(require("dsh." .. name), dsh[name], name)
    end
    assert.is_string(dsh.version)
    assert.is_nil(dsh.no_such_module)
    assert.is_nil(dsh._ffi)
  end)
end)
