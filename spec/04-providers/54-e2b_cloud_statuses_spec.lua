-- The cloud backend of ctx.e2b against every status E2B's contract lists
-- for the calls it makes (issue 19 §1), through the E2B stand-in: real
-- answers where the stand-in gives them (a running or paused sandbox's
-- connect, 409 while a pause is held, 404, the plan's maximum), faults it
-- queues for the rest (429 with and without Retry-After, a gateway's 502,
-- 503, 504, 403). What is asserted is what reached E2B (the stand-in's record
-- of every call) and what dsh made of it.
local api = require "dsh.providers.e2b.cloud_api"
local async = require "dsh.async"
local cloud = require "dsh.providers.e2b.cloud_backend"
local context = require "dsh.context"
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local e2b = require "dsh.providers.e2b"
local helpers = require "helpers"
local loop = require "dsh.core.loop"
local schema = require "dsh.providers.e2b.schema"

local S

local function cfg(extra)
  return schema.validate(S:config(extra))
end

local ID = "/" .. ("[a-z0-9]"):rep(20)

-- "METHOD /path/ID/... status" of each call
local function summary(calls)
  local out = {}
  for _, c in ipairs(calls) do out[#out + 1] = c.method .. " " .. c.path:gsub(ID, "/ID") .. " " .. c.status end
  return out
end

local function sandboxes_now()
  return #S:sandboxes()
end

describe("the cloud backend and E2B's statuses", function()
  D.use_state()
  S = E.use_standin()
  local saved
  before_each(function()
    saved = { attempts = api.RETRY.attempts, base_ms = api.RETRY.base_ms, max_ms = api.RETRY.max_ms }
    api.RETRY.attempts, api.RETRY.base_ms, api.RETRY.max_ms = 3, 20, 100
  end)
  after_each(function()
    for k, v in pairs(saved) do api.RETRY[k] = v end
  end)

  describe("create (POST /sandboxes)", function()
    for _, status in ipairs { 429, 502, 503, 504 } do
      it("retries " .. status .. " with backoff, and succeeds when E2B does", function()
        helpers.run(function()
          local mark = S:mark()
          S:fault("POST", "/sandboxes", status, 2)
          local h = assert(cloud.create(cfg {}))
          assert.same({ "POST /sandboxes " .. status, "POST /sandboxes " .. status, "POST /sandboxes 201" },
            summary(S:calls(mark)))
          assert.equal("running", S:state(h.id))
          assert.is_true(h:kill())
          h:close()
        end)
      end)

      it("gives up on " .. status .. " after RETRY.attempts, with an error naming the status", function()
        helpers.run(function()
          local mark, before = S:mark(), sandboxes_now()
          S:fault("POST", "/sandboxes", status, 3, nil, "E2B is busy")
          local h, err = cloud.create(cfg {})
          assert.is_nil(h)
          assert.equal(status == 429 and "resource_exhausted" or "unavailable", err.code)
          assert.equal(string.format("E2B API create failed (%s): E2B is busy (gave up after 3 attempts)",
            api.status_text(status)), err.message)
          assert.equal(3, #S:calls(mark))
          assert.equal(3, #err.attempts)
          for i = 1, 2 do
            assert.is_true(err.attempts[i].waited_ms >= 0 and err.attempts[i].waited_ms <= 1000)
          end
          assert.equal(before, sandboxes_now())
        end)
      end)
    end

    it("waits the Retry-After E2B sends with a 429", function()
      helpers.run(function()
        local mark = S:mark()
        S:fault("POST", "/sandboxes", 429, 1, 1)
        local t0 = loop.now_ms()
        local h = assert(cloud.create(cfg {}))
        assert.is_true(loop.now_ms() - t0 >= 1000, "the retry came before the Retry-After")
        assert.same({ "POST /sandboxes 429", "POST /sandboxes 201" }, summary(S:calls(mark)))
        h:kill()
        h:close()
      end)
    end)

    it("does not wait a Retry-After longer than it would: one call, and the error says why", function()
      helpers.run(function()
        local mark = S:mark()
        S:fault("POST", "/sandboxes", 429, 1, 3600)
        local h, err = cloud.create(cfg {})
        assert.is_nil(h)
        assert.equal("resource_exhausted", err.code)
        assert.matches("(429 Too Many Requests)", err.message, 1, true)
        assert.matches("E2B asked to retry after 3600 s, longer than dsh waits", err.message, 1, true)
        assert.equal(1, #S:calls(mark))
      end)
    end)

    for _, status in ipairs { 401, 403 } do
      it("says the API key was refused on " .. status .. ", without retrying", function()
        helpers.run(function()
          local mark = S:mark()
          S:fault("POST", "/sandboxes", status, 1, nil, "team is blocked")
          local ctx = context.new():use(e2b, S:config {})
          local ok, err = ctx:start()
          assert.is_nil(ok)
          assert.equal(status == 401 and "unauthenticated" or "permission_denied", err.code)
          assert.equal(string.format("E2B API create failed (%s): the API key was refused (check apiKey or"
            .. " E2B_API_KEY): team is blocked", api.status_text(status)), err.message)
          assert.is_true(ctx:dispose())
          assert.equal(1, #S:calls(mark))
        end)
      end)
    end

    it("refuses a timeoutMs beyond E2B's int32 seconds before any call, and surfaces the plan's maximum", function()
      helpers.run(function()
        local mark = S:mark()
        assert.has_error(function() context.new():use(e2b, S:config { timeoutMs = (2 ^ 31) * 1000 }) end,
          "dsh-e2b: timeoutMs must be at most 2147483647000: E2B takes whole seconds in a 32-bit integer")
        assert.same({}, S:calls(mark))
        -- within the contract's range, above the plan's (1 hour here): E2B's 400, not retried
        local h, err = cloud.create(cfg { timeoutMs = (2 ^ 31 - 1) * 1000 })
        assert.is_nil(h)
        assert.equal("invalid_argument", err.code)
        assert.equal("E2B API create failed (400 Bad Request): Timeout cannot be greater than 1 hours", err.message)
        assert.same({ "POST /sandboxes 400" }, summary(S:calls(mark)))
        assert.same({ templateID = "base", timeout = 2 ^ 31 - 1, secure = true, autoPause = true },
          S:calls(mark)[1].body)
      end)
    end)
  end)

  describe("connect (POST /sandboxes/{sandboxID}/connect)", function()
    it("200 for a running sandbox, 201 for a resumed one, 404 for none", function()
      helpers.run(function()
        local made = assert(cloud.create(cfg {}))
        local id = made.id
        made:close()
        local mark = S:mark()
        local h = assert(cloud.connect(cfg {}, id))
        h:close()
        assert.equal(204, S:request("POST", "/sandboxes/" .. id .. "/pause").status)
        h = assert(cloud.connect(cfg {}, id))
        assert.equal("running", S:state(id))
        assert.same({ "POST /sandboxes/ID/connect 200", "POST /sandboxes/ID/pause 204",
          "POST /sandboxes/ID/connect 201" }, summary(S:calls(mark)))
        assert.same({ timeout = 300 }, S:calls(mark)[1].body)
        assert.is_true(h:kill())
        assert.is_false(h:kill()) -- 404: E2B no longer knows it
        h:close()
        local none, err = cloud.connect(cfg {}, id)
        assert.is_nil(none)
        assert.same({ "not_found", "sandbox " .. id .. " not found" }, { err.code, err.message })
      end)
    end)

    it("asks again while the sandbox is changing state (409), until it has paused, then resumes it", function()
      helpers.run(function()
        api.RETRY.attempts, api.RETRY.max_ms = 200, 50
        local made = assert(cloud.create(cfg {}))
        local id = made.id
        made:close()
        S:gate(id)
        local pausing = async.run(function() return S:request("POST", "/sandboxes/" .. id .. "/pause").status end)
        assert.is_truthy(helpers.eventually(function() return S:state(id) == "pausing" end, 10000))
        local mark = S:mark()
        local connecting = async.run(function() return cloud.connect(cfg {}, id) end)
        -- E2B said 409 at least once before the pause could end
        assert.is_truthy(helpers.eventually(function()
          local c = S:calls(mark)
          return #c > 0 and c[1].status == 409
        end, 10000))
        S:release(id)
        assert.equal(204, pausing:await())
        local h = assert(connecting:await())
        local seen = summary(S:calls(mark))
        assert.equal("POST /sandboxes/ID/connect 201", seen[#seen])
        for i = 1, #seen - 1 do assert.equal("POST /sandboxes/ID/connect 409", seen[i]) end
        assert.equal("running", S:state(id))
        h:kill()
        h:close()
      end)
    end)

    it("gives up on a sandbox that keeps changing state, saying so", function()
      helpers.run(function()
        local made = assert(cloud.create(cfg {}))
        local mark = S:mark()
        S:fault("POST", "/sandboxes/{sandboxID}/connect", 409, 3, nil, "Sandbox is being paused")
        local h, err = cloud.connect(cfg {}, made.id)
        assert.is_nil(h)
        assert.equal("failed_precondition", err.code)
        assert.equal("E2B API connect failed (409 Conflict): Sandbox is being paused (the sandbox was still"
          .. " changing state after 3 attempts)", err.message)
        assert.equal(3, #S:calls(mark))
        made:kill()
        made:close()
      end)
    end)

    it("retries 503 on connect too, and stops at once on 403", function()
      helpers.run(function()
        local made = assert(cloud.create(cfg {}))
        local mark = S:mark()
        S:fault("POST", "/sandboxes/{sandboxID}/connect", 503, 1)
        local h = assert(cloud.connect(cfg {}, made.id))
        h:close()
        assert.same({ "POST /sandboxes/ID/connect 503", "POST /sandboxes/ID/connect 200" }, summary(S:calls(mark)))
        S:fault("POST", "/sandboxes/{sandboxID}/connect", 403, 1)
        local none, err = cloud.connect(cfg {}, made.id)
        assert.is_nil(none)
        assert.equal("permission_denied", err.code)
        assert.matches("the API key was refused", err.message, 1, true)
        made:kill()
        made:close()
      end)
    end)
  end)

  describe("setTimeout (POST /sandboxes/{sandboxID}/timeout)", function()
    it("reads its answer: 204 moves the deadline, 404 and 400 are errors, 500 is one too", function()
      helpers.run(function()
        local h = assert(cloud.create(cfg {}))
        local before = S:request("GET", "/sandboxes/" .. h.id).body.endAt
        assert.is_true(h:set_timeout(1800000))
        local after = S:request("GET", "/sandboxes/" .. h.id).body.endAt
        assert.is_true(after > before, after .. " is not later than " .. before)
        local ok, err = h:set_timeout(2 * 3600000)
        assert.is_nil(ok)
        assert.same({ "invalid_argument", "E2B API setTimeout failed (400 Bad Request): Max instance length exceeded" },
          { err.code, err.message })
        S:fault("POST", "/sandboxes/{sandboxID}/timeout", 500, 1, nil, "Error when setting sandbox timeout")
        ok, err = h:set_timeout(60000)
        assert.is_nil(ok)
        assert.equal("internal", err.code)
        assert.equal(204, S:request("POST", "/sandboxes/" .. h.id .. "/pause").status)
        ok, err = h:set_timeout(60000)
        assert.is_nil(ok)
        assert.equal("not_found", err.code)
        assert.matches("is not running (paused or gone): its timeout was not moved", err.message, 1, true)
        h:kill()
        h:close()
      end)
    end)

    it("an extension E2B refused is asked again by the next call, and its error is kept", function()
      helpers.run(function()
        local h = assert(cloud.create(cfg { timeoutMs = 60000 }))
        local mark = S:mark()
        S:fault("POST", "/sandboxes/{sandboxID}/timeout", 500, 1, nil, "Error when setting sandbox timeout")
        h._extended_at = loop.now_ms() - 31000 -- as if half the timeout had passed since the last extension
        h:touch()
        assert.is_truthy(helpers.eventually(function() return h.timeout_error ~= nil end, 10000))
        assert.equal("internal", h.timeout_error.code)
        h:touch() -- not extended: the next call asks again
        assert.is_truthy(helpers.eventually(function() return #S:calls(mark) == 2 and h.timeout_error == nil end,
          10000))
        h:touch() -- extended now: nothing to ask
        h:close()
        assert.same({ "POST /sandboxes/ID/timeout 500", "POST /sandboxes/ID/timeout 204" }, summary(S:calls(mark)))
        assert.same({ timeout = 60 }, S:calls(mark)[2].body)
        local again = assert(cloud.connect(cfg {}, h.id))
        again:kill()
        again:close()
      end)
    end)
  end)

  describe("pause and kill", function()
    it("pause: 204 is true; 409 with the record saying paused is false; 404 is not_found", function()
      helpers.run(function()
        local h = assert(cloud.create(cfg {}))
        assert.is_true(h:pause())
        local mark = S:mark()
        assert.is_false(h:pause())
        assert.same({ "POST /sandboxes/ID/pause 409", "GET /sandboxes/ID 200" }, summary(S:calls(mark)))
        assert.is_true(h:kill())
        local ok, err = h:pause()
        assert.is_nil(ok)
        assert.equal("not_found", err.code)
        h:close()
      end)
    end)

    it("kill: retried on 502, then 204", function()
      helpers.run(function()
        local h = assert(cloud.create(cfg {}))
        local mark = S:mark()
        S:fault("DELETE", "/sandboxes/{sandboxID}", 502, 2)
        assert.is_true(h:kill())
        assert.same({ "DELETE /sandboxes/ID 502", "DELETE /sandboxes/ID 502", "DELETE /sandboxes/ID 204" },
          summary(S:calls(mark)))
        assert.is_nil(S:state(h.id))
        h:close()
      end)
    end)
  end)
end)
