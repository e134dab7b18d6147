-- A host process survives children reaped after its Lua state closed.
--
-- libev's SIGCHLD handler stays installed for the life of the process, and
-- the loop makes the host a child subreaper, so orphans (sandbox supervisors,
-- grandchildren of killed groups) can die at any time, also while or after
-- LuaJIT closes its state. Closing the state used to dlclose libdsh.so and
-- libev with it; the next SIGCHLD then jumped into unmapped code (SIGSEGV).
local helpers = require "helpers"
local proc = require "dsh.core.proc"

-- Runs in a fresh luajit: a finalizer created before dsh's library is loaded
-- runs after the library's own (lua_close finalizes newest first) and forks a
-- child, so a SIGCHLD arrives once the library would have been unloaded.
local SCRIPT = [[
local guard = newproxy(true)
getmetatable(guard).__gc = function() os.execute("true") end
_G.GUARD = guard
local async = require "dsh.async"
local proc = require "dsh.core.proc"
async.run(function()
  local p = assert(proc.spawn { argv = { "true" }, stdout = "null", stderr = "null" })
  p:wait()
  p:close()
end):await()
io.stdout:write("closing\n")
os.exit(0, true)
]]

describe("the host process at exit", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("does not crash on a SIGCHLD that arrives after the Lua state closed", function()
    helpers.run(function()
      for _ = 1, 3 do
        local p = assert(proc.spawn {
          argv = { "luajit", "-e", SCRIPT },
          env = { PATH = os.getenv("PATH"), LUA_PATH = package.path, LUA_CPATH = package.cpath,
            DSH_BUILD_DIR = helpers.build },
          stdout = "pipe", stderr = "pipe",
        })
        local out, err = p:read_all(), p:read_all("stderr")
        local st = p:wait()
        p:close()
        assert.same({ exit_code = 0, signal = nil }, { exit_code = st.exit_code, signal = st.signal },
          "luajit ended with " .. tostring(st.signal or st.exit_code) .. ": " .. tostring(err))
        assert.equal("closing\n", out)
      end
    end)
  end)
end)
