-- The pure codecs of the C core through their Lua wrappers: base64, frames,
-- envelopes, LSP framing, UTF-8 and the output ledger.
local base64 = require "dsh.core.base64"
local frame = require "dsh.core.frame"
local envelope = require "dsh.core.envelope"
local lspframe = require "dsh.core.lspframe"
local utf8 = require "dsh.core.utf8"
local ledger = require "dsh.core.ledger"
local errors = require "dsh.errors"
local helpers = require "helpers"

local E_ASCII = "E2B frame stream contained non-ASCII data"
local E_B64 = "E2B frame contained invalid base64 or exceeded its byte limit"
local E_LIMIT = "E2B frame exceeded its byte limit"
local E_UTF8 = "E2B frame contained invalid UTF-8"
local E_JSON = "E2B frame contained invalid JSON"
local E_MID = "E2B frame stream ended mid-frame"
local E_MAX = "E2B frame maxFrameBytes must be a positive safe integer"

--- Feeds s to a fresh decoder in chunks of k bytes (whole if k is nil), then
--- finishes. Returns the JSON texts and the first error (or nil).
local function run_frames(max, s, k)
  local d = assert(frame.decoder(max))
  local got = {}
  k = k or math.max(#s, 1)
  for i = 1, #s, k do
    local texts, err, before = d:push(s:sub(i, i + k - 1))
    for _, t in ipairs(texts or before) do got[#got + 1] = t end
    if not texts then return got, err end
  end
  local ok, err = d:finish()
  if not ok then return got, err end
  return got, nil
end

--- Same result for whole, one-byte, 2-, 3- and 5-byte chunks.
local function expect_frames(max, s, message, values)
  for _, k in ipairs { false, 1, 2, 3, 5 } do
    local got, err = run_frames(max, s, k or nil)
    assert.same(values or {}, got)
    if message then
      assert.is_table(err)
      assert.equal("FRAME", err.code)
      assert.equal(message, err.message)
      assert.is_true(errors.is(err))
    else
      assert.is_nil(err)
    end
  end
end

describe("dsh.core.base64", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("encodes and decodes the RFC 4648 vectors", function()
    local v = { [""] = "", f = "Zg==", fo = "Zm8=", foo = "Zm9v", foob = "Zm9vYg==",
      fooba = "Zm9vYmE=", foobar = "Zm9vYmFy" }
    for plain, enc in pairs(v) do
      assert.equal(enc, base64.encode(plain))
      assert.equal(plain, base64.decode(enc))
      assert.equal(plain, base64.decode_loose(enc))
    end
  end)

  it("round-trips all byte values and long inputs", function()
    local t = {}
    for i = 0, 255 do t[#t + 1] = string.char(i) end
    local s = table.concat(t):rep(1000)
    assert.equal(s, base64.decode(base64.encode(s)))
  end)

  it("decodes strictly", function()
    assert.equal("a", base64.decode("YQ=="))
    for _, bad in ipairs { "YR==", "Zg=", "Zg", "Zm9v\n", "Zm 9v", "-_==", "Zg==Zg==", "====" } do
      local v, err = base64.decode(bad)
      assert.is_nil(v)
      assert.equal("BASE64", err.code)
      assert.equal("EBASE64", err.status)
    end
  end)

  it("decodes protobuf bytes loosely", function()
    assert.equal("f", base64.decode_loose("Zg"))
    assert.equal("\251\255", base64.decode_loose("-_8"))
    assert.equal("\251\255", base64.decode_loose("+/8="))
    assert.is_nil(base64.decode_loose("Z"))
    assert.is_nil(base64.decode_loose("Zm9v\n"))
  end)

  it("raises on misuse", function()
    assert.has_error(function() base64.encode(nil) end, "dsh.core.base64: encode: expected string, got nil")
    assert.has_error(function() base64.decode(1) end, "dsh.core.base64: decode: expected string, got number")
  end)
end)

describe("dsh.core.frame", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("decodes two adjacent frames split at 5 characters: nothing, then both", function()
    local s = assert(frame.encode('{"a":1}', 1024)) .. assert(frame.encode("[2]", 1024))
    local d = assert(frame.decoder(1024))
    assert.same({}, d:push(s:sub(1, 5)))
    assert.same({ '{"a":1}', "[2]" }, d:push(s:sub(6)))
    assert.is_true(d:finish())
    expect_frames(1024, s, nil, { '{"a":1}', "[2]" })
  end)

  it("bounds decoded bytes: {\"text\":\"你\"} is 14 bytes", function()
    local json = '{"text":"你"}'
    assert.equal(14, #json)
    local f = assert(frame.encode(json, 14))
    expect_frames(14, f, nil, { json })
    expect_frames(13, f, E_LIMIT)
    local none, err = frame.encode(json, 13)
    assert.is_nil(none)
    assert.equal(E_LIMIT, err.message)
    assert.equal("ELIMIT", err.status)
  end)

  it("rejects a bad maxFrameBytes", function()
    for _, max in ipairs { 0, -1, 1.5, 2 ^ 53 } do
      local d, err = frame.decoder(max)
      assert.is_nil(d)
      assert.equal("FRAME", err.code)
      assert.equal(E_MAX, err.message)
      local f, err2 = frame.encode("1", max)
      assert.is_nil(f)
      assert.equal(E_MAX, err2.message)
    end
    assert.is_table(frame.decoder(2 ^ 53 - 1))
    assert.has_error(function() frame.decoder("1") end, "dsh.core.frame: decoder: expected number, got string")
  end)

  it("pins the reference's failures, at any chunking", function()
    expect_frames(1024, "é", E_ASCII)
    expect_frames(1024, "YQ==\r\n", E_ASCII)
    expect_frames(3, "AAAAA", E_LIMIT)
    expect_frames(1024, "\n", E_B64)
    expect_frames(1024, "abc!\n", E_B64)
    expect_frames(2, "YWJj\n", E_LIMIT)
    expect_frames(1024, "/w==\n", E_UTF8)
    expect_frames(1024, base64.encode("not-json") .. "\n", E_JSON)
    expect_frames(1024, "YQ==", E_MID)
    expect_frames(1024, "MQ==\nYQ==\n", E_JSON, { "1" })
  end)

  it("checks the whole chunk for non-ASCII before returning any frame", function()
    local d = assert(frame.decoder(1024))
    local texts, err, before = d:push("MQ==\n\0")
    assert.is_nil(texts)
    assert.equal(E_ASCII, err.message)
    assert.equal("ENONASCII", err.status)
    assert.same({}, before)
    -- errors are sticky
    local _, again = d:push("MQ==\n")
    assert.equal(E_ASCII, again.message)
    assert.equal(E_ASCII, select(2, d:finish()).message)
    assert.matches("failed", tostring(d))
  end)

  it("decodes many big frames in one chunk and byte by byte alike", function()
    local frames, want = {}, {}
    for i = 1, 20 do
      local json = ('{"type":"stdout","data":"%s"}'):format(base64.encode(("x"):rep(i * 300)))
      want[i] = json
      frames[i] = assert(frame.encode(json, 1e6))
    end
    local s = table.concat(frames)
    local got, err = run_frames(1e6, s)
    assert.is_nil(err)
    assert.same(want, got)
    got, err = run_frames(1e6, s, 1)
    assert.is_nil(err)
    assert.same(want, got)
    got, err = run_frames(1e6, s, 4093)
    assert.is_nil(err)
    assert.same(want, got)
  end)

  it("decodes values with push_values and encodes them with encode_value", function()
    local f = assert(frame.encode_value({ type = "log", text = "hé" }, 1024))
    local d = assert(frame.decoder(1024))
    local values = assert(d:push_values(f .. frame.encode("[1,null]", 1024)))
    assert.same({ type = "log", text = "hé" }, values[1])
    assert.equal(1, values[2][1])
    local _, err = frame.encode_value(function() end, 1024)
    assert.equal("E2B frame value is not JSON-serializable", err.message)
  end)

  it("closes idempotently and refuses use after close", function()
    local d = assert(frame.decoder(10))
    d:close()
    d:close()
    assert.equal("dsh.core.frame.decoder (closed)", tostring(d))
    assert.has_error(function() d:push("") end, "dsh.core.frame: push: decoder is closed")
    assert.has_error(function() assert(frame.decoder(10)):push(nil) end,
      "dsh.core.frame: push: expected string, got nil")
  end)
end)

describe("dsh.core.envelope", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  local stream = envelope.encode(0, '{"event":{"start":{"pid":1234}}}')
    .. envelope.encode(0, '{"event":{"data":{"stdout":"aGkK"}}}')
    .. envelope.encode(2, "{}")

  it("encodes the reference bytes", function()
    assert.equal("\0\0\0\0\32", stream:sub(1, 5))
    assert.equal("\2\0\0\0\2{}", envelope.encode(envelope.END_STREAM, "{}"))
  end)

  it("decodes envelopes dribbled 3 bytes at a time", function()
    local d = envelope.decoder(1024)
    local got = {}
    for i = 1, #stream, 3 do
      for _, e in ipairs(assert(d:push(stream:sub(i, i + 2)))) do got[#got + 1] = e end
    end
    assert.is_true(d:finish())
    assert.equal(3, #got)
    assert.same({ flags = 0, payload = '{"event":{"start":{"pid":1234}}}', end_stream = false }, got[1])
    assert.same({ flags = 2, payload = "{}", end_stream = true }, got[3])
  end)

  it("rejects compression, oversize, unknown flags and truncation", function()
    local function first_error(max, s)
      local d = envelope.decoder(max)
      local ok, err = d:push(s)
      if ok then
        local _
        _, err = d:finish()
      end
      return err
    end
    local err = first_error(1024, envelope.encode(1, "{}"))
    assert.equal("ENVELOPE", err.code)
    assert.equal("ECOMPRESSED", err.status)
    assert.equal("compressed envelope not supported", err.message)
    err = first_error(31, stream)
    assert.equal("envelope of 32 bytes exceeds the 31-byte limit", err.message)
    assert.equal("ELIMIT", err.status)
    assert.equal("EFRAME", first_error(1024, envelope.encode(0x10, "")).status)
    err = first_error(1024, stream:sub(1, 10))
    assert.equal("stream ended inside an envelope", err.message)
    assert.equal("ETRUNCATED", err.status)
  end)

  it("raises on misuse", function()
    assert.has_error(function() envelope.decoder(-1) end)
    assert.has_error(function() envelope.encode(256, "") end)
    assert.has_error(function() envelope.decoder(10):push(false) end,
      "dsh.core.envelope: push: expected string, got boolean")
  end)
end)

describe("dsh.core.lspframe", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("round-trips messages at any chunking", function()
    local s = lspframe.encode('{"jsonrpc":"2.0","id":1}') .. lspframe.encode("{}")
    assert.equal('Content-Length: 24\r\n\r\n{"jsonrpc":"2.0","id":1}', s:sub(1, 46))
    for k = 1, #s do
      local d = lspframe.decoder(100)
      local got = {}
      for i = 1, #s, k do
        for _, b in ipairs(assert(d:push(s:sub(i, i + k - 1)))) do got[#got + 1] = b end
      end
      assert.is_true(d:finish())
      assert.same({ '{"jsonrpc":"2.0","id":1}', "{}" }, got)
    end
  end)

  it("accepts any header case and ignores other headers", function()
    local d = lspframe.decoder(100)
    assert.same({ "[]" }, d:push("Content-Type: x\r\ncontent-LENGTH:  2 \r\n\r\n[]"))
  end)

  it("rejects bad lengths, oversize bodies and headers, and truncation", function()
    local function err_of(max, s)
      local d = lspframe.decoder(max)
      local ok, err = d:push(s)
      if ok then
        local _
        _, err = d:finish()
      end
      return err
    end
    local bad = "LSP message has a missing or invalid Content-Length"
    assert.equal(bad, err_of(100, "Content-Type: x\r\n\r\n{}").message)
    assert.equal(bad, err_of(100, "Content-Length: -1\r\n\r\n").message)
    assert.equal(bad, err_of(100, "Content-Length: 1\r\nContent-Length: 2\r\n\r\n{}").message)
    assert.equal("LSP_FRAME", err_of(100, "Content-Length: x\r\n\r\n").code)
    assert.equal("LSP message of 101 bytes exceeds the 100-byte limit",
      err_of(100, "Content-Length: 101\r\n\r\n").message)
    assert.equal("LSP header block exceeds 65536 bytes", err_of(100, ("x"):rep(70000)).message)
    assert.equal("LSP stream ended mid-message", err_of(100, "Content-Length: 2\r\n\r\n{").message)
  end)
end)

describe("dsh.core.utf8", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("validates strictly", function()
    assert.is_true(utf8.validate("héllo € 😀"))
    for s, pos in pairs { ["ab\192\128"] = 3, ["\237\160\128"] = 1, ["x\244\144\128\128"] = 2,
      ["abc\226\130"] = 4 } do
      local ok, err = utf8.validate(s)
      assert.is_nil(ok)
      assert.equal("UTF8", err.code)
      assert.equal(pos, err.position)
    end
  end)

  it("streams whole code points at any split", function()
    local text = "a€b😀c你"
    for k = 1, 4 do
      local st, out = utf8.stream(), {}
      for i = 1, #text, k do
        local piece = assert(st:feed(text:sub(i, i + k - 1)))
        assert.is_true(utf8.validate(piece))
        out[#out + 1] = piece
      end
      assert.equal("", st:finish())
      assert.equal(text, table.concat(out))
    end
    local st = utf8.stream()
    assert.equal("a", st:feed("a\226\130"))
    assert.equal(2, st:pending())
    local none, err = st:feed("A")
    assert.is_nil(none)
    assert.equal("UTF8", err.code)
    assert.equal(2, st:pending())
    assert.equal("€", st:feed("\172"))
    st:feed("\240")
    assert.is_nil((st:finish()))
  end)

  it("replaces invalid input in lossy streams", function()
    local st = utf8.stream { lossy = true }
    assert.equal("a\239\191\189b", st:feed("a\255b"))
    assert.equal("", st:feed("\240\159"))
    assert.equal("\239\191\189", st:finish())
  end)

  it("cuts on code-point boundaries", function()
    local s = "a€b😀"
    assert.equal("a", utf8.prefix(s, 3))
    assert.equal("a€", utf8.prefix(s, 4))
    assert.equal(s, utf8.prefix(s, 100))
    assert.equal("", utf8.prefix(s, 0))
    assert.equal("😀", utf8.tail(s, 4))
    assert.equal("", utf8.tail(s, 3))
    assert.equal("", utf8.tail(s, 2))
    assert.equal("b😀", utf8.tail(s, 6))
    assert.equal(s, utf8.tail(s, 100))
  end)
end)

describe("dsh.core.ledger", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("costs strings as JSON.stringify does", function()
    assert.equal(2, ledger.string_cost(""))
    assert.equal(6, ledger.string_cost('"\\'))
    assert.equal(12, ledger.string_cost("\b\t\n\f\r"))
    assert.equal(8, ledger.string_cost("\1"))
    assert.equal(5, ledger.string_cost("你"))
    assert.equal(6, ledger.string_cost("😀"))
    assert.equal(8, ledger.string_cost("\237\160\128"))
    assert.equal(5, ledger.string_cost("\255"))
    assert.equal("ab", ledger.string_prefix("ab你", 6))
    assert.equal("ab你", ledger.string_prefix("ab你", 7))
  end)

  it("keeps a 60-byte prefix of a 4 KiB log under a 64-byte cap", function()
    local l = ledger.new(64)
    assert.equal(2, l:used())
    local fits, prefix = l:add_log(("x"):rep(4096))
    assert.is_false(fits)
    assert.equal(("x"):rep(60), prefix)
    assert.equal(64, l:used())
    assert.is_true(l:limited())
    assert.equal("", l:limit_message())
    fits, prefix = l:add_log("more")
    assert.is_false(fits)
    assert.equal("", prefix)
  end)

  it("limits a 1000-byte log under a 128-byte cap and keeps earlier logs whole", function()
    local l = ledger.new(128)
    assert.is_true(l:add_log("hello"))
    local fits, prefix = l:add_log(("y"):rep(1000))
    assert.is_false(fits)
    assert.equal(128 - 9 - 1 - 2, #prefix)
    assert.equal(2, l:nlogs())
    assert.matches("limited", tostring(l))
  end)

  it("counts values and cuts the limit message", function()
    local l = ledger.new(64)
    assert.is_false(l:add_value(63))
    assert.equal(2, l:used())
    assert.equal("outer output exceeded 64 bytes", l:limit_message())
    l = ledger.new(20)
    assert.is_true(l:add_value(6))
    assert.equal("outer outp", l:limit_message())
    assert.has_error(function() ledger.new(3) end, "dsh.core.ledger: new: max must be an integer >= 4, got 3")
  end)
end)
