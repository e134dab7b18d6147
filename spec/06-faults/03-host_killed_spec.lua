-- The host process killed (issue 14, Faults): a child LuaJIT agent host
-- creates a sandbox through ctx.e2b with a short idle timeout, leaves a
-- command streaming and a background process running in it, and is
-- SIGKILLed. The sandbox outlives its host by design; its timeout then
-- cleans up: with onTimeout = "kill" nothing of it is left on the machine
-- (no process, no state directory), with "pause" no process is left and its
-- files stay for the next host.
local D = require "helpers.dshd"
local F = require "06-faults.support"
local helpers = require "helpers"
local proc = require "dsh.core.proc"
local sandbox = require "dsh.sandbox"
local state = require "dsh.sandbox.state"

-- The child host: prints the sandbox id once its work runs, then waits forever.
local HOST = [[
local async = require "dsh.async"
async.run(function()
  local ctx = require("dsh.context").new()
  ctx:use(require "dsh.providers.e2b", { timeoutMs = 1500, onTimeout = ON_TIMEOUT, network = false })
  ctx:use(require "dsh.providers.fs_e2b")
  ctx:use(require "dsh.providers.subprocess_e2b")
  ctx:use(require "dsh.providers.bash")
  assert(ctx:start())
  assert(ctx.fs:writeText("note.txt", "written by the host"))
  assert(ctx.bash:start { command = "exec sleep 1000" })
  local h = assert(ctx.subprocess:spawn { argv = { "bash", "-c", "while :; do echo line; sleep 0.01; done" },
    stdio = { stdout = { maxBytes = 1000 } } })
  while h.stdout:readFrom(0).text == "" do async.sleep(10) end
  io.stdout:write(ctx.e2b:sandboxId(), "\n")
  io.stdout:flush()
  async.sleep(1e9)
end):await()
]]

-- Start the child host; returns it and its sandbox's id once that runs.
local function start_host(on_timeout)
  local env = {
    PATH = os.getenv("PATH"), HOME = os.getenv("HOME"), LUA_PATH = package.path, LUA_CPATH = package.cpath,
    DSH_STATE_DIR = os.getenv("DSH_STATE_DIR"), DSH_BUILD_DIR = os.getenv("DSH_BUILD_DIR"),
  }
  local p = assert(proc.spawn { argv = { "luajit", "-e", (HOST:gsub("ON_TIMEOUT", string.format("%q", on_timeout))) },
    env = env, stdout = "pipe", stderr = "pipe" })
  local line = ""
  while not line:find("\n") do
    local chunk = p:read()
    if not chunk then break end
    line = line .. chunk
  end
  local id = line:match("^(%w+)\n")
  if not id then
    local diag = p:read_all("stderr")
    p:close()
    error("the child host did not start its sandbox: " .. tostring(diag))
  end
  return p, id
end

describe("the host process SIGKILLed", function()
  D.use_state()

  it("leaves its sandbox to its timeout, which kills it: nothing is left on the machine", function()
    helpers.run(function()
      local p, id = start_host("kill")
      assert.equal("running", sandbox.status(id).state)
      assert.is_true(#F.host_processes(id) > 0)
      assert(p:signal("SIGKILL"))
      p:wait()
      p:close()
      assert.equal("running", sandbox.status(id).state) -- the sandbox outlives its host
      assert.is_truthy(helpers.eventually(function() return sandbox.status(id).state == "gone" end, 10000, 50),
        "the sandbox's timeout did not end it")
      local st = sandbox.status(id)
      assert.equal("killed by its idle timeout (1500 ms)", st.reason)
      assert.matches("^" .. F.ISO .. "$", st.at)
      F.assert_nothing_left(id)
    end)
  end)

  it("leaves its sandbox to its timeout, which pauses it: no process is left, the files stay", function()
    helpers.run(function()
      local p, id = start_host("pause")
      assert(p:signal("SIGKILL"))
      p:wait()
      p:close()
      assert.is_truthy(helpers.eventually(function() return sandbox.status(id).state == "paused" end, 10000, 50),
        "the sandbox's timeout did not pause it")
      assert.equal("paused by its idle timeout (1500 ms)", sandbox.status(id).reason)
      local left = {}
      assert.is_truthy(helpers.eventually(function()
        left = F.host_processes(id)
        return #left == 0
      end, 3000), "host processes left: " .. table.concat(left, ", "))
      assert.is_nil(state.read_runtime(id)) -- its cgroups and groups were released
      assert.equal("written by the host", D.stored(id, "/home/user/workspace/note.txt"))
      assert(sandbox.kill(id))
      F.assert_nothing_left(id)
    end)
  end)
end)
