local sha256 = require "dsh.core.sha256"
local helpers = require "helpers"

describe("dsh.core.sha256", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("digests strings (NIST vectors), in one shot or incrementally", function()
    assert.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", sha256.hex("abc"))
    assert.equal("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", sha256.hex(""))
    local m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
    assert.equal("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1", sha256.hex(m))
    local h = sha256.new()
    for i = 1, #m, 5 do h:update(m:sub(i, i + 4)) end
    assert.equal(sha256.digest(m), h:digest())
    assert.equal(32, #sha256.digest("\0\1\2"))
    assert.equal(sha256.hex("a\0b"), sha256.new():update("a\0"):update("b"):hex())
  end)

  it("raises on misuse", function()
    assert.has_error(function() sha256.hex(nil) end, "dsh.core.sha256: hex: expected string, got nil")
    local h = sha256.new()
    h:hex()
    assert.matches("finished", tostring(h))
    assert.has_error(function() h:update("x") end, "dsh.core.sha256: update: hasher already finished")
  end)
end)
