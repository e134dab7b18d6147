-- Seeded, randomized hostile input for the JSON-RPC engine (dsh.lsp._rpc).
-- The framing below it is C and has a libFuzzer target (core/fuzz/fuzz_lspframe.c);
-- the message handling above it is Lua, which libFuzzer cannot drive, so this
-- spec does the same job here: thousands of generated streams (random bytes,
-- mutated and re-split valid frames, well-framed but hostile JSON), fed
-- through an in-memory byte transport. Properties: nothing raises or is
-- reported unhandled; every pending request settles; a stream either stays
-- usable or fails with an LSP_SERVER_FAILED error that names the server;
-- valid messages are delivered the same however the bytes are split; every
-- server request is answered with a well-formed response.
local async = require "dsh.async"
local helpers = require "helpers"
local json = require "dsh.json"
local lspframe = require "dsh.core.lspframe"
local rpc = require "dsh.lsp._rpc"

local SEED = tonumber(os.getenv("DSH_FUZZ_SEED") or "") or 20240611
local ROUNDS = tonumber(os.getenv("DSH_FUZZ_ROUNDS") or "") or 1500

-- xorshift32: the same sequence for the same seed on every machine
local function rng(seed)
  local bit = require "bit"
  local x = bit.tobit(seed)
  if x == 0 then x = 1 end
  return function(n)
    x = bit.bxor(x, bit.lshift(x, 13))
    x = bit.bxor(x, bit.rshift(x, 17))
    x = bit.bxor(x, bit.lshift(x, 5))
    local u = x % 4294967296
    return n and (u % n) + 1 or u
  end
end

local function frame(body)
  return lspframe.encode(body)
end

-- A connection over an in-memory stream that starts flowing when go is
-- resolved; returns conn, outbox, notes, go.
local function connect(chunks, max)
  local i, out, notes = 0, {}, {}
  local go = async.future()
  local conn = rpc.new {
    name = 'language server "fuzz"', maxMessageBytes = max or 4096, cancelGraceMs = 10,
    read = function()
      i = i + 1
      if i == 1 then go:await() end
      if i % 7 == 0 then async.yield() end -- interleave with the tasks that answer
      return chunks[i]
    end,
    write = function(s)
      out[#out + 1] = s
      return true
    end,
    on_request = function(method)
      if method == "workspace/configuration" then return rpc.array() end
      return nil, { code = rpc.METHOD_NOT_FOUND, message = "method not found: " .. method }
    end,
    on_notification = function(method, params) notes[#notes + 1] = { method, params } end,
  }
  return conn, out, notes, go
end

local function split(gen, s)
  local chunks, i = {}, 1
  while i <= #s do
    local n = gen(math.min(64, #s - i + 1))
    chunks[#chunks + 1] = s:sub(i, i + n - 1)
    i = i + n
  end
  return chunks
end

local function random_bytes(gen, n)
  local t = {}
  for k = 1, n do t[k] = string.char(gen(256) - 1) end
  return table.concat(t)
end

-- JSON texts a hostile server might send, valid JSON or nearly.
local function hostile_json(gen)
  local atoms = { "null", "true", "0", "-1", "1.5", "1e400", "-0", '"x"', '"\\ud800"', '"\\u0000"', "[]", "{}",
    '"é"', "12345678901234567890", '"\\uD83D\\uDE42"' }
  local function value(depth)
    local k = gen(depth > 3 and 1 or 3)
    if k == 1 then return atoms[gen(#atoms)] end
    if k == 2 then
      local parts = {}
      for j = 1, gen(4) - 1 do parts[j] = value(depth + 1) end
      return "[" .. table.concat(parts, ",") .. "]"
    end
    local keys = { "jsonrpc", "id", "method", "params", "result", "error", "code", "message", "uri", "" }
    local parts = {}
    for j = 1, gen(5) - 1 do parts[j] = '"' .. keys[gen(#keys)] .. '":' .. value(depth + 1) end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  local shapes = {
    function() return value(0) end,
    function() return '{"jsonrpc":"2.0","id":' .. atoms[gen(#atoms)] .. ',"result":' .. value(1) .. "}" end,
    function() return '{"jsonrpc":"2.0","id":1,"error":' .. value(1) .. "}" end,
    function() return '{"jsonrpc":"2.0","method":' .. atoms[gen(#atoms)] .. ',"params":' .. value(1) .. "}" end,
    function() return '{"jsonrpc":"2.0","id":' .. atoms[gen(#atoms)] .. ',"method":"workspace/configuration"}' end,
    function() return '{"jsonrpc":"2.0","id":"s' .. gen(99) .. '","method":"x/' .. gen(9) .. '"}' end,
    function() return string.rep("[", gen(1200)) end,
    function() return '{"jsonrpc":"2.0","method":"n","params":"' .. random_bytes(gen, gen(8)) .. '"}' end,
  }
  return shapes[gen(#shapes)]()
end

local function valid_stream(gen)
  local msgs, bodies = {}, {}
  for k = 1, gen(6) do
    local m = { jsonrpc = "2.0", method = "note/" .. k, params = { n = k, s = ("你🙂"):rep(gen(3)) } }
    msgs[k] = m
    bodies[k] = frame(json.encode(m))
  end
  return table.concat(bodies), msgs
end

local function mutate(gen, s)
  local b = { s:byte(1, -1) }
  for _ = 1, gen(4) do
    local op = gen(4)
    local at = gen(#b + 1)
    if op == 1 and #b > 0 then b[math.min(at, #b)] = gen(256) - 1
    elseif op == 2 and #b > 0 then table.remove(b, math.min(at, #b))
    elseif op == 3 then table.insert(b, at, gen(256) - 1)
    else for _ = 1, gen(#b + 1) - 1 do table.remove(b) end end
  end
  local t = {}
  for k = 1, #b do t[k] = string.char(b[k]) end
  return table.concat(t)
end

describe("dsh.lsp._rpc under hostile input", function()
  local unhandled, old
  before_each(function()
    helpers.snapshot()
    unhandled = {}
    old = async.on_unhandled(function(err) unhandled[#unhandled + 1] = tostring(err) end)
  end)
  after_each(function()
    async.on_unhandled(old)
    helpers.assert_clean()
  end)

  -- Drive one stream with a request in flight; check the invariants.
  local function drive(chunks, max)
    local conn, out, _, go = connect(chunks, max)
    local pending = async.run(function() return conn:request("textDocument/hover", { n = 1 }) end)
    go:resolve()
    for _ = 1, 10000 do
      if conn.failed and pending:done() then break end
      async.step(0)
    end
    assert.is_true(pending:done(), "a pending request never settled")
    local ok, v, err = pending:result()
    assert.is_true(ok, "the request raised: " .. tostring(v))
    if conn.failed then
      assert.equal("LSP_SERVER_FAILED", conn.failed.code)
      assert.matches('^language server "fuzz" ', conn.failed.message)
    end
    -- every answer we wrote is a well-formed frame holding a JSON-RPC response
    local dec = lspframe.decoder(1e6)
    for _, s in ipairs(out) do
      for _, body in ipairs(assert(dec:push(s))) do
        local m = assert(json.decode(body))
        assert.equal("2.0", m.jsonrpc)
        assert.is_true(m.method ~= nil or m.result ~= nil or m.error ~= nil)
      end
    end
    dec:close()
    conn:close()
    local answered = ok and (v ~= nil or (err ~= nil and err.code ~= "LSP_SERVER_FAILED"))
    return conn, answered
  end

  it("survives random bytes and mutated frames (seed " .. SEED .. ")", function()
    local gen = rng(SEED)
    for _ = 1, ROUNDS do
      local kind = gen(3)
      local s
      if kind == 1 then
        s = random_bytes(gen, gen(300))
      elseif kind == 2 then
        s = mutate(gen, (valid_stream(gen)))
      else
        s = "Content-Length: " .. gen(9000) .. "\r\n" .. (gen(2) == 1 and "\r\n" or "X: y\r\n\r\n")
          .. random_bytes(gen, gen(200))
      end
      drive(split(gen, s))
    end
    assert.same({}, unhandled)
  end)

  it("survives well-framed hostile JSON (seed " .. SEED .. ")", function()
    local gen = rng(SEED + 1)
    local failed, lived, answered = 0, 0, 0
    for _ = 1, ROUNDS do
      local bodies = {}
      for k = 1, gen(4) do bodies[k] = frame(hostile_json(gen)) end
      local conn, got = drive(split(gen, table.concat(bodies)))
      if got then answered = answered + 1 end
      if conn.failed and not conn.failed.message:match("closed its output$") then
        failed = failed + 1
      else
        lived = lived + 1
      end
    end
    -- both outcomes happen: the generator is not trivially rejected or accepted
    assert.is_true(failed > ROUNDS / 20, "failed " .. failed)
    assert.is_true(lived > ROUNDS / 20, "lived " .. lived)
    assert.is_true(answered > ROUNDS / 50, "answered " .. answered) -- responses reached the request
    assert.same({}, unhandled)
  end)

  it("delivers valid messages identically however the bytes are split", function()
    local gen = rng(SEED + 2)
    for _ = 1, 300 do
      local s, msgs = valid_stream(gen)
      local conn, _, notes, go = connect(split(gen, s))
      go:resolve()
      for _ = 1, 10000 do
        if conn.failed then break end
        async.step(0)
      end
      assert.equal('language server "fuzz" closed its output', conn.failed.message)
      assert.equal(#msgs, #notes)
      for k, m in ipairs(msgs) do
        assert.equal(m.method, notes[k][1])
        assert.same(m.params, notes[k][2])
      end
    end
    assert.same({}, unhandled)
  end)

  it("fails clearly, without growing, on a message over maxMessageBytes", function()
    local conn = drive({ "Content-Length: 4097\r\n\r\n", ("x"):rep(4097) })
    assert.equal('language server "fuzz" sent a bad message: LSP message of 4097 bytes exceeds the 4096-byte limit',
      conn.failed.message)
    conn = drive({ ("Content-Type: x\r\n"):rep(5000) })
    assert.equal('language server "fuzz" sent a bad message: LSP header block exceeds 65536 bytes',
      conn.failed.message)
    conn = drive({ frame('{"jsonrpc":"2.0","id":1,"result":{"contents":"ok"}}') })
    assert.equal('language server "fuzz" closed its output', conn.failed.message)
  end)
end)
