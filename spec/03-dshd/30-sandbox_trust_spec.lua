-- Nothing the host reads to find or authenticate a local sandbox is in the
-- sandbox's reach (issue 7, isolation item 1; issue 18, item 1): dshd
-- listens on a socket the launcher bound in the host's state directory and
-- handed over as a descriptor, so there is no path of dshd's inside to plant
-- a ready file, a link or another listener at, and the host never reads a
-- file the sandbox can write. Code in the sandbox plants what it can where
-- dshd's files used to be and in its home; the host keeps talking to the
-- sandbox's own dshd, proved by the sandbox's hostname coming back, and a
-- trap listener (a dshd on the host without a token, which would run the
-- command as the host) stays unused. The records the host does read live
-- outside the sandbox and are opened without following links, as regular
-- files of bounded size.
local D = require "helpers.dshd"
local helpers = require "helpers"
local hostfs = require "dsh.core.hostfs"
local lfs = require "lfs"
local sandbox = require "dsh.sandbox"
local state = require "dsh.sandbox.state"

local function sh(client, script)
  local p = assert(client:start { cmd = "/bin/bash", args = { "-c", script } })
  local r = assert(p:wait())
  p:close()
  return r.exit_code, r.stdout, r.stderr
end

local function hostname_of(id)
  return "dsh-" .. id:sub(1, 12) .. "\n"
end

-- Attach anew (as `dsh exec` and every new context do) and ask who answers.
local function who_answers(id)
  local sb = assert(sandbox.connect(id))
  local code, out = sh(sb.envd, "cat /etc/hostname")
  sb:close()
  assert.equal(0, code)
  return out
end

describe("a local sandbox cannot steer the host", function()
  D.use_state()
  local tmp
  setup(function() tmp = helpers.tmpdir() end)
  teardown(function() helpers.rm_rf(tmp) end)

  it("is reached through a socket in the host's state directory that no path inside names", function()
    helpers.run(function()
      local sb = assert(sandbox.create {})
      finally(function() sandbox.kill(sb.id) end)
      assert.equal(state.socket(sb.id), sb.envd.unix_socket)
      assert.equal("socket", lfs.symlinkattributes(state.socket(sb.id), "mode"))
      -- no socket anywhere in the sandbox's file system, and /run is read-only
      assert.same({ 0, "", "" }, { sh(sb.envd, "find / -xdev -type s 2>/dev/null; find /run /tmp /home -type s") })
      local code, _, err = sh(sb.envd, "mkdir -p /run/dsh")
      assert.equal(1, code)
      assert.matches("Read%-only file system", err)
      -- dshd holds its socket as a descriptor no command may see
      code = sh(sb.envd, "ls -l /proc/2/fd")
      assert.equal(2, code)
      -- every record the host reads sits in the state directory, none inside the sandbox
      local mounts = select(2, sh(sb.envd, "cat /proc/self/mountinfo"))
      assert.is_nil(mounts:find(state.dir(sb.id), 1, true))
      for _, name in ipairs { "dshd.sock", "meta.json", "supervisor.pid", "runtime.json", "ready" } do
        assert.is_truthy(lfs.symlinkattributes(state.dir(sb.id) .. "/" .. name), name)
      end
      sb:close()
    end)
  end)

  it("ignores ready files, links and sockets planted where dshd's files were", function()
    helpers.run(function()
      local trap = D.bare({}, { listen = tmp .. "/trap.sock" })
      local secret = tmp .. "/host-only"
      helpers.write_file(secret, trap.addr .. "\n")
      local sb = assert(sandbox.create {})
      finally(function()
        sandbox.kill(sb.id)
        trap.stop()
      end)
      local plant = "set -e; for d in /home/user /tmp /dev/shm; do mkdir -p $d/run/dsh; "
        .. "printf '%s\\n' '" .. trap.addr .. "' >$d/run/dsh/ready; "
        .. "ln -sf '" .. secret .. "' $d/ready; ln -sf '" .. tmp .. "/trap.sock' $d/dshd.sock; done"
      assert.equal(0, (sh(sb.envd, plant)))
      sb:close()
      assert.equal(hostname_of(sb.id), who_answers(sb.id))
      -- and across a pause: the restarted sandbox is found the same way
      assert(sandbox.pause(sb.id))
      assert.equal(hostname_of(sb.id), who_answers(sb.id))
    end)
  end)

  it("reads its records without following links and without blocking", function()
    helpers.run(function()
      local sb = assert(sandbox.create { network = false })
      local id = sb.id
      finally(function() sandbox.kill(id) end)
      sb:close()
      assert(sandbox.pause(id))
      local meta = state.dir(id) .. "/meta.json"
      local real = tmp .. "/meta.json"
      assert(os.rename(meta, real))
      -- a link (to a record that would be valid), then a FIFO: both refused
      assert(lfs.link(real, meta, true))
      local ok, err = sandbox.connect(id)
      assert.is_nil(ok)
      assert.same({ "internal", "sandbox " .. id .. " has an unreadable record" }, { err.code, err.message })
      os.remove(meta)
      assert.is_true(os.execute("mkfifo '" .. meta .. "'") == 0)
      ok, err = D.within(5000, "connect with a FIFO for meta.json", function() return sandbox.connect(id) end)
      assert.is_nil(ok)
      assert.equal("internal", err.code)
      os.remove(meta)
      assert(os.rename(real, meta))
      local again = assert(sandbox.connect(id))
      assert.equal(hostname_of(id), select(2, sh(again.envd, "cat /etc/hostname")))
      again:close()
    end)
  end)

  it("has one bounded, link-refusing read for such records (dsh.core.hostfs.read_regular)", function()
    local f = tmp .. "/record"
    helpers.write_file(f, "12345")
    assert.equal("12345", hostfs.read_regular(f, 5))
    local function refused(path, max, msg)
      local v, err = hostfs.read_regular(path, max)
      assert.is_nil(v)
      assert.same({ "io", path .. " " .. msg }, { err.code, err.message })
    end
    refused(f, 4, "is larger than 4 bytes")
    assert(lfs.link(f, tmp .. "/link", true))
    refused(tmp .. "/link", 100, "is a symbolic link")
    assert.is_true(os.execute("mkfifo '" .. tmp .. "/fifo'") == 0)
    refused(tmp .. "/fifo", 100, "is not a regular file")
    refused(tmp, 100, "is not a regular file")
    local v, err = hostfs.read_regular(tmp .. "/missing", 100)
    assert.is_nil(v)
    assert.equal("not_found", err.code)
    assert.has_error(function() hostfs.read_regular(f) end,
      "dsh.core.hostfs: read_regular: max_bytes must be a non-negative integer")
  end)
end)
