-- A sandbox whose dshd stops answering (issue 18, item 2): dshd stopped from
-- outside with SIGSTOP, and the whole sandbox frozen by its cgroup freezer,
-- on a real local sandbox with every service. The host keeps its own
-- deadlines: every provider's call (fs, subprocess, bash, pty, lsp, code
-- runtime) ends within its timeout and 2 s (a call without one once a probe
-- goes unanswered) with SANDBOX_UNRESPONSIVE naming the sandbox (a seam's
-- nearest code where it has its own: LSP_*, a worker-exit result); later
-- calls fail at once with the same code; once dshd runs again calls work;
-- and dispose ends within 5 s, killing the sandbox through its supervisor
-- and saying what it could not end gracefully, frozen or not (the
-- supervisor thaws what it kills). Nothing is left.
local D = require "helpers.dshd"
local F = require "06-faults.support"
local T = require "06-faults.deadlines"
local helpers = require "helpers"
local sys = require "dsh.core.sysutil"

-- Run fn(ctx, fault) on a fresh composition with the fault made by make(id).
local function with_fault(make, fn)
  helpers.run(function()
    local ctx = F.compose()
    local id = ctx.e2b:sandboxId()
    local fault = make(id)
    local ok, err = xpcall(fn, debug.traceback, ctx, fault)
    fault.close()
    if not ok then
      ctx:dispose()
      require("dsh.sandbox").kill(id)
      error(err, 0)
    end
  end)
end

describe("a sandbox whose dshd stops answering", function()
  D.use_state()

  it("SIGSTOP: every provider's call ends within its deadline naming the sandbox; dispose kills it in 5 s",
    function()
      with_fault(T.sigstop, function(ctx, fault)
        T.each_provider(ctx, fault, T.prepare(ctx))
        T.dispose(ctx, fault)
      end)
    end)

  -- sandboxes get a freezer group where the host runs as root with a cgroup v1 freezer
  local freezer = sys.getuid() == 0 and (sys.read_file("/proc/self/cgroup") or ""):find(":freezer:", 1, true)

  it("the freezer: every provider's call ends within its deadline naming the sandbox",
    function()
      if not freezer then
        pending("needs root and a cgroup v1 freezer hierarchy")
        return
      end
      with_fault(T.freezer, function(ctx, fault)
        T.each_provider(ctx, fault, T.prepare(ctx))
        F.dispose(ctx)
      end)
    end)

  it("the freezer: dispose kills the frozen sandbox within 5 s", function()
    if not freezer then
      pending("needs root and a cgroup v1 freezer hierarchy")
      return
    end
    with_fault(T.freezer, function(ctx, fault)
      T.prepare(ctx)
      T.dispose(ctx, fault)
    end)
  end)
end)
