-- One sandbox cannot exhaust the host's file table, inotify or disk, nor ask
-- for more than the host has (issue 18, item 3), and sees less of the host
-- (item 4): only the /etc programs need, an empty /proc/cmdline, and no path
-- of the host's state directory or of dsh's build in /proc/self/mountinfo.
-- Small limits, so each case is quick and safe.
local D = require "helpers.dshd"
local helpers = require "helpers"
local limits = require "dsh.sandbox.limits"
local sandbox = require "dsh.sandbox"
local state = require "dsh.sandbox.state"
local sys = require "dsh.core.sysutil"

local function sh(client, script, user)
  local p = assert(client:start { cmd = "/bin/bash", args = { "-c", script }, user = user })
  local r = assert(p:wait())
  p:close()
  return r.exit_code, r.stdout, r.stderr
end

local function probe(c, ...)
  assert(c:write_file("/tmp/probe", assert(helpers.read_file(helpers.build .. "/bin/fixture-probe"))))
  local code, out, err = sh(c, "chmod 0755 /tmp/probe && /tmp/probe " .. table.concat({ ... }, " "))
  assert.same({ 0, "" }, { code, err })
  return out
end

describe("a sandbox's bounds", function()
  D.use_state()

  it("bounds open files per process (a hard limit) and the sandbox's total against fs.file-max", function()
    helpers.run(function()
      local sb = assert(sandbox.create { network = false, maxProcesses = 64, maxOpenFiles = 100 })
      finally(function() sb:kill() end)
      assert.equal(100, sb.limits.maxOpenFiles)
      -- 0, 1, 2 are open: 97 more, then EMFILE; the hard limit cannot be raised
      assert.equal("opened 97 EMFILE\n", probe(sb.envd, "nofile", "100000"))
      assert.same({ 0, "100\n100\n", "" }, { sh(sb.envd, "ulimit -Sn; ulimit -Hn") })
      local code, _, err = sh(sb.envd, "ulimit -n 1000")
      assert.equal(1, code)
      assert.matches("Operation not permitted", err)
      assert.equal(1, (sh(sb.envd, "ulimit -n 1000", "root"))) -- not by the sandbox's root either
      -- inotify: bounded per uid in the sandbox's user namespace
      local host_watches = tonumber(sys.read_file("/proc/sys/fs/inotify/max_user_watches"))
      assert.same({ 0, math.min(limits.INOTIFY_WATCHES, host_watches) .. "\n" .. limits.INOTIFY_INSTANCES .. "\n", "" },
        { sh(sb.envd, "cat /proc/sys/user/max_inotify_watches /proc/sys/user/max_inotify_instances") })
      sb:close()
    end)
    local host = limits.host()
    local ok, err = sandbox.create { network = false, maxProcesses = 4096, maxOpenFiles = 1048576 }
    assert.is_nil(ok)
    assert.equal("failed_precondition", err.code)
    assert.matches("is more than a quarter of this host's fs.file%-max %(" .. host.file_max .. "%)", err.message)
    -- the default keeps a sandbox of the default size below that quarter
    local d = limits.defaults(host)
    assert.is_true(d.maxProcesses * d.maxOpenFiles + limits.dshd_open_files(d.maxProcesses) <= host.file_max / 4)
  end)

  it("refuses memory and CPUs the host does not have, naming its figure", function()
    local host = limits.host()
    helpers.run(function()
      local ok, err = sandbox.create { network = false, memoryMb = host.memory_mb + 1 }
      assert.is_nil(ok)
      assert.same({ "failed_precondition", string.format("memoryMb %d is more than this host's memory (%d MiB)",
        host.memory_mb + 1, host.memory_mb) }, { err.code, err.message })
      ok, err = sandbox.create { network = false, cpus = host.cpus + 1 }
      assert.is_nil(ok)
      assert.same({ "failed_precondition", string.format("cpus %d is more than this host's %d CPUs", host.cpus + 1,
        host.cpus) }, { err.code, err.message })
      assert.same({}, sandbox.list())
    end)
  end)

  it("bounds the disk: ENOSPC inside at diskMb, and the host gives no more than was written", function()
    if sys.getuid() ~= 0 then
      helpers.run(function()
        local sb = assert(sandbox.create { network = false })
        assert.is_nil(sb.limits.diskMb) -- not bounded without root (README, "What is not bounded")
        sb:kill()
      end)
      return
    end
    helpers.run(function()
      local sb = assert(sandbox.create { network = false, diskMb = 64 })
      finally(function() sb:kill() end)
      assert.equal(64, sb.limits.diskMb)
      local image = state.dir(sb.id) .. "/disk.img"
      local before = require("dsh.sandbox.disk").used_bytes(state.dir(sb.id))
      local code, _, err = sh(sb.envd, "fallocate -l 1G /tmp/x")
      assert.equal(1, code)
      assert.matches("No space left on device", err)
      code, _, err = sh(sb.envd, "head -c 100000000 /dev/zero > /home/user/big")
      assert.equal(1, code)
      assert.matches("No space left on device", err)
      -- through the files API too: a clear error, no partial file
      local ok, ferr = sb.envd:write_file("/home/user/big2", string.rep("x", 80 * 1048576))
      assert.is_nil(ok)
      assert.same({ "resource_exhausted", "not enough disk space available" }, { ferr.code, ferr.message })
      -- on the host: the image holds at most what fits in it
      local used = require("dsh.sandbox.disk").used_bytes(state.dir(sb.id))
      assert.is_true(used <= 64 * 1048576 + (before or 0), "the image takes " .. used .. " bytes")
      assert.equal(64 * 1048576, require("lfs").attributes(image, "size"))
      -- and the sandbox lives on: free the space and write again
      assert.same({ 0, "ok\n", "" }, { sh(sb.envd, "rm -f /tmp/x /home/user/big; echo ok > /tmp/y && cat /tmp/y") })
    end)
  end)
end)

describe("what a sandbox sees of the host", function()
  local S = D.use_sandbox { network = false, etc = { "debconf.conf" } }

  it("gets only the /etc files programs need, and an entry its creator names", function()
    helpers.run(function()
      local c = S:test_client()
      for _, name in ipairs { "environment", "npmrc", "gitconfig", "shadow", "sudoers", "ssh" } do
        assert.equal(1, (sh(c, "test -e /etc/" .. name)), "/etc/" .. name .. " is visible")
      end
      for _, name in ipairs { "passwd", "nsswitch.conf", "ssl/certs", "ld.so.cache" } do
        assert.equal(0, (sh(c, "test -e /etc/" .. name)), "/etc/" .. name .. " is missing")
      end
      if sys.exists("/etc/debconf.conf") then
        assert.same({ 0, assert(helpers.read_file("/etc/debconf.conf")), "" }, { sh(c, "cat /etc/debconf.conf") })
      end
    end)
    assert.has_error(function() sandbox.create { etc = { "../shadow" } } end,
      'dsh.sandbox: create: etc[1] must name an entry under /etc (such as "gitconfig")')
    assert.has_error(function() sandbox.create { etc = { "passwd" } } end,
      "dsh.sandbox: create: etc[1]: /etc/passwd is the sandbox's own")
  end)

  it("shows no host path in its mounts, and no host boot arguments", function()
    helpers.run(function()
      local c = S:test_client()
      local code, mounts = sh(c, "cat /proc/self/mountinfo")
      assert.equal(0, code)
      assert.is_nil(mounts:find(sys.state_dir(), 1, true), "the state directory shows:\n" .. mounts)
      assert.is_nil(mounts:find(helpers.root, 1, true), "the project tree shows:\n" .. mounts)
      if sys.getuid() == 0 then assert.is_nil(mounts:find(helpers.build, 1, true)) end
      assert.same({ 0, "", "" }, { sh(c, "cat /proc/cmdline") })
      assert.is_truthy((sys.read_file("/proc/cmdline") or ""):find("%S")) -- the host has some
    end)
  end)
end)
