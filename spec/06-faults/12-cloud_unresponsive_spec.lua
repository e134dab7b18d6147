-- A cloud sandbox whose envd stops answering (issue 18, item 2), on E2B's
-- control plane as its stand-in has it (spec/fixtures/e2b-api.mjs: a real
-- dshd behind E2B's API and router, stopped here with SIGSTOP). Across the
-- internet the client doubts later and waits longer for a probe (1 s, 5 s):
-- a call ends within those with SANDBOX_UNRESPONSIVE naming the sandbox,
-- later calls fail at once, and dispose gives up at disposeTimeoutMs and
-- kills the sandbox through the control plane (a DELETE), saying so.
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local session = require "dsh.providers.e2b.session"
local helpers = require "helpers"
local loop = require "dsh.core.loop"
local sys = require "dsh.core.sysutil"

-- The host pid of the dshd of stand-in sandbox id.
local function dshd_of(S, id)
  for _, p in ipairs(S:pids(id)) do
    if (sys.read_file("/proc/" .. p .. "/cmdline") or ""):find("^/opt/dsh/bin/dshd") then return p end
  end
end

describe("a cloud sandbox whose envd stops answering (the E2B stand-in)", function()
  D.use_state()
  local S = E.use_standin()

  it("a call ends SANDBOX_UNRESPONSIVE within the cloud's probe bounds; dispose kills it through the API",
    function()
      helpers.run(function()
        local ctx = helpers.start_context {
          { require "dsh.providers.e2b", S:config { disposeTimeoutMs = 1000 } }, require "dsh.providers.fs_e2b",
          require "dsh.providers.subprocess_e2b", require "dsh.providers.bash",
        }
        local id = ctx.e2b:sandboxId()
        local pid = assert(dshd_of(S, id), "no dshd runs for " .. id)
        assert(ctx.fs:writeText("a.txt", "cloud\n"))
        local mark = S:mark()
        assert(sys.kill(pid, 19))
        local ok, err = xpcall(function()
          local t0 = loop.now_ms()
          local r, rerr = ctx.fs:readText("a.txt")
          local ms = loop.now_ms() - t0
          assert.is_nil(r)
          assert.equal("SANDBOX_UNRESPONSIVE", rerr.code)
          local probe_ms = tonumber(rerr.message:match("^cannot read \"/home/user/workspace/a%.txt\": sandbox " .. id
            .. " is unresponsive: its daemon did not answer a health check within (%d+) ms; gave up on "))
          assert(probe_ms and probe_ms >= session.CLOUD_PROBE_TIMEOUT_MS, rerr.message)
          local bound = session.CLOUD_SLOW_MS + probe_ms + 2000
          assert.is_true(ms < bound, string.format("ended after %.0f ms (bound %d)", ms, bound))
          t0 = loop.now_ms()
          r, rerr = ctx.bash:run { command = "true" }
          assert.same({ "SANDBOX_UNRESPONSIVE" }, { rerr.code, r })
          assert.is_true(loop.now_ms() - t0 < 500, "a later call waited")
          -- dispose: past its deadline the control plane kills the sandbox
          local dok, derr = ctx:dispose()
          assert.is_nil(dok)
          local report
          for _, e in ipairs(derr.errors or { derr }) do
            if e.code == "SANDBOX_UNRESPONSIVE" and e.message:find("control plane", 1, true) then report = e end
          end
          assert(report, "dispose did not report the kill: " .. tostring(derr))
          assert.matches("^sandbox " .. id .. " is unresponsive: its daemon did not answer a health check within "
            .. "%d+ ms; it was killed through E2B's control plane, which ended what the context had started there$",
            report.message)
          local delete
          for _, c in ipairs(S:calls(mark)) do
            if c.method == "DELETE" then delete = c end
          end
          assert.same({ "/sandboxes/" .. id, 204 }, { delete and delete.path, delete and delete.status })
          assert.is_nil(S:state(id))
        end, debug.traceback)
        sys.kill(pid, 18)
        if not ok then
          ctx:dispose()
          error(err, 0)
        end
      end)
    end)
end)
