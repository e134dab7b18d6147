-- dsh.core.sysutil: host helpers return a value or true on success, and nil, err
-- (dsh.errors: NOT_FOUND, PERMISSION_DENIED, IO_ERROR) on failure, naming the
-- function and what failed; writes are checked, and a failed write leaves
-- neither the target nor a temp file behind.
local errors = require "dsh.errors"
local helpers = require "helpers"
local lfs = require "lfs"
local sys = require "dsh.core.sysutil"

local function entries(dir)
  local out = {}
  for name in lfs.dir(dir) do
    if name ~= "." and name ~= ".." then out[#out + 1] = name end
  end
  table.sort(out)
  return out
end

local function assert_err(code, message, ok, err)
  assert.is_nil(ok)
  assert.is_true(errors.is(err), "expected a dsh error, got " .. tostring(err))
  assert.equal(code, err.code)
  assert.equal(message, err.message)
end

describe("dsh.core.sysutil", function()
  local dir

  before_each(function()
    dir = helpers.tmpdir()
  end)

  after_each(function()
    assert.is_true(sys.rm_rf(dir))
    assert.is_false(sys.exists(dir))
  end)

  it("reads files, and names what is missing or unreadable", function()
    assert.is_true(sys.write_file(dir .. "/a", "alpha"))
    assert.equal("alpha", sys.read_file(dir .. "/a"))
    local s, err = sys.read_file(dir .. "/missing")
    assert_err("NOT_FOUND", "read_file: " .. dir .. "/missing: No such file or directory", s, err)
    assert.equal(2, err.errno)
    s, err = sys.read_file(dir .. "/a/b")
    assert_err("IO_ERROR", "read_file: " .. dir .. "/a/b: Not a directory", s, err)
    s, err = sys.read_file(dir)
    assert_err("IO_ERROR", "read_file: " .. dir .. ": Is a directory", s, err)
  end)

  it("writes atomically with a mode, and leaves nothing behind when it cannot", function()
    assert.is_true(sys.write_file(dir .. "/f", "one", "600"))
    assert.is_true(sys.write_file(dir .. "/f", "two", "640"))
    assert.equal("two", sys.read_file(dir .. "/f"))
    assert.equal("rw-r-----", lfs.attributes(dir .. "/f", "permissions"))
    -- the rename fails: the target is a directory that is not empty
    assert.is_true(sys.mkdir_p(dir .. "/d/x"))
    local ok, err = sys.write_file(dir .. "/d", "data")
    assert.is_nil(ok)
    assert.equal("IO_ERROR", err.code)
    assert.matches("^write_file: " .. dir:gsub("%p", "%%%0") .. "/d: ", err.message)
    -- the temp file cannot be created: its directory is missing
    ok, err = sys.write_file(dir .. "/none/f", "data")
    assert.is_nil(ok)
    assert.equal("NOT_FOUND", err.code)
    assert.matches("No such file or directory$", err.message)
    assert.same({ "d", "f" }, entries(dir))
    assert.same({ "x" }, entries(dir .. "/d"))
  end)

  it("reports a write that fails midway (a file size limit) and removes the temp file", function()
    -- SIGXFSZ ignored (inherited through exec): writes past the limit fail with EFBIG
    local script = dir .. "/w.lua"
    assert.is_true(sys.write_file(script, [[
      local sys = require "dsh.core.sysutil"
      local ok, err = sys.write_file(arg[1], string.rep("x", 200000))
      io.write(tostring(ok), "|", err and err.code or "", "|", err and err.message or "")
    ]]))
    local target = dir .. "/big"
    local p = assert(io.popen(string.format("trap '' XFSZ; ulimit -f 16; exec luajit %s %s 2>&1", script, target)))
    local out = p:read("*a")
    p:close()
    assert.equal("nil|IO_ERROR|write_file: " .. target .. ": File too large", out)
    assert.same({ "w.lua" }, entries(dir))
  end)

  it("changes modes, makes and removes trees", function()
    assert.is_true(sys.mkdir_p(dir .. "/p/q/r", "700"))
    assert.equal("rwx------", lfs.attributes(dir .. "/p/q/r", "permissions"))
    assert.is_true(sys.mkdir_p(dir .. "/p/q/r")) -- already there
    assert.is_true(sys.chmod(dir .. "/p", "500")) -- read-only: rm_rf still removes it
    assert.is_true(sys.write_file(dir .. "/p/q/file", "x"))
    assert.is_true(sys.rm_rf(dir .. "/p"))
    assert.is_false(sys.exists(dir .. "/p"))
    assert.is_true(sys.rm_rf(dir .. "/p")) -- nothing there: done
    assert_err("NOT_FOUND", "chmod: " .. dir .. "/p: No such file or directory", sys.chmod(dir .. "/p", "600"))
    assert.is_true(sys.write_file(dir .. "/file", "x"))
    assert_err("IO_ERROR", "mkdir_p: " .. dir .. "/file/sub: Not a directory", sys.mkdir_p(dir .. "/file/sub"))
  end)

  it("tells live processes from gone ones", function()
    local me = sys.getpid()
    local record = sys.pid_record()
    assert.equal(me, sys.live_pid(record))
    assert.matches("^%d+$", sys.start_time(me))
    local gone = 4194304 + 7 -- above any pid_max: never a process
    assert_err("NOT_FOUND", "start_time: no live process " .. gone, sys.start_time(gone))
    assert_err("NOT_FOUND", 'live_pid: no live process for record "' .. gone .. ' 5"', sys.live_pid(gone .. " 5"))
    assert_err("NOT_FOUND", 'live_pid: no live process for record ""', sys.live_pid(nil))
    local ok, err = sys.kill(gone, 0)
    assert_err("NOT_FOUND", "kill: " .. gone .. ": No such process", ok, err)
    assert.equal(3, err.errno)
    assert.is_true(sys.kill(me, 0))
  end)

  it("finds programs and sets the environment", function()
    assert.matches("/sh$", sys.which("sh"))
    assert_err("NOT_FOUND", "which: no dsh-no-such-program in PATH", sys.which("dsh-no-such-program"))
    assert.is_true(sys.setenv("DSH_SYSUTIL_SPEC", "v"))
    assert.equal("v", os.getenv("DSH_SYSUTIL_SPEC"))
    assert.is_true(sys.setenv("DSH_SYSUTIL_SPEC", nil))
    assert.is_nil(os.getenv("DSH_SYSUTIL_SPEC"))
    assert_err("IO_ERROR", "setenv: A=B: Invalid argument", sys.setenv("A=B", "x"))
  end)
end)
