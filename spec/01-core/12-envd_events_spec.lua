-- dsh.core.envd_events: the binding of the core's envd stream reader, fed with
-- envelopes made by dsh.core.envelope.
local base64 = require "dsh.core.base64"
local envelope = require "dsh.core.envelope"
local envd_events = require "dsh.core.envd_events"

local function data_event(stream, bytes, offset)
  local fields = { ('"%s":"%s"'):format(stream, base64.encode(bytes)) }
  if offset then fields[2] = ('"offset":%d'):format(offset) end
  return envelope.encode(0, '{"event":{"data":{' .. table.concat(fields, ",") .. "}}}")
end

local function pattern(n)
  local t = {}
  for i = 1, n do t[i] = string.char((i * 7) % 256) end
  return table.concat(t)
end

-- Every event the reader yields until it wants more input.
local function drain(r)
  local out = {}
  while true do
    local kind, a, b, c = r:next()
    if not kind then
      if a then out[#out + 1] = { "error", a } end
      return out
    end
    out[#out + 1] = { kind, a, b, c }
  end
end

describe("dsh.core.envd_events", function()
  it("yields data events as bytes, in pieces with their offsets, and other messages as JSON", function()
    local big = pattern(150000)
    local start = '{"event":{"start":{"pid":42}}}'
    local wire = envelope.encode(0, start) .. data_event("stdout", big, 1000) .. data_event("stderr", "oops")
      .. data_event("pty", "\27[1m") .. envelope.encode(2, "{}")
    local r = envd_events.reader(1024 * 1024)
    r:push(wire)
    local got = drain(r)
    assert.equal(7, #got)
    assert.same({ "message", start }, got[1])
    assert.same({ "data", "stdout", big:sub(1, 65536), 1000 }, got[2])
    assert.same({ "data", "stdout", big:sub(65537, 131072), 1000 + 65536 }, got[3])
    assert.same({ "data", "stdout", big:sub(131073), 1000 + 131072 }, got[4])
    assert.same({ "data", "stderr", "oops" }, got[5]) -- no offset in the event: none reported
    assert.same({ "data", "pty", "\27[1m" }, got[6])
    assert.same({ "end", "{}" }, got[7])
    assert.is_true(r:finish())
    r:close()
  end)

  it("takes its input in any split, also through the sink of lent bytes", function()
    local ffi = require "ffi"
    local wire = data_event("stdout", "hello, world", 5) .. envelope.encode(2, "{}")
    for cut = 1, #wire - 1 do
      local r = envd_events.reader(4096)
      local parts = { wire:sub(1, cut), wire:sub(cut + 1) }
      local got = {}
      for _, part in ipairs(parts) do
        local buf = ffi.new("uint8_t[?]", #part)
        ffi.copy(buf, part, #part)
        r.sink(buf, #part)
        for _, e in ipairs(drain(r)) do got[#got + 1] = e end
      end
      assert.same({ { "data", "stdout", "hello, world", 5 }, { "end", "{}" } }, got)
      r:close()
    end
  end)

  it("fails on a message over its limit, with the core's status", function()
    local r = envd_events.reader(16)
    r:push(envelope.encode(0, '{"event":{"keepalive":{}}}'))
    local kind, err = r:next()
    assert.is_nil(kind)
    assert.equal("ENVELOPE", err.code)
    assert.equal("ELIMIT", err.status)
    assert.equal("envelope of 26 bytes exceeds the 16-byte limit", err.message)
    kind, err = r:next() -- sticky
    assert.is_nil(kind)
    assert.equal("ELIMIT", err.status)
    r:close()
  end)

  it("fails at the end of a stream cut inside a message", function()
    local r = envd_events.reader(4096)
    r:push(envelope.encode(0, '{"a":1}'):sub(1, 8))
    assert.same({}, drain(r))
    local ok, err = r:finish()
    assert.is_nil(ok)
    assert.equal("ETRUNCATED", err.status)
    assert.equal("stream ended inside an envelope", err.message)
    r:close()
  end)

  it("raises on misuse", function()
    assert.has_error(function() envd_events.reader(-1) end,
      "dsh.core.envd_events: reader: max must be an integer in 0..4294967295, got -1")
    local r = envd_events.reader(10)
    assert.has_error(function() r:push(5) end, "dsh.core.envd_events: push: expected string, got number")
    r:close()
    r:close()
    assert.equal("dsh.core.envd_events.reader (closed)", tostring(r))
    assert.has_error(function() r:next() end, "dsh.core.envd_events: next: reader is closed")
    assert.has_error(function() r:push("x") end, "dsh.core.envd_events: push: reader is closed")
  end)
end)
