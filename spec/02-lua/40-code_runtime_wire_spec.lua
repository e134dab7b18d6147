-- Lossless JSON across the Code Mode boundary (reference §3.3, §6.8.9–10):
-- how Lua values map, what cannot cross (a typed error naming where), the
-- wire's decoding rules, depth, JSON text, and byte costs equal to
-- JSON.stringify's (checked against Node when it is installed).
local helpers = require "helpers"
local wire = require "dsh.code_runtime._wire"
local json = require "dsh.code_runtime._json"
local ledger = require "dsh.core.ledger"

local function roundtrip(v)
  local text = assert(wire.encode(v))
  local back, err = wire.decode(text)
  assert(back ~= nil, err)
  return back, text
end

describe("code runtime wire", function()
  it("round-trips every root and keeps arrays, objects and empty tables apart", function()
    for _, v in ipairs { wire.null, true, false, 0, 1, -1.5, 2 ^ 53, 1e-7, 1e21, "", "é😀", "__proto__" } do
      assert.equal(v, (roundtrip(v)))
    end
    local back = roundtrip { a = { 1, 2, { b = "x" } }, c = wire.null, d = wire.array(), e = {}, __proto__ = 1 }
    assert.same({ a = { 1, 2, { b = "x" } }, c = wire.null, d = {}, e = {}, __proto__ = 1 }, back)
    assert.equal(wire.array_mt, getmetatable(back.d)) -- [] stays [] ...
    assert.is_nil(getmetatable(back.e))                -- ... and {} stays {}
    local _, text = roundtrip(back)
    assert.equal('[{"kind":"object","keys":["__proto__","a","c","d","e"]},1,{"kind":"array","length":3},1,2,'
      .. '{"kind":"object","keys":["b"]},"x",null,{"kind":"array","length":0},{"kind":"object","keys":[]}]', text)
  end)

  it("encodes {a={1}} as the reference's flat token list", function()
    assert.equal('[{"kind":"object","keys":["a"]},{"kind":"array","length":1},1]', wire.encode { a = { 1 } })
  end)

  it("copies shared references and rejects cycles", function()
    local shared = { 1 }
    assert.same({ { 1 }, { 1 } }, (roundtrip { shared, shared }))
    local t = {}
    t.self = t
    assert.same({ nil, "a cycle at $.self" }, { wire.encode(t) })
  end)

  it("refuses, naming where, what cannot cross", function()
    local cases = {
      { { x = 0 / 0 }, "NaN at $.x" },
      { { 1, math.huge }, "an infinite number at $[1]" },
      { -0.0, "-0 at $" },
      { { s = "\255" }, "a string that is not valid UTF-8 at $.s" },
      { { 1, nil, 3 }, "an array with holes at $" },
      { { [1] = 1, x = 2 }, "a table mixing array and object keys at $" },
      { { [true] = 1 }, "a table with a boolean key at $" },
      { { [1.5] = 1 }, "a table with a number key at $" },
      { setmetatable({}, {}), "a table with a metatable at $" },
      { { f = print }, "a function value at $.f" },
      { wire.array { x = 1 }, "an array-marked table with string keys at $" },
      { wire.object { 1 }, "an object-marked table with integer keys at $" },
    }
    for _, c in ipairs(cases) do
      assert.same({ nil, c[2] }, { wire.encode(c[1]) })
    end
    assert.same({ nil, "a nil value at $" }, { wire.encode(nil) })
  end)

  it("is iterative: 5,000 levels round-trip as 5,001 tokens", function()
    local deep = {}
    local cur = deep
    for _ = 1, 5000 do
      cur[1] = {}
      cur = cur[1]
    end
    local back, text = roundtrip(deep)
    local tokens = json.decode_json(text)
    assert.equal(5001, #tokens)
    local depth = 0
    cur = back
    while cur[1] do
      depth = depth + 1
      cur = cur[1]
    end
    assert.equal(5000, depth)
  end)

  it("decodes only well-formed wires", function()
    for _, bad in ipairs {
      "[]", "{}", "1", "[1,2]", '[{"kind":"array","length":2},1]', '[{"kind":"array","length":-1}]',
      '[{"kind":"array","length":1.5},1]', '[{"kind":"array","length":1,"x":1},1]',
      '[{"kind":"object","keys":["a","a"]},1,2]', '[{"kind":"object","keys":[1]},1]', '[{"kind":"set"}]',
      '[[1]]', '["\\ud800"]', "[-0]", "[1e999]", "[1,",
    } do
      assert.is_nil(wire.decode(bad), bad)
    end
  end)

  it("reads and writes JSON text exactly (strings, escapes, numbers as JSON.stringify writes them)", function()
    assert.equal('"a\\"\\\\\\n\\u0001é"', json.quote('a"\\\n\1é'))
    assert.equal('"\\ud800"', json.quote(json.decode_json('"\\ud800"'))) -- a lone surrogate survives as itself
    assert.equal("😀", json.decode_json('"\\ud83d\\ude00"'))
    for _, c in ipairs { { 1e21, "1e+21" }, { 1e20, "100000000000000000000" }, { 0.1, "0.1" }, { 1e-7, "1e-7" },
      { 1.5e-6, "0.0000015" }, { -2.5e300, "-2.5e+300" }, { 5e-324, "5e-324" }, { 1 / 3, "0.3333333333333333" } } do
      assert.equal(c[2], json.number(c[1]))
    end
    for _, bad in ipairs { "[01]", "[1,]", '{"a":1,}', "[1] x", "[.5]", "[1.]", '["\1"]', "[tru]", "" } do
      assert.is_nil(json.decode_json(bad), bad)
    end
  end)

  it("counts a value's JSON bytes as JSON.stringify does", function()
    local v = { a = { 1, 2.5, "é\n😀\"", wire.null, true }, ["k\1"] = { x = false }, e = wire.array() }
    local cost = wire.json_cost(v, ledger.string_cost)
    local node = io.popen("command -v node 2>/dev/null"):read("*l")
    if node then
      local js = "process.stdout.write(String(Buffer.byteLength(JSON.stringify("
        .. '{"a":[1,2.5,"é\\n😀\\"",null,true],"k\\u0001":{"x":false},"e":[]}' .. "))))"
      local p = io.popen(node .. " -e '" .. js .. "'")
      assert.equal(tonumber(p:read("*a")), cost)
      p:close()
    end
    assert.equal(65, cost)
  end)

  it("the runner's byte loops (remote/code_runtime/fast.lua) agree with the wire's, on every kind of byte", function()
    local fast = dofile(helpers.root .. "/remote/code_runtime/fast.lua")
    math.randomseed(7)
    local pieces = { "a", "é", "你", "😀", '"', "\\", "\n", "\t", "\1", "\31", "\127", "\237\160\128", "\237\191\191",
      "\255", "\192\128", "\237\159\191", "\244\143\191\191", "\244\144\128\128", "\240\144\128\128", "\224\160\128",
      "\224\159\191", "\0", "x y" }
    for _ = 1, 20000 do
      local t = {}
      for i = 1, math.random(0, 12) do t[i] = pieces[math.random(#pieces)] end
      local s = table.concat(t)
      if math.random() < 0.2 then s = s:sub(1, math.random(0, #s)) end
      assert.equal(json.valid_utf8(s), fast.valid_utf8(s), ("%q"):format(s))
      assert.equal(json.quote(s), fast.quote(s), ("%q"):format(s))
      assert.equal(json.has_control(s), fast.has_control(s), ("%q"):format(s))
    end
  end)

  it("never raises on hostile text (fuzz)", function()
    math.randomseed(42)
    local alphabet = { "[", "]", "{", "}", ",", ":", '"', "\\", "u", "d", "8", "0", "1", "-", "e", ".", " ",
      "null", "true", '"kind"', '"array"', '"object"', '"length"', '"keys"', "\255", "é" }
    for _ = 1, 20000 do
      local parts = {}
      for i = 1, math.random(1, 30) do parts[i] = alphabet[math.random(#alphabet)] end
      local s = table.concat(parts)
      local ok, v, err = pcall(wire.decode, s)
      assert.is_true(ok, s)
      assert.is_true(v ~= nil or type(err) == "string", s)
    end
  end)
end)
