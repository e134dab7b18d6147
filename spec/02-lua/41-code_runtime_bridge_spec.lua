-- The host's side of the Code Mode bridge (reference §6.7 items 5–9, 11,
-- 13–15, 18) against a scripted runner (spec/fixtures/code_runtime_peer.lua)
-- started where the supervisor would be, through a real subprocess-local:
-- replies by id, junk ignored, every failure message, late replies never
-- written, setup races; and hostile frame streams (a fuzz run).
local async = require "dsh.async"
local base64 = require "dsh.core.base64"
local code_runtime = require "dsh.code_runtime"
local helpers = require "helpers"
local loop = require "dsh.core.loop"
local wire = require "dsh.code_runtime._wire"
local json = require "dsh.code_runtime._json"

local PEER = helpers.root .. "/spec/fixtures/code_runtime_peer.lua"
local LUAJIT = "/usr/bin/luajit"

local function q(s) return string.format("%q", s) end

-- A runtime whose "supervisor" follows plan (a list of steps); returns the
-- service, the received lines (after the run), and a cleanup function.
local function peer_runtime(cfg, opts)
  opts = opts or {}
  local dir = helpers.tmpdir()
  local src = assert(helpers.read_file(PEER))
  helpers.write_file(dir .. "/code-runtime-supervisor.lua", src)
  local ctx = helpers.start_context { require "dsh.providers.subprocess_local" }
  local prepared = 0
  local backend = {
    name = "code-runtime-peer", label = "local runtime", subprocess = ctx.subprocess, cwd = dir,
    prepare = function(_, check)
      if opts.setup_delay then async.sleep(opts.setup_delay) end
      local ok, err = check()
      if not ok then return nil, err end
      if opts.setup_error then return nil, opts.setup_error end
      prepared = prepared + 1
      return { root = dir, luajit = opts.luajit or LUAJIT }
    end,
  }
  local svc = code_runtime.service(backend, code_runtime.validate_config("code-runtime-peer", cfg or {}))
  local env = { svc = svc, dir = dir, subprocess = ctx.subprocess }
  function env.plan(steps)
    local parts = { "return {" }
    for _, s in ipairs(steps) do
      local items = {}
      for i, v in ipairs(s) do items[i] = type(v) == "string" and q(v) or tostring(v) end
      parts[#parts + 1] = "{" .. table.concat(items, ",") .. "},"
    end
    parts[#parts + 1] = "}"
    helpers.write_file(dir .. "/plan.lua", table.concat(parts, "\n"))
    os.remove(dir .. "/received.log")
  end
  function env.received()
    local out = {}
    for line in (helpers.read_file(dir .. "/received.log") or ""):gmatch("[^\n]+") do
      out[#out + 1] = json.decode_json(base64.decode(line))
    end
    return out
  end
  function env.prepared() return prepared end
  function env.close()
    svc:dispose()
    assert(ctx:dispose())
    helpers.rm_rf(dir)
  end
  return env
end

local function with_peer(cfg, opts, fn)
  helpers.run(function()
    local env = peer_runtime(cfg, opts)
    local ok, err = pcall(fn, env, env.svc)
    env.close()
    if not ok then error(err, 0) end
  end)
end

local BOOT = { "read", 1 }
local function done(value_json) return { "frame", '{"type":"done","value":' .. value_json .. "}" } end

local function bridge()
  return { {
    global = "bridge",
    functions = {
      double = function(x) return 2 * x end,
      fail = function() error("nope", 0) end,
      none = function() end,
      getter = function() return setmetatable({}, { __index = function() error("threw") end }) end,
      slow = function() async.sleep(300) return 1 end,
    },
  } }
end

describe("code runtime bridge (host side)", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("answers binding calls by id; a duplicate id is ignored", function()
    with_peer({}, {}, function(env, svc)
      local function call(id, name, args)
        return { "frame", string.format('{"type":"call","id":%d,"global":"bridge","name":"%s","args":%s}',
          id, name, args) }
      end
      env.plan {
        BOOT,
        call(1, "double", '[{"kind":"array","length":1},4]'),
        call(2, "fail", '[{"kind":"array","length":0}]'),
        call(3, "missing", '[{"kind":"array","length":0}]'),
        call(4, "double", "[]"),
        call(5, "none", '[{"kind":"array","length":0}]'),
        call(6, "getter", '[{"kind":"array","length":0}]'),
        call(1, "double", '[{"kind":"array","length":1},100]'),
        { "read", 6 },
        { "sleep", 100 },
        done('["done"]'),
      }
      local r = svc:run { program = "x", bindings = bridge() }
      assert.same({ logs = {}, value = "done" }, r)
      local got = env.received()
      assert.equal(7, #got, "boot and exactly six replies")
      assert.equal("boot", got[1].type)
      local by_id = {}
      for i = 2, 7 do by_id[got[i].id] = got[i] end
      assert.same({ 8 }, { wire.from_tokens(by_id[1].value) })
      assert.equal("nope", by_id[2].message)
      assert.equal('unknown binding "bridge.missing"', by_id[3].message)
      assert.equal("binding arguments must be lossless JSON", by_id[4].message)
      assert.equal("binding resolution must be lossless JSON", by_id[5].message)
      assert.equal("binding resolution must be lossless JSON", by_id[6].message)
    end)
  end)

  it("ignores junk frames; done's forms; output-limit's message", function()
    with_peer({ maxOutputBytes = 64 }, {}, function(env, svc)
      local junk = { "null", "1", "{}", '{"type":"log"}', '{"type":"log","text":5}',
        '{"type":"call","id":0,"global":"bridge","name":"double","args":[]}',
        '{"type":"call","id":1,"global":7,"name":"double","args":[]}',
        '{"type":"call","id":1,"global":"bridge","name":"double","args":{}}',
        '{"type":"done","error":null}', '{"type":"done","error":{"kind":"invented","message":"x"}}',
        '{"type":"done","error":{"kind":"exception","message":3}}', '{"type":"weird"}' }
      local steps = { BOOT }
      for _, j in ipairs(junk) do steps[#steps + 1] = { "frame", j } end
      steps[#steps + 1] = { "frame", '{"type":"done"}' }
      env.plan(steps)
      assert.same({ logs = {} }, svc:run { program = "x" })
      env.plan { BOOT, { "frame", '{"type":"done","error":{"kind":"exception","message":"boom"}}' } }
      assert.same({ logs = {}, error = { kind = "exception", message = "boom" } }, svc:run { program = "x" })
      env.plan { BOOT, { "frame", '{"type":"done","value":[]}' } }
      assert.same({ kind = "invalid-output", message = "program completion must be lossless JSON" },
        svc:run({ program = "x" }).error)
      env.plan { BOOT, { "frame", '{"type":"output-limit"}' } }
      assert.same({ kind = "output-limit", message = "outer output exceeded 64 bytes" },
        svc:run({ program = "x" }).error)
      env.plan { BOOT, { "frame", '{"type":"log","text":"' .. string.rep("a", 1000) .. '"}' }, { "sleep", 2000 } }
      local r = svc:run { program = "x" }
      assert.equal("output-limit", r.error.kind)
      assert.same({ string.rep("a", 60) }, r.logs)
    end)
  end)

  it("joins a log sent in pieces and counts it once", function()
    with_peer({ maxOutputBytes = 1000 }, {}, function(env, svc)
      env.plan { BOOT, { "frame", '{"type":"log","text":"ab","more":true}' }, { "frame", '{"type":"log","text":"cd"}' },
        { "frame", '{"type":"log","text":"e"}' }, { "frame", '{"type":"done"}' } }
      assert.same({ logs = { "abcd", "e" } }, svc:run { program = "x" })
    end)
  end)

  it("fails the run on a broken frame stream, with the decoder's message", function()
    with_peer({}, {}, function(env, svc)
      env.plan { BOOT, { "raw", "not-base64\n" }, { "sleep", 2000 } }
      assert.same({ kind = "worker-exit",
        message = "local runtime bridge failed: E2B frame contained invalid base64 or exceeded its byte limit" },
        svc:run({ program = "x" }).error)
      env.plan { BOOT, { "raw", "\195\169" }, { "sleep", 2000 } }
      assert.same({ kind = "worker-exit",
        message = "local runtime bridge failed: E2B frame stream contained non-ASCII data" },
        svc:run({ program = "x" }).error)
      env.plan { BOOT, { "raw", "YQ==" } }
      assert.same({ kind = "worker-exit", message = "E2B frame stream ended mid-frame" },
        svc:run({ program = "x" }).error)
    end)
  end)

  it("says how a runner that exits early ended, in order of the reference's messages", function()
    with_peer({}, {}, function(env, svc)
      env.plan { BOOT, { "stderr", "  remote diagnostic \n" }, { "exit", 3 } }
      assert.same({ kind = "worker-exit", message = "local runtime exited before completing: remote diagnostic" },
        svc:run({ program = "x" }).error)
      env.plan { BOOT, { "exit", 0 } }
      assert.same({ kind = "worker-exit", message = "local runtime exited before completing" },
        svc:run({ program = "x" }).error)
      env.plan { BOOT, { "close_stdin" },
        { "frame", '{"type":"call","id":1,"global":"bridge","name":"double","args":[{"kind":"array","length":1},1]}' },
        { "sleep", 3000 } }
      local r = svc:run { program = "x", bindings = bridge() }
      assert.equal("worker-exit", r.error.kind)
      assert.truthy(r.error.message:find("^local runtime bridge write failed: "), r.error.message)
    end)
    with_peer({}, { luajit = "/nonexistent/luajit" }, function(env, svc)
      env.plan { BOOT }
      local r = svc:run { program = "x" }
      assert.equal("worker-exit", r.error.kind)
      assert.truthy(r.error.message:find("^local runtime spawn failed: "), r.error.message)
    end)
  end)

  it("aborts during a pending binding and never writes the late reply", function()
    with_peer({}, {}, function(env, svc)
      env.plan { BOOT,
        { "frame", '{"type":"call","id":1,"global":"bridge","name":"slow","args":[{"kind":"array","length":0}]}' },
        { "drain" } }
      local ctl = async.controller()
      local t = loop.timer(function() ctl:abort("stop") end)
      t:start(100)
      local r = svc:run { program = "x", bindings = bridge(), signal = ctl.signal }
      t:close()
      assert.same({ logs = {}, error = { kind = "abort", message = "stop" } }, r)
      async.sleep(400) -- past the binding's answer
      local got = env.received()
      assert.equal(1, #got)
      assert.equal("boot", got[1].type)
    end)
  end)

  it("reports only once the group is gone, even when done came first", function()
    with_peer({ killGraceMs = 300 }, {}, function(env, svc)
      env.plan { BOOT, { "ignore_term" }, done("[1]"), { "sleep", 10000 } }
      local t0 = loop.now_ms()
      local r = svc:run { program = "x" }
      assert.same({ logs = {}, value = 1 }, r)
      assert.is_true(loop.now_ms() - t0 >= 300, "reported before the KILL after killGraceMs")
    end)
  end)

  it("raises at the caller when the subprocess backend raised (done rejected), leaving nothing", function()
    with_peer({}, {}, function(env, svc)
      -- fault injection into the real backend: its wait raises once the process ended
      local backend = env.subprocess._backend
      backend.start = function(self, spec)
        local bp, err = getmetatable(self).start(self, spec)
        if bp then
          bp.wait = function(b)
            getmetatable(b).wait(b)
            error("backend bug", 0)
          end
        end
        return bp, err
      end
      env.plan { BOOT, done("[1]") }
      local ok, err = pcall(svc.run, svc, { program = "x" })
      backend.start = nil
      assert.is_false(ok)
      assert.equal("SUBPROCESS_FAILED", err.code)
      assert.truthy(err.message:find("backend bug", 1, true), err.message)
      assert.equal(0, svc:live_count())
      env.plan { BOOT, done("[2]") }
      assert.same({ logs = {}, value = 2 }, svc:run { program = "x" })
    end)
  end)

  it("setup: failure, abort during it, dispose during it", function()
    with_peer({}, { setup_error = require("dsh.errors").new("X", "upload failed") }, function(_, svc)
      assert.same({ logs = {},
        error = { kind = "worker-exit", message = "local runtime setup failed: upload failed" } },
        svc:run { program = "x" })
    end)
    -- setups of 3 s: far longer than the 50 ms to the abort and the 20 ms to the dispose
    with_peer({}, { setup_delay = 3000 }, function(env, svc)
      local ctl = async.controller()
      local t = loop.timer(function() ctl:abort("stop during setup") end)
      t:start(50)
      local t0 = loop.now_ms()
      local r = svc:run { program = "x", signal = ctl.signal }
      t:close()
      assert.same({ logs = {}, error = { kind = "abort", message = "stop during setup" } }, r)
      assert.is_true(loop.now_ms() - t0 < 2500, "the abort waited for setup")
      svc._ready:await()
      assert.equal(1, env.prepared())
    end)
    with_peer({}, { setup_delay = 3000 }, function(env, svc)
      local f = async.run(function() return svc:run { program = "x" } end)
      async.sleep(20)
      svc:dispose()
      assert.same({ logs = {}, error = { kind = "abort", message = "runtime disposed" } }, f:await())
      assert.equal(0, env.prepared(), "setup went on after dispose")
      local ok, err = svc._ready:await()
      assert.is_nil(ok)
      assert.equal("code-runtime-peer: runtime disposed during setup", err.message)
    end)
  end)

  it("survives hostile frame streams (fuzz)", function()
    math.randomseed(tonumber(os.getenv("DSH_FUZZ_SEED") or "") or os.time())
    local pieces = { '{"type":"log","text":"%s"}',
      '{"type":"call","id":%d,"global":"bridge","name":"double","args":%s}',
      '{"type":"done","value":%s}', '{"type":"done","error":{"kind":"%s","message":"m"}}', '{"type":"output-limit"}',
      '{"type":"log","text":"x","more":%s}', "[%s]", '{"kind":"array","length":%d}', "%s" }
    local tokens = { "null", "1", "-0", "1e999", '"\\ud800"', "[]", "{}", '[{"kind":"array","length":2},1]',
      '[{"kind":"object","keys":["a"]},"\\u0000"]', '[{"kind":"object","keys":["a","a"]},1,2]', "true", '"é"' }
    local kinds = { "exception", "timeout", "abort", "worker-exit", "invalid-output", "output-limit", "nope" }
    local function rnd(list) return list[math.random(#list)] end
    with_peer({ maxOutputBytes = 256, maxFrameBytes = 4096, maxWallMs = 2000 }, {}, function(env, svc)
      local deadline = loop.now_ms() + 1000 * (tonumber(os.getenv("DSH_FUZZ_SECONDS") or "") or 3)
      local runs = 0
      while loop.now_ms() < deadline or runs < 20 do
        runs = runs + 1
        local steps = { BOOT }
        for _ = 1, math.random(1, 12) do
          local p = rnd(pieces)
          local text = p:gsub("%%d", tostring(math.random(-1, 3))):gsub("%%s", function()
            return rnd { rnd(tokens), rnd(kinds), string.rep("z", math.random(0, 300)) }
          end)
          local mode = math.random(1, 10)
          if mode == 1 then
            steps[#steps + 1] = { "raw", text:sub(1, math.random(#text)) }
          elseif mode == 2 then
            steps[#steps + 1] = { "raw", base64.encode(text) } -- no newline: joins the next frame
          else
            steps[#steps + 1] = { "frame", text }
          end
        end
        steps[#steps + 1] = { "exit", math.random(0, 1) }
        env.plan(steps)
        local r = svc:run { program = "x", bindings = bridge() }
        assert.equal("table", type(r.logs))
        assert.is_true(r.error == nil or code_runtime.KINDS[r.error.kind] == true and type(r.error.message) == "string")
        if r.error == nil and r.value ~= nil then assert.truthy(wire.encode(r.value)) end
        assert.equal(0, svc:live_count())
      end
    end)
  end)
end)
