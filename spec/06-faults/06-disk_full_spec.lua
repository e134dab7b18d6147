-- Disk full inside the sandbox (issue 14, Faults) during an fs write, a
-- spill (collected output spilled to a file) and an upload through /files:
-- a clear error, and no partial file presented as complete. The sandbox has
-- a disk limit of 64 MiB (its /home/user and /tmp, issue 18 item 3), filled
-- up to 4 MiB by a file in /tmp; nothing of it fills the host.
local D = require "helpers.dshd"
local F = require "06-faults.support"
local helpers = require "helpers"
local sys = require "dsh.core.sysutil"

local MiB = 1048576
local BIG = 8 * MiB -- more than is left

-- Fill the sandbox's disk up to 4 MiB (a file in /tmp).
local function fill(ctx)
  local r = assert(ctx.e2b:exec { "/bin/bash", "-c",
    "avail=$(df -k --output=avail /home/user | tail -1); head -c $(( (avail - 4096) * 1024 )) /dev/zero > /tmp/filler"
    .. " && df -k --output=avail /home/user | tail -1" })
  assert.equal(0, r.exit_code, r.stderr)
  assert.is_true(tonumber(r.stdout) <= 4096, "left: " .. r.stdout)
end

local function unfill(ctx)
  assert.equal(0, assert(ctx.e2b:exec { "rm", "-f", "/tmp/filler" }).exit_code)
end

local function sh(ctx, cmd)
  local r = assert(ctx.e2b:exec { "/bin/bash", "-c", cmd })
  return r.stdout, r.exit_code
end

describe("disk full inside the sandbox", function()
  setup(function()
    assert(sys.getuid() == 0, "a disk limit needs root (a loop-mounted image): make test runs as root here")
  end)
  D.use_state() -- sandboxes left in its state directory are killed in teardown

  local function with_full_disk(fn)
    helpers.run(function()
      local ctx = F.compose { network = false, diskMb = 64 }
      local ok, err = xpcall(function()
        fill(ctx)
        fn(ctx)
        unfill(ctx)
      end, debug.traceback)
      if not ok then
        ctx:dispose()
        error(err, 0)
      end
      F.dispose(ctx)
    end)
  end

  it("an fs write fails FS_IO_ERROR saying so; the old content stays, no temporary file is left", function()
    with_full_disk(function(ctx)
      assert(ctx.fs:writeText("kept.txt", "old content"))
      local r, err = ctx.fs:writeText("kept.txt", string.rep("x", BIG))
      assert.is_nil(r)
      assert.same({ "FS_IO_ERROR", 'cannot write "/home/user/workspace/kept.txt": not enough disk space available' },
        { err.code, err.message })
      assert.equal("old content", assert(ctx.fs:readText("kept.txt")).text)
      r, err = ctx.fs:writeText("new.txt", string.rep("y", BIG))
      assert.same({ "FS_IO_ERROR" }, { err.code, r })
      assert.is_nil(ctx.fs:stat("new.txt"))
      assert.equal("kept.txt\n", (sh(ctx, "ls -A /home/user/workspace")))
      assert.equal("", (sh(ctx, "find /home/user -newer /tmp/filler -type f ! -name kept.txt")))
    end)
  end)

  it("an upload through /files fails resource_exhausted (507); no partial file is left under its name", function()
    with_full_disk(function(ctx)
      local envd = assert(ctx.e2b:getSandbox()).envd
      local big = string.rep("z", BIG)
      local r, err = envd:write_file("/home/user/up.bin", big) -- streamed (chunked)
      assert.is_nil(r)
      assert.same({ "resource_exhausted", "not enough disk space available" }, { err.code, err.message })
      r, err = envd:stat("/home/user/up.bin")
      assert.same({ "not_found" }, { err.code, r })
      -- multipart: the first file is written, the second does not fit
      r, err = envd:write_files { { path = "/home/user/small.txt", data = "small" },
        { path = "/home/user/big.bin", data = big } }
      assert.is_nil(r)
      assert.equal("resource_exhausted", err.code)
      assert.matches("not enough disk space available$", err.message)
      assert.equal("small", assert(envd:read_file("/home/user/small.txt")))
      r, err = envd:stat("/home/user/big.bin")
      assert.same({ "not_found" }, { err.code, r })
      -- over an existing file: it is truncated by the open (as envd does), and
      -- then removed rather than left cut
      assert(envd:write_file("/home/user/prev.bin", "previous"))
      r, err = envd:write_file("/home/user/prev.bin", big)
      assert.same({ "resource_exhausted" }, { err.code, r })
      r, err = envd:stat("/home/user/prev.bin")
      assert.same({ "not_found" }, { err.code, r })
      assert.is_true(tonumber((sh(ctx, "df -k --output=avail /home/user | tail -1"))) >= 4000) -- space is back
    end)
  end)

  it("a spill cut by the full disk is dropped, never presented as the full output (subprocess and Bash)", function()
    with_full_disk(function(ctx)
      local spill = { stdout = { maxBytes = 1000, spill = { maxBytes = 100 * MiB } } }
      local h = assert(ctx.subprocess:spawn { argv = { "head", "-c", tostring(BIG), "/dev/zero" }, stdio = spill })
      assert.same({ exitCode = 0 }, assert(h.done:await()))
      local page = h.stdout:readFrom(0)
      assert.same({ 1000, BIG, true }, { #page.text, page.nextOffset, page.lossy })
      assert.is_nil(page.spillPath)
      assert.equal("", (sh(ctx, "find /tmp/.dsh-e2b/processes -type f")))
      local r = assert(ctx.bash:run { command = "head -c " .. BIG .. " /dev/zero | tr '\\0' y" })
      assert.equal(0, r.exitCode)
      assert.equal(BIG, r.stdout.total)
      assert.is_nil(r.stdout.spillPath)
      assert.equal("", (sh(ctx, "find /tmp/.dsh-e2b/processes -type f")))
      -- with room again, the same spill is kept whole
      unfill(ctx)
      h = assert(ctx.subprocess:spawn { argv = { "head", "-c", tostring(BIG), "/dev/zero" }, stdio = spill })
      assert.same({ exitCode = 0 }, assert(h.done:await()))
      local path = assert(h.stdout:readFrom(0).spillPath)
      assert.equal(tostring(BIG), (sh(ctx, "stat -c %s " .. path)):match("%d+"))
      fill(ctx)
    end)
  end)
end)
