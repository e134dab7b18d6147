local text = require "dsh.fs._text"
local helpers = require "helpers"

describe("dsh.fs._text", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("finds binary and invalid UTF-8 content", function()
    assert.is_nil(text.problem("plain \xc3\xa9"))
    assert.same({ kind = "binary", offset = 2 }, text.problem("ab\0"))
    assert.is_nil(text.problem(("a"):rep(8192) .. "\0"))
    assert.same({ kind = "binary", offset = 8192 }, text.problem(("a"):rep(8192) .. "\0", true))
    assert.same({ kind = "utf8", position = 2 }, text.problem("a\xff"))
    assert.same({ kind = "utf8", position = 1 }, text.problem("\xed\xa0\x80")) -- a surrogate
  end)

  it("chooses CRLF only when it outnumbers lone LF in the first 4096 characters", function()
    assert.is_true(text.prefers_crlf("a\r\nb\r\nc\n"))
    assert.is_false(text.prefers_crlf("a\r\nb\nc\n"))
    assert.is_false(text.prefers_crlf("no newline"))
    -- 4095 two-byte characters, then a lone LF (character 4096), then CRLFs beyond the window
    local head = ("\xc3\xa9"):rep(4095) .. "\n"
    assert.is_false(text.prefers_crlf(head .. ("x\r\n"):rep(10)))
    assert.is_true(text.prefers_crlf("\r\n" .. ("\xc3\xa9"):rep(4094) .. ("\n"):rep(20)))
  end)

  it("counts and replaces plain, non-overlapping matches", function()
    assert.equal(2, text.count("a.a.a", "a."))
    assert.equal(1, text.count("aaa", "aa"))
    assert.equal("Xa.a", text.replace("a.a.a", "a.", "X", false))
    assert.equal("XXa", text.replace("a.a.a", "a.", "X", true))
    assert.equal("%1 b", text.replace("a b", "a", "%1", false))
    assert.equal("a\r\nb\r\n", text.crlf(text.lf("a\r\nb\n")))
    assert.equal("\r\r\n", text.crlf(text.lf("\r\r\n")))
  end)
end)
