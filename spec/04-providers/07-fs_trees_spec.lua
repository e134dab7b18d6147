-- ctx.fs's trees and watches for real, on every backend: fs-local on this
-- machine, fs-e2b in a local sandbox (dshd in bubblewrap), fs-e2b on a cloud
-- sandbox (E2B's control plane and router: the stand-in, a real dshd behind
-- it) and fs-e2b on a bare `dshd --envd-compat` (what a stock envd offers). A tree with odd
-- names, empty and read-only directories, symlinks, a hard link, modes,
-- times and a large random file goes up and comes down byte-exact: the
-- manifest (helpers.fs_tree) of both sides is the same. Watches report what
-- a shell in the same world does.
local async = require "dsh.async"
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local envd = require "dsh.envd"
local helpers = require "helpers"
local loop = require "dsh.core.loop"
local proc = require "dsh.core.proc"
local T = require "helpers.fs_tree"

local BIG = 24 * 1024 * 1024 + 12345 -- more than one upload slice, not a multiple of a block

-- bash -c script _ args... on this host: exit code, stdout, stderr.
local function host_bash(script, ...)
  local p = assert(proc.spawn { argv = { "/bin/bash", "-c", script, "_", ... },
    env = { PATH = "/usr/bin:/bin", LANG = "C.UTF-8" }, stdout = "pipe", stderr = "pipe" })
  local out = p:read_all()
  local err = p:read_all("stderr")
  local st = p:wait()
  p:close()
  return st.exit_code, out, err
end

local function shell_of(e2b)
  return function(script, ...)
    local r, err = e2b:exec({ "/bin/bash", "-c", script, "_", ... })
    if not r then return -1, "", tostring(err) end
    return r.exit_code, r.stdout, r.stderr
  end
end

-- The world of each backend: ctx (with ctx.fs), sh (bash in that world), base
-- (a directory of the world to work in), dispose.
local WORLDS = {
  { name = "fs-local", new = function()
    local dir = helpers.tmpdir()
    local ctx = helpers.start_context { { require "dsh.providers.fs_local", { root = dir } } }
    return { ctx = ctx, sh = host_bash, base = dir, dispose = function()
      assert(ctx:dispose())
      host_bash('chmod -R u+w -- "$1"; rm -rf -- "$1"', dir)
    end }
  end },
  { name = "fs-e2b on dshd", new = function()
    local ctx = helpers.start_context { { require "dsh.providers.e2b", {} }, require "dsh.providers.fs_e2b" }
    return { ctx = ctx, sh = shell_of(ctx.e2b), base = ctx.e2b.cwd, dispose = function() assert(ctx:dispose()) end }
  end },
  { name = "fs-e2b on stock envd (dshd --envd-compat)", new = function()
    local dir = helpers.tmpdir()
    local daemon = assert(proc.spawn {
      argv = { helpers.bin("dshd"), "--envd-compat", "--listen", "127.0.0.1:0", "--ready-file", dir .. "/ready" },
      env = { PATH = "/usr/local/bin:/usr/bin:/bin", HOME = dir, LANG = "C.UTF-8" }, stdout = "null", stderr = "null",
    })
    local addr = helpers.eventually(function()
      local s = helpers.read_file(dir .. "/ready")
      return s and s:sub(-1) == "\n" and (s:gsub("%s+$", ""))
    end, 5000, 5)
    assert(addr, "dshd --envd-compat did not become ready")
    local client = envd.client { url = "http://" .. addr }
    local owner = E.envd_owner(client, dir .. "/workspace")
    local ctx = helpers.start_context { owner, require "dsh.providers.fs_e2b" }
    return { ctx = ctx, sh = shell_of(ctx.e2b), base = dir .. "/workspace", dispose = function()
      local ok, err = ctx:dispose()
      daemon:terminate(1000)
      daemon:wait_quiescent()
      daemon:close()
      host_bash('chmod -R u+w -- "$1"; rm -rf -- "$1"', dir)
      assert(ok, tostring(err))
    end }
  end },
}

local function manifest(sh, dir)
  local code, out, err = sh(T.MANIFEST, dir)
  assert(code == 0, "manifest of " .. dir .. " failed: " .. tostring(err))
  return T.parse(out)
end

D.isolated_state()

local function specs(world)
  describe(world.name .. " trees and watches", function()
    before_each(helpers.snapshot)
    after_each(helpers.assert_clean)

    local function with_world(fn)
      helpers.run(function()
        local w = world.new()
        local host = helpers.tmpdir()
        local ok, err = xpcall(fn, debug.traceback, w, w.ctx.fs, host)
        host_bash('chmod -R u+w -- "$1"; rm -rf -- "$1"', host)
        w.dispose()
        if not ok then error(err, 0) end
      end)
    end

    it("uploads a tree byte-exact, reporting progress; a FIFO is skipped and named", function()
      with_world(function(w, fs, host)
        assert(host_bash(T.MAKE, host .. "/tree", tostring(BIG)) == 0)
        assert(host_bash('mkfifo -- "$1/a-fifo"', host .. "/tree") == 0)
        local seen = {}
        assert(w.sh('mkdir -p -- "$1/up/there" && printf kept > "$1/up/there/kept"', w.base) == 0)
        local sum = assert(fs:uploadTree(host .. "/tree", w.base .. "/up/there", { onProgress = function(p)
          seen[#seen + 1] = p
        end }))
        assert.same({ "a-fifo" }, sum.skipped)
        assert.equal(1, sum.hardlinks)
        assert.equal(4, sum.symlinks)
        local _, counted = host_bash([[find "$1" -type f -printf '%i %s\n' | sort -u |
          awk '{ n++; s += $2 } END { print n, s }']], host .. "/tree")
        local files, total = counted:match("^(%d+) (%d+)")
        files, total = tonumber(files), tonumber(total)
        assert.equal(14, files)
        assert.equal(total, sum.bytes)
        assert.equal(14, sum.files)
        -- progress: growing, with the totals, ending with everything
        assert.is_true(#seen >= 14 + 10) -- every file, and every MiB of the large one
        for i = 2, #seen do assert.is_true(seen[i].bytes >= seen[i - 1].bytes) end
        assert.same({ bytes = total, files = 14, totalBytes = total, totalFiles = 14 },
          { bytes = seen[#seen].bytes, files = seen[#seen].files, totalBytes = seen[1].totalBytes,
            totalFiles = seen[1].totalFiles })
        -- merged into what was there
        local _, kept = w.sh('cat -- "$1/up/there/kept" && rm -- "$1/up/there/kept"', w.base)
        assert.equal("kept", kept)
        host_bash('rm -f -- "$1/a-fifo"', host .. "/tree")
        local want, wm = manifest(host_bash, host .. "/tree")
        local got, gm = manifest(w.sh, w.base .. "/up/there")
        assert.equal(wm, gm)
        assert.equal(want, got)
      end)
    end)

    it("downloads a tree byte-exact; setuid and setgid do not reach this host", function()
      with_world(function(w, fs, host)
        local code, _, err = w.sh(T.MAKE, w.base .. "/down", tostring(BIG))
        assert(code == 0, err)
        local seen = 0
        local sum = assert(fs:downloadTree(w.base .. "/down", host .. "/copy", { onProgress = function(p)
          assert.is_nil(p.totalBytes)
          seen = p.bytes
        end }))
        assert.equal(14, sum.files)
        assert.equal(sum.bytes, seen)
        local want, wm = manifest(w.sh, w.base .. "/down")
        local got, gm = manifest(host_bash, host .. "/copy")
        assert.equal(wm, gm)
        assert.equal(want, got)
        -- setuid, setgid and the sticky bit: the first two are dropped here
        assert(w.sh('mkdir -p -- "$1" && printf x > "$1/s" && chmod 6755 -- "$1/s" && chmod 1777 -- "$1"',
          w.base .. "/setid") == 0)
        assert(fs:downloadTree(w.base .. "/setid", host .. "/setid"))
        local _, modes = host_bash('stat -c %a -- "$1" "$1/s"', host .. "/setid")
        assert.equal("1777\n755\n", modes)
      end)
    end)

    it("says what is wrong: a missing or non-directory source, a file in the way, an abort", function()
      with_world(function(w, fs, host)
        assert(w.sh('mkdir -p -- "$1/d" && printf x > "$1/file"', w.base) == 0)
        assert(host_bash('mkdir -p -- "$1/src" && printf x > "$1/src/a" && printf y > "$1/hostfile"', host) == 0)
        local function fails(code, ...)
          local v, err = ...
          assert.is_nil(v)
          assert.equal(code, err.code, err.message)
          return err.message
        end
        assert.equal('"' .. w.base .. '/nope" does not exist',
          fails("FS_NOT_FOUND", fs:downloadTree(w.base .. "/nope", host .. "/x")))
        assert.equal('"' .. w.base .. '/file" is not a directory',
          fails("FS_NOT_DIRECTORY", fs:downloadTree(w.base .. "/file", host .. "/x")))
        assert.equal('"' .. w.base .. '/file" is not a directory',
          fails("FS_NOT_DIRECTORY", fs:uploadTree(host .. "/src", w.base .. "/file")))
        fails("FS_NOT_FOUND", fs:uploadTree(host .. "/nope", w.base .. "/d"))
        assert.equal('"' .. host .. '/hostfile" is not a directory',
          fails("FS_NOT_DIRECTORY", fs:uploadTree(host .. "/hostfile", w.base .. "/d")))
        fails("FS_NOT_DIRECTORY", fs:downloadTree(w.base .. "/d", host .. "/hostfile/below"))
        local ctl = async.controller()
        ctl:abort("stop")
        fails("FS_ABORTED", fs:uploadTree(host .. "/src", w.base .. "/d", { signal = ctl.signal }))
        fails("FS_ABORTED", fs:downloadTree(w.base .. "/d", host .. "/y", { signal = ctl.signal }))
        -- a progress hook that raises stops the transfer and raises; nothing is left running or lying about
        assert(w.sh(T.MAKE, w.base .. "/big", tostring(4 * 1024 * 1024)) == 0)
        assert.has_error(function()
          fs:downloadTree(w.base .. "/big", host .. "/z", { onProgress = function() error("hook failed", 0) end })
        end, "hook failed")
        assert.has_error(function()
          fs:uploadTree(host .. "/src", w.base .. "/d", { onProgress = function() error("hook failed", 0) end })
        end, "hook failed")
        local _, left = w.sh('pgrep -x tar; ls -A -- "$1" 2>/dev/null | grep -c "^tree-.*\\.tar$"',
          w.ctx.e2b and w.ctx.e2b.runtimeRoot or "/nonexistent")
        assert.equal("0\n", left)
        assert.has_error(function() fs:uploadTree(5, "x") end,
          "dsh.fs: uploadTree: the host directory must be a non-empty path string")
        assert.has_error(function() fs:downloadTree("x", host, { onProgress = 1 }) end,
          "dsh.fs: downloadTree: opts.onProgress must be a function")
      end)
    end)

    it("watches a directory: creates, writes, renames, chmods and removes, below it too when recursive", function()
      with_world(function(w, fs)
        assert(w.sh('mkdir -p -- "$1/w/old"', w.base) == 0)
        local watch = assert(fs:watch(w.base .. "/w", { recursive = true }))
        assert(w.sh('cd -- "$1/w" && printf a > f && printf b >> f && mv f g && chmod 600 g && '
          .. 'mkdir -p new/deeper && printf c > new/deeper/x && printf d > old/y && rm g', w.base) == 0)
        -- every change, in order per name (a recursive watch may report a new directory's contents twice)
        local want = {
          { "create", "f" }, { "write", "f" }, { "rename", "f" }, { "create", "g" }, { "chmod", "g" },
          { "create", "new" }, { "create", "new/deeper" }, { "create", "new/deeper/x" }, { "create", "old/y" },
          { "write", "old/y" }, { "remove", "g" },
        }
        local got = {}
        local function has(t, n)
          for _, e in ipairs(got) do
            if e.type == t and e.name == n then return true end
          end
        end
        local deadline = loop.now_ms() + 10000
        while true do
          local missing = false
          for _, e in ipairs(want) do missing = missing or not has(e[1], e[2]) end
          if not missing then break end
          assert.is_true(loop.now_ms() < deadline, "events so far: " .. require("dsh.json").encode(got))
          local ctl = async.controller()
          local t = loop.timer(function() ctl:abort("slow") end)
          t:start(math.max(1, deadline - loop.now_ms()))
          local ev, err = watch:next(ctl.signal)
          t:close()
          if ev then
            got[#got + 1] = ev
            assert.equal(w.base .. "/w/" .. ev.name, ev.path)
          else
            assert.equal("FS_ABORTED", err and err.code)
          end
        end
        local pos = {}
        for i, e in ipairs(got) do pos[e.type .. " " .. e.name] = pos[e.type .. " " .. e.name] or i end
        assert.is_true(pos["create f"] < pos["write f"] and pos["write f"] < pos["rename f"])
        assert.is_true(pos["create g"] < pos["chmod g"] and pos["chmod g"] < pos["remove g"])
        -- an aborted next loses nothing: the event comes with the next call
        local ctl = async.controller()
        ctl:abort("now")
        local _, err = watch:next(ctl.signal)
        assert.equal("FS_ABORTED", err.code)
        assert(w.sh('printf z > "$1/w/late"', w.base) == 0)
        local ev = assert(watch:next())
        assert.same({ "create", "late" }, { ev.type, ev.name })
        watch:close()
        assert.is_nil(watch:next())
        -- not recursive: only the directory itself
        local flat = assert(fs:watch(w.base .. "/w"))
        assert(w.sh('printf q > "$1/w/new/inner-change"; printf q > "$1/w/top"', w.base) == 0)
        ev = assert(flat:next())
        assert.same({ "create", "top" }, { ev.type, ev.name })
        flat:close()
        local _, nerr = fs:watch(w.base .. "/w/late")
        assert.equal("FS_NOT_DIRECTORY", nerr.code)
        _, nerr = fs:watch(w.base .. "/missing")
        assert.equal("FS_NOT_FOUND", nerr.code)
        -- disposing ctx.fs closes the watches it made
        local last = assert(fs:watch(w.base .. "/w"))
        assert(fs:dispose())
        assert.is_nil(last:next())
      end)
    end)
  end)
end

for _, world in ipairs(WORLDS) do specs(world) end

describe("on the cloud backend", function()
  local S = E.use_standin()
  specs { name = "fs-e2b on a cloud sandbox (the E2B stand-in)", new = function()
    local ctx = helpers.start_context { { require "dsh.providers.e2b", S:config { onDispose = "kill" } },
      require "dsh.providers.fs_e2b" }
    return { ctx = ctx, sh = shell_of(ctx.e2b), base = ctx.e2b.cwd, dispose = function() assert(ctx:dispose()) end }
  end }
end)
