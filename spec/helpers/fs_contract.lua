--- The ctx.fs contract (reference §2.2 and the pins of §6.3), shared by every fs provider.
--
--   require("helpers.fs_contract")("fs-local", factory)
--
-- factory.new() runs inside a task and returns an env for one test:
--   env.fs                 the ctx.fs under test (its context started)
--   env.root               a fresh, empty, absolute directory in that world
--   env.sh(cmd)            run a shell command in that world -> exit code, stdout
--   env.put(path, bytes)   write a file behind the seam's back
--   env.get(path)          read a file behind the seam's back (nil when missing)
--   env.lock(path)         make replacing or removing path fail with a permission error
--   env.unlock(path)       undo lock
--   env.tag(path)          optional: the dsh-version tag stored with a file
--   env.breakTransport()   optional: make the world unreachable (transport errors)
--   env.dispose()          dispose the context and remove env.root
-- Items of §6.3 that test the reference's internals are pinned by what they
-- guarantee (step order via opts.onStep, no temp files left, versions equal).
local async = require "dsh.async"
local fsmod = require "dsh.fs"
local utf8 = require "dsh.core.utf8"
local helpers = require "helpers"

local function q(s)
  return "'" .. s:gsub("'", [['\'']]) .. "'"
end

-- Shell-built helpers every env shares.
local function extend(env)
  local function sh(cmd)
    local code, out = env.sh(cmd)
    assert(code == 0, "sh failed (" .. tostring(code) .. "): " .. cmd .. "\n" .. tostring(out))
    return out
  end
  env.run = sh
  env.mode = function(p) return (sh("stat -c %a -- " .. q(p)):gsub("%s+$", "")) end
  env.symlink = function(target, link) sh("ln -s -- " .. q(target) .. " " .. q(link)) end
  env.mkdir = function(p) sh("mkdir -p -- " .. q(p)) end
  env.mkfifo = function(p) sh("mkfifo -- " .. q(p)) end
  env.rm = function(p) sh("rm -rf -- " .. q(p)) end
  env.chmod = function(p, m) sh("chmod " .. m .. " -- " .. q(p)) end
  env.real = function(p) return (sh("realpath -m -- " .. q(p)):gsub("\n$", "")) end
  env.names = function(dir)
    local out = {}
    for name in sh("ls -A -- " .. q(dir)):gmatch("[^\n]+") do out[#out + 1] = name end
    table.sort(out)
    return out
  end
  return env
end

return function(name, factory)
  -- busted's describe/it/assert live in the calling spec's environment
  setfenv(1, getfenv(2))
  describe(name .. " (fs contract)", function()
    before_each(helpers.snapshot)
    after_each(helpers.assert_clean)

    local function with_env(fn)
      return function()
        helpers.run(function()
          local env = extend(factory.new())
          local ok, err = pcall(fn, env, env.fs, env.root)
          env.dispose()
          if not ok then error(err, 0) end
        end)
      end
    end

    local function test(title, fn)
      it(title, with_env(fn))
    end

    local function fails(code, message, v, err)
      assert.is_nil(v, "expected a failure, got a value")
      assert.is_table(err, "expected an error value")
      assert.equal(code, err.code, "error: " .. tostring(err))
      if message then
        if message:sub(1, 1) == "^" then
          assert.matches(message, err.message)
        else
          assert.equal(message, err.message)
        end
      end
    end

    local function no_temps(env, dir)
      for _, n in ipairs(env.names(dir)) do
        assert.is_nil(n:match("%.dsh%-.*%.tmp$"), "temp file left behind: " .. n)
      end
    end

    -- every piece of a stream (asserting no error), closing it
    local function pieces(s)
      local out = {}
      while true do
        local piece, err = s:next()
        assert.is_nil(err)
        if not piece then break end
        out[#out + 1] = piece
      end
      s:close()
      return out
    end

    local function steps_of(list)
      return function(step) list[#list + 1] = step end
    end

    local function pesc(s)
      return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"))
    end

    describe("resolution", function()
      test("resolves a symlink: targetKey = target, displayPath = link (§6.3.1)", function(env, fs, root)
        env.put(root .. "/real.txt", "hello")
        env.symlink("real.txt", root .. "/link.txt")
        local r = assert(fs:resolve(root .. "/link.txt"))
        assert.equal(root .. "/link.txt", r.displayPath)
        assert.equal(env.real(root .. "/real.txt"), r.targetKey)
        env.mkdir(root .. "/realdir")
        env.symlink("realdir", root .. "/d")
        r = assert(fs:resolve("d/new/../f.txt", { cwd = root }))
        assert.equal(root .. "/d/f.txt", r.displayPath)
        assert.equal(env.real(root) .. "/realdir/f.txt", r.targetKey)
      end)

      test("resolves relative paths against opts.cwd, lexically, missing or not", function(env, fs, root)
        local r = assert(fs:resolve("a/./b/../../missing/x", { cwd = root .. "/sub/.." }))
        assert.equal(root .. "/missing/x", r.displayPath)
        assert.equal(env.real(root) .. "/missing/x", r.targetKey)
        assert.equal(root, assert(fs:resolve(root .. "//")).displayPath)
      end)

      test("resolves a symlink loop as realpath -m, then fails on it (§6.3.22)", function(env, fs, root)
        env.symlink("b", root .. "/a")
        env.symlink("a", root .. "/b")
        assert.equal(env.real(root .. "/a"), assert(fs:resolve(root .. "/a")).targetKey)
        assert.equal(env.real(root .. "/a/x"), assert(fs:resolve(root .. "/a/x")).targetKey)
        local loop = "^.*[Tt]oo many levels of symbolic links$"
        fails("FS_IO_ERROR", '^cannot stat "' .. pesc(root) .. '/a": ', fs:stat(root .. "/a"))
        fails("FS_IO_ERROR", loop, fs:readText(root .. "/a"))
        fails("FS_IO_ERROR", loop, fs:writeText(root .. "/a", "x"))
        fails("FS_IO_ERROR", '^cannot write "' .. pesc(root) .. '/a/x": .*[Tt]oo many levels of symbolic',
          fs:writeText(root .. "/a/x", "x"))
        assert.equal("symlink", assert(fs:lstat(root .. "/a")).type)
      end)

      test("answers FS_NOT_FOUND for blank paths (§6.3.10)", function(env, fs, root)
        local msg = "file_path must be a non-empty string"
        for _, p in ipairs { "", "   ", "\t\n" } do
          fails("FS_NOT_FOUND", msg, fs:resolve(p))
          fails("FS_NOT_FOUND", msg, fs:stat(p))
          fails("FS_NOT_FOUND", msg, fs:lstat(p))
          fails("FS_NOT_FOUND", msg, fs:listDir(p))
          fails("FS_NOT_FOUND", msg, fs:readText(p))
          fails("FS_NOT_FOUND", msg, fs:readTextStream(p))
          fails("FS_NOT_FOUND", msg, fs:readBytes(p))
          fails("FS_NOT_FOUND", msg, fs:writeText(p, "x"))
          fails("FS_NOT_FOUND", msg, fs:writeBytes(p, "x"))
          fails("FS_NOT_FOUND", msg, fs:editText(p, { oldString = "a", newString = "b" }))
          fails("FS_NOT_FOUND", msg, fs:processPath(p))
          fails("FS_NOT_FOUND", msg, fs:fileUrl(p))
          fails("FS_NOT_FOUND", msg, fs:contains(root, p))
        end
        fails("FS_NOT_FOUND", "file_path must not contain a NUL byte", fs:writeText(root .. "/a\0b", "x"))
        assert.is_nil(env.get(root .. "/a"))
      end)

      test("raises on misuse, naming the module", function(_, fs, root)
        local ok, err = pcall(fs.stat, fs, nil)
        assert.is_false(ok)
        assert.matches("dsh.fs: stat: path must be a string, got nil", err)
        ok, err = pcall(fs.writeText, fs, root .. "/x", 42)
        assert.is_false(ok)
        assert.matches("dsh.fs: writeText: content must be a string, got number", err)
        ok, err = pcall(fs.readText, fs, root .. "/x", { signal = {} })
        assert.is_false(ok)
        assert.matches("opts.signal must be a dsh.async signal", err)
      end)
    end)

    describe("metadata", function()
      test("types entries with lstat and stat (§6.3.2)", function(env, fs, root)
        env.put(root .. "/real.txt", "hello")
        env.symlink("real.txt", root .. "/link")
        env.mkdir(root .. "/dir")
        env.mkfifo(root .. "/fifo")
        local l = assert(fs:lstat(root .. "/link"))
        assert.equal("symlink", l.type)
        assert.equal(#"real.txt", l.size)
        local f = assert(fs:lstat(root .. "/real.txt"))
        assert.same({ "file", 5 }, { f.type, f.size })
        assert.equal("directory", assert(fs:lstat(root .. "/dir")).type)
        assert.is_nil(assert(fs:lstat(root .. "/dir")).size)
        assert.equal("other", assert(fs:lstat(root .. "/fifo")).type)
        local none, err = fs:lstat(root .. "/missing")
        assert.is_nil(none)
        assert.is_nil(err)
        local s = assert(fs:stat(root .. "/link"))
        assert.same({ "file", 5 }, { s.type, s.size })
        assert.equal(assert(fs:stat(root .. "/real.txt")).version, s.version)
        assert.equal("other", assert(fs:stat(root .. "/fifo")).type)
        assert.equal("directory", assert(fs:stat(root .. "/dir")).type)
        none, err = fs:stat(root .. "/missing/deeper")
        assert.is_nil(none)
        assert.is_nil(err)
      end)

      test("gives deterministic versions prefixed by the backend kind", function(env, fs, root)
        env.put(root .. "/f", "x")
        local a, b = assert(fs:stat(root .. "/f")), assert(fs:stat(root .. "/f"))
        assert.equal(a.version, b.version)
        assert.matches("^" .. fs.kind .. ":%x+$", a.version)
      end)
    end)

    describe("listDir", function()
      test("lists direct children in byte order; links report their target (§6.3.3)", function(env, fs, root)
        for _, n in ipairs { "b.txt", "B.txt", "_x", "a", "\xc3\xa9.txt" } do env.put(root .. "/" .. n, n) end
        env.mkdir(root .. "/sub")
        env.put(root .. "/sub/inner.txt", "deep")
        env.symlink("sub", root .. "/ln")
        local list = assert(fs:listDir(root))
        local names = {}
        for i, e in ipairs(list) do names[i] = e.name end
        assert.same({ "B.txt", "_x", "a", "b.txt", "ln", "sub", "\xc3\xa9.txt" }, names)
        local by = {}
        for _, e in ipairs(list) do by[e.name] = e end
        assert.equal("directory", by.ln.type)
        assert.equal(env.real(root .. "/sub"), by.ln.target)
        assert.equal(by.sub.version, by.ln.version)
        assert.equal("file", by["b.txt"].type)
        assert.equal(5, by["b.txt"].size)
        assert.equal(env.real(root .. "/b.txt"), by["b.txt"].target)
        assert.equal(assert(fs:stat(root .. "/b.txt")).version, by["b.txt"].version)
        assert.is_nil(by["inner.txt"])
        assert.is_nil(by.sub.size)
      end)

      test("reports a child that vanished as {name, type='other', target} (§6.3.23)", function(env, fs, root)
        env.symlink("nowhere", root .. "/gone")
        local list = assert(fs:listDir(root))
        assert.same({ { name = "gone", type = "other", target = env.real(root) .. "/nowhere" } }, list)
      end)

      test("fails on a missing path or a file (§6.3.10)", function(env, fs, root)
        env.put(root .. "/f", "x")
        fails("FS_NOT_FOUND", '"' .. root .. '/nope" does not exist', fs:listDir(root .. "/nope"))
        fails("FS_NOT_DIRECTORY", '"' .. root .. '/f" is not a directory', fs:listDir(root .. "/f"))
      end)
    end)

    describe("reads", function()
      test("reads text and bytes with the stat version", function(env, fs, root)
        env.put(root .. "/t.txt", "h\xc3\xa9llo\r\n")
        local r = assert(fs:readText(root .. "/t.txt"))
        assert.equal("h\xc3\xa9llo\r\n", r.text)
        assert.equal(assert(fs:stat(root .. "/t.txt")).version, r.version)
        local all = {}
        for i = 0, 255 do all[#all + 1] = string.char(i) end
        env.put(root .. "/b.bin", table.concat(all))
        local b = assert(fs:readBytes(root .. "/b.bin"))
        assert.equal(table.concat(all), b.data)
        assert.equal(assert(fs:stat(root .. "/b.bin")).version, b.version)
      end)

      test("refuses binary, invalid UTF-8, missing files and directories (§6.3.7)", function(env, fs, root)
        env.put(root .. "/nul", "\0\1")
        env.put(root .. "/ff", "\255")
        env.mkdir(root .. "/dir")
        fails("FS_NOT_TEXT", '"' .. root .. '/nul" is not text (NUL byte at offset 0)',
          fs:readText(root .. "/nul"))
        fails("FS_NOT_TEXT", '"' .. root .. '/ff" is not valid UTF-8', fs:readText(root .. "/ff"))
        fails("FS_NOT_FOUND", '"' .. root .. '/missing" does not exist', fs:readText(root .. "/missing"))
        fails("FS_NOT_REGULAR_FILE", '"' .. root .. '/dir" is not a regular file',
          fs:readText(root .. "/dir"))
        fails("FS_NOT_REGULAR_FILE", nil, fs:readBytes(root .. "/dir"))
        assert.equal("\0\1", assert(fs:readBytes(root .. "/nul")).data)
      end)

      test("reads a NUL at byte 8192 as text, but editText refuses it (§6.3.6)", function(env, fs, root)
        local content = ("a"):rep(8192) .. "\0z"
        env.put(root .. "/late", content)
        assert.equal(content, assert(fs:readText(root .. "/late")).text)
        assert.equal(content, table.concat(pieces(assert(fs:readTextStream(root .. "/late")))))
        fails("FS_NOT_TEXT", '"' .. root .. '/late" is not text (NUL byte at offset 8192)',
          fs:editText(root .. "/late", { oldString = "z", newString = "y" }))
        env.put(root .. "/early", ("a"):rep(8191) .. "\0z")
        fails("FS_NOT_TEXT", '"' .. root .. '/early" is not text (NUL byte at offset 8191)',
          fs:readText(root .. "/early"))
      end)

      test("fails streams of [ff], [00] and [e2] with FS_NOT_TEXT (§6.3.8)", function(env, fs, root)
        for file, bytes in pairs { ff = "\255", nul = "\0", e2 = "\226" } do
          env.put(root .. "/" .. file, bytes)
          local s = assert(fs:readTextStream(root .. "/" .. file))
          fails("FS_NOT_TEXT", nil, s:next())
          fails("FS_NOT_TEXT", nil, s:next()) -- the failure sticks
          s:close()
        end
        local s = assert(fs:readTextStream(root .. "/e2"))
        fails("FS_NOT_TEXT", '"' .. root .. '/e2" is not valid UTF-8 (it ends inside a character)', s:next())
        s:close()
      end)

      test("fails a file that vanishes after stat with FS_NOT_FOUND (§6.3.8)", function(env, fs, root)
        env.put(root .. "/v", "soon gone")
        local s, err = fs:readTextStream(root .. "/v", {
          onStep = function(step) if step == "stat" then env.rm(root .. "/v") end end,
        })
        fails("FS_NOT_FOUND", '^cannot read "' .. pesc(root) .. '/v": ', s, err)
      end)

      test("never splits a code point across stream pieces (§6.3.4)", function(env, fs, root)
        local saved = fsmod.CHUNK_BYTES
        local ok, err = pcall(function()
          fsmod.CHUNK_BYTES = 1 -- one byte per read where the backend honours it
          for _, content in ipairs { "A\xe2\x82\xacB", "\xe2\x82\xac", "\xf0\x9f\x98\x80!" } do
            env.put(root .. "/s", content)
            local s = assert(fs:readTextStream(root .. "/s"))
            local parts = {}
            while true do
              local piece, perr = s:next()
              assert.is_nil(perr)
              if not piece then break end
              assert.is_true(utf8.validate(piece))
              parts[#parts + 1] = piece
            end
            s:close()
            assert.equal(content, table.concat(parts))
          end
        end)
        fsmod.CHUNK_BYTES = saved
        assert(ok, err)
        local big = ("a\xe2\x82\xac"):rep(50000) .. "\xc3\xa9"
        env.put(root .. "/big", big)
        local parts = pieces(assert(fs:readTextStream(root .. "/big")))
        for _, piece in ipairs(parts) do assert.is_true(utf8.validate(piece)) end
        assert.equal(big, table.concat(parts))
      end)

      test("cancels the transfer when a stream is closed early (§6.3.5)", function(env, fs, root)
        env.put(root .. "/large", ("0123456789abcdef"):rep(256 * 1024)) -- 4 MiB
        local s = assert(fs:readTextStream(root .. "/large"))
        assert.is_string(s:next())
        s:close()
        s:close()
        assert.matches("closed", tostring(s))
        local ok, err = pcall(s.next, s)
        assert.is_false(ok)
        assert.matches("dsh.fs: next: the stream is closed", err)
      end)

      test("fails pre-aborted calls and aborted streams: FS_ABORTED (§6.3.9)", function(env, fs, root)
        env.put(root .. "/f", ("x"):rep(200000))
        local ctl = async.controller()
        ctl:abort()
        local o = { signal = ctl.signal }
        fails("FS_ABORTED", "resolve aborted", fs:resolve(root .. "/f", o))
        fails("FS_ABORTED", "lstat aborted", fs:lstat(root .. "/f", o))
        fails("FS_ABORTED", "stat aborted", fs:stat(root .. "/f", o))
        fails("FS_ABORTED", "list aborted", fs:listDir(root, o))
        fails("FS_ABORTED", "read aborted", fs:readText(root .. "/f", o))
        fails("FS_ABORTED", "read aborted", fs:readBytes(root .. "/f", o))
        fails("FS_ABORTED", "write aborted", fs:writeText(root .. "/f", "y", o))
        fails("FS_ABORTED", "edit aborted",
          fs:editText(root .. "/f", { oldString = "x", newString = "y", replaceAll = true }, o))
        fails("FS_ABORTED", "resolve aborted", fs:contains(root, root .. "/f", o))
        local live = async.controller()
        local s = assert(fs:readTextStream(root .. "/f", { signal = live.signal }))
        assert.is_string(s:next())
        live:abort()
        fails("FS_ABORTED", "read aborted", s:next())
        s:close()
        assert.equal(("x"):rep(200000), env.get(root .. "/f"))
      end)
    end)

    describe("writeText", function()
      test("creates verbatim, mode 0600, committed version (§6.3.11, §6.3.17)", function(env, fs, root)
        local p = root .. "/new.txt"
        local steps, temp = {}, nil
        local w = assert(fs:writeText(p, "one\r\ntwo\rthree", {
          onStep = function(step, d) steps[#steps + 1] = step; temp = temp or d.temp end,
        }))
        assert.equal("create", w.operation)
        assert.is_nil(w.before)
        assert.equal("one\ntwo\rthree", w.after)
        assert.equal("one\r\ntwo\rthree", env.get(p))
        assert.equal("600", env.mode(p))
        local st = assert(fs:stat(p))
        assert.equal(w.version, st.version)
        assert.equal(14, st.size)
        assert.same({ "stat", "written", "chmodded", "renamed" }, steps)
        local real = env.real(root)
        assert.matches("^" .. pesc(real) .. "/%.new%.txt%.dsh%-%x+%-%x+%-4%x+%-[89ab]%x+%-%x+%.tmp$", temp)
        if env.tag then assert.matches("^%x+%-%x+%-4%x+%-[89ab]%x+%-%x+$", env.tag(p)) end
        no_temps(env, root)
      end)

      test("replaces keeping the mode; external changes alter versions (§6.3.12)", function(env, fs, root)
        local p = root .. "/old.txt"
        env.put(p, "old\r\nline\rlone")
        env.chmod(p, "640")
        local steps = {}
        local w = assert(fs:writeText(p, "new\r\n", { onStep = steps_of(steps) }))
        assert.equal("update", w.operation)
        assert.equal("old\nline\rlone", w.before)
        assert.equal("new\n", w.after)
        assert.equal("new\r\n", env.get(p))
        assert.equal("640", env.mode(p))
        assert.same({ "stat", "read", "written", "chmodded", "renamed" }, steps)
        assert.equal(w.version, assert(fs:stat(p)).version)
        env.put(p, "changed by someone else")
        local v2 = assert(fs:stat(p)).version
        assert.are_not.equal(w.version, v2)
        env.chmod(p, "600")
        assert.are_not.equal(v2, assert(fs:stat(p)).version)
      end)

      test("reports before = nil for binary or invalid old content (§6.3.13)", function(env, fs, root)
        env.put(root .. "/ff", "\255")
        local w = assert(fs:writeText(root .. "/ff", "text"))
        assert.equal("update", w.operation)
        assert.is_nil(w.before)
        env.put(root .. "/late", ("a"):rep(9000) .. "\0")
        assert.is_nil(assert(fs:writeText(root .. "/late", "text")).before)
        assert.equal("text", env.get(root .. "/late"))
      end)

      test("fails, target untouched, when the old content is unreadable (§6.3.14)", function(env, fs, root)
        local p = root .. "/f"
        env.put(p, "x")
        local v, err = fs:writeText(p, "y", {
          onStep = function(step)
            if step == "stat" then env.rm(p) env.mkdir(p) end
          end,
        })
        fails("FS_IO_ERROR", '^cannot write "' .. pesc(p) .. '": ', v, err)
        assert.same({}, env.names(p))
        no_temps(env, root)
      end)

      test("enforces createIfAbsent, replaceIfVersion and regular targets (§6.3.15)", function(env, fs, root)
        local p = root .. "/g.txt"
        local c = assert(fs:writeText(p, "v1", { createIfAbsent = true }))
        assert.equal("create", c.operation)
        fails("FS_NOT_OBSERVED", '"' .. p .. '" already exists; read it before overwriting it',
          fs:writeText(p, "v2", { createIfAbsent = true }))
        fails("FS_STALE_VERSION", '"' .. p .. '" has changed since it was read',
          fs:writeText(p, "v2", { replaceIfVersion = "local:stale" }))
        fails("FS_STALE_VERSION", '"' .. root .. '/none" no longer exists',
          fs:writeText(root .. "/none", "v2", { replaceIfVersion = c.version }))
        env.mkdir(root .. "/dir")
        fails("FS_NOT_REGULAR_FILE", '"' .. root .. '/dir" is not a regular file',
          fs:writeText(root .. "/dir", "x"))
        local u = assert(fs:writeText(p, "v2", { replaceIfVersion = c.version }))
        assert.equal("update", u.operation)
        assert.equal("v1", u.before)
        assert.equal("v2", env.get(p))
        assert.is_nil(env.get(root .. "/none"))
      end)

      test("creates missing parents and writes through symlinks", function(env, fs, root)
        assert.equal("create", assert(fs:writeText(root .. "/a/b/c.txt", "deep")).operation)
        assert.equal("deep", env.get(root .. "/a/b/c.txt"))
        env.put(root .. "/target.txt", "t")
        env.symlink("target.txt", root .. "/via")
        local w = assert(fs:writeText(root .. "/via", "through"))
        assert.equal("update", w.operation)
        assert.equal("symlink", assert(fs:lstat(root .. "/via")).type)
        assert.equal("through", env.get(root .. "/target.txt"))
        assert.equal(w.version, assert(fs:stat(root .. "/target.txt")).version)
      end)

      test("commits despite an abort after the rename, not before it (§6.3.16)", function(env, fs, root)
        local ctl = async.controller()
        local w = assert(fs:writeText(root .. "/late-abort", "kept", {
          signal = ctl.signal,
          onStep = function(step) if step == "renamed" then ctl:abort() end end,
        }))
        assert.equal("create", w.operation)
        assert.equal("kept", env.get(root .. "/late-abort"))
        for _, at in ipairs { "stat", "written", "chmodded" } do
          local c = async.controller()
          fails("FS_ABORTED", "write aborted", fs:writeText(root .. "/early-" .. at, "x", {
            signal = c.signal,
            onStep = function(step) if step == at then c:abort() end end,
          }))
          assert.is_nil(env.get(root .. "/early-" .. at))
        end
        no_temps(env, root)
      end)

      test("maps commit failures and removes the temp file (§6.3.18)", function(env, fs, root)
        -- chmod fails: the temp vanished under it
        local p = root .. "/c.txt"
        fails("FS_IO_ERROR", '^cannot write "' .. pesc(p) .. '": ', fs:writeText(p, "x", {
          onStep = function(step, d) if step == "written" then env.rm(d.temp) end end,
        }))
        assert.is_nil(env.get(p))
        no_temps(env, root)
        -- rename refused
        env.put(p, "original")
        local v, err = fs:writeText(p, "x", {
          onStep = function(step) if step == "chmodded" then env.lock(p) end end,
        })
        env.unlock(p)
        fails("FS_PERMISSION_DENIED", '^cannot write "' .. pesc(p) .. '": .*', v, err)
        local low = err.message:lower()
        assert.is_truthy(low:find("permission denied", 1, true)
          or low:find("operation not permitted", 1, true))
        assert.equal("original", env.get(p))
        for _, n in ipairs(env.names(root)) do
          if n:match("%.tmp$") then env.rm(root .. "/" .. n) end
        end
        -- aborted, and the cleanup fails too
        local ctl, temp = async.controller(), nil
        v, err = fs:writeText(p, "x", {
          signal = ctl.signal,
          onStep = function(step, d)
            if step == "chmodded" then
              temp = d.temp
              ctl:abort()
              env.lock(d.temp)
            end
          end,
        })
        env.unlock(temp)
        fails("FS_ABORTED", "write aborted", v, err)
        assert.equal("original", env.get(p))
        env.rm(temp)
        no_temps(env, root)
      end)

      test("propagates an error raised by onStep after removing the temp file", function(env, fs, root)
        local ok, err = pcall(fs.writeText, fs, root .. "/h", "x", {
          onStep = function(step) if step == "written" then error("hook bug", 0) end end,
        })
        assert.is_false(ok)
        assert.equal("hook bug", err)
        no_temps(env, root)
        assert.equal("create", assert(fs:writeText(root .. "/h", "x")).operation) -- the lock was released
      end)

      test("writes and reads bytes verbatim with the same guards", function(env, fs, root)
        local all = {}
        for i = 255, 0, -1 do all[#all + 1] = string.char(i) end
        local data = table.concat(all)
        local w = assert(fs:writeBytes(root .. "/b.bin", data, { createIfAbsent = true }))
        assert.same({ "create", "600" }, { w.operation, env.mode(root .. "/b.bin") })
        assert.equal(data, env.get(root .. "/b.bin"))
        local r = assert(fs:readBytes(root .. "/b.bin"))
        assert.same({ data, w.version }, { r.data, r.version })
        fails("FS_NOT_OBSERVED", nil, fs:writeBytes(root .. "/b.bin", "x", { createIfAbsent = true }))
        fails("FS_STALE_VERSION", nil, fs:writeBytes(root .. "/b.bin", "x", { replaceIfVersion = "e2b:x" }))
        local u = assert(fs:writeBytes(root .. "/b.bin", "x", { replaceIfVersion = w.version }))
        assert.equal("update", u.operation)
      end)
    end)

    describe("editText", function()
      test("matches on LF text and restores CRLF files (§6.3.19)", function(env, fs, root)
        local p = root .. "/crlf.txt"
        env.put(p, "one\r\ntwo\r\nthree\n")
        env.chmod(p, "640")
        local v = assert(fs:stat(p)).version
        local e = assert(fs:editText(p, { oldString = "two\r\n", newString = "TWO\r\n", version = v }))
        assert.equal("update", e.operation)
        assert.equal("one\ntwo\nthree\n", e.before)
        assert.equal("one\nTWO\nthree\n", e.after)
        assert.equal("one\r\nTWO\r\nthree\r\n", env.get(p))
        assert.equal("640", env.mode(p))
        assert.equal(e.version, assert(fs:stat(p)).version)
        env.put(p, "a\nb\r\nc\n")
        assert(fs:editText(p, { oldString = "b", newString = "B" }))
        assert.equal("a\nB\nc\n", env.get(p))
      end)

      test("guards matching and versions (§6.3.20)", function(env, fs, root)
        local p = root .. "/aa.txt"
        env.put(p, "a a")
        local v = assert(fs:stat(p)).version
        fails("FS_EDIT_NOT_FOUND", "old_string must be non-empty",
          fs:editText(p, { oldString = "", newString = "x", version = v }))
        fails("FS_EDIT_NOT_FOUND", 'old_string not found in "' .. p .. '"',
          fs:editText(p, { oldString = "z", newString = "x", version = v }))
        fails("FS_AMBIGUOUS_EDIT", "old_string matched 2 times",
          fs:editText(p, { oldString = "a", newString = "x", version = v }))
        local e = assert(fs:editText(p, { oldString = "a", newString = "x", replaceAll = true, version = v }))
        assert.same({ "x x", 2 }, { env.get(p), e.replacements })
        fails("FS_STALE_VERSION", '"' .. p .. '" has changed since it was read',
          fs:editText(p, { oldString = "x", newString = "y", version = v }))
        fails("FS_STALE_VERSION", '"' .. root .. '/missing" no longer exists',
          fs:editText(root .. "/missing", { oldString = "x", newString = "y", version = v }))
        -- missing: the same stale code with or without a version (§2.2, §6.3.20)
        fails("FS_STALE_VERSION", '"' .. root .. '/missing" does not exist',
          fs:editText(root .. "/missing", { oldString = "x", newString = "y" }))
        env.mkdir(root .. "/dir")
        fails("FS_NOT_REGULAR_FILE", '"' .. root .. '/dir" is not a regular file',
          fs:editText(root .. "/dir", { oldString = "x", newString = "y", version = v }))
        env.put(root .. "/ff", "\255x")
        fails("FS_NOT_TEXT", nil, fs:editText(root .. "/ff", { oldString = "x", newString = "y" }))
      end)

      test("replaces the first of overlapping matches", function(env, fs, root)
        env.put(root .. "/o", "aaa")
        assert(fs:editText(root .. "/o", { oldString = "aa", newString = "X" }))
        assert.equal("Xa", env.get(root .. "/o"))
      end)

      test("lets one of a write and an edit racing on a version win (§6.3.21)", function(env, fs, root)
        local p = root .. "/race.txt"
        env.put(p, "base")
        local v = assert(fs:stat(p)).version
        -- each yields after its checks, so the other runs in between
        local yield = { onStep = function(step) if step == "stat" then async.sleep(5) end end }
        local w = async.run(function()
          return fs:writeText(p, "written", { replaceIfVersion = v, onStep = yield.onStep })
        end)
        local e = async.run(function()
          return fs:editText(p, { oldString = "base", newString = "edited", version = v }, yield)
        end)
        local wr, werr = w:await()
        local er, eerr = e:await()
        assert.is_true((wr ~= nil) ~= (er ~= nil), "exactly one must succeed")
        local loser = werr or eerr
        assert.equal("FS_STALE_VERSION", loser.code)
        assert.equal(wr and "written" or "edited", env.get(p))
        no_temps(env, root)
        -- unguarded writes both land, one after the other
        local a = async.run(function() return fs:writeText(p, "A", yield) end)
        local b = async.run(function() return fs:writeText(p, "B", yield) end)
        local ra, rb = assert(a:await()), assert(b:await())
        -- whichever reached the lock second saw the first one's content
        local last = rb.before == "A" and rb or ra
        assert.is_true(rb.before == "A" or ra.before == "B")
        assert.equal(last == rb and "B" or "A", env.get(p))
        assert.equal(last.version, assert(fs:stat(p)).version)
        assert.are_not.equal(ra.version, rb.version)
      end)
    end)

    describe("directories", function()
      test("makeDir makes missing parents; a directory there is success, anything else is not",
        function(env, fs, root)
          assert.same({ created = true }, fs:makeDir(root .. "/a/b/c"))
          assert.equal("directory", assert(fs:stat(root .. "/a/b/c")).type)
          assert.same({ created = false }, fs:makeDir(root .. "/a/b/c"))
          assert.same({ created = false }, fs:makeDir(root .. "/a"))
          -- relative to opts.cwd, and through a symlink to a directory
          assert.same({ created = true }, fs:makeDir("rel/x", { cwd = root }))
          assert.equal("directory", assert(fs:stat(root .. "/rel/x")).type)
          env.symlink("a/b", root .. "/ln")
          assert.same({ created = false }, fs:makeDir(root .. "/ln/c"))
          assert.same({ created = true }, fs:makeDir(root .. "/ln/d"))
          assert.equal("directory", assert(fs:stat(root .. "/a/b/d")).type)
          env.put(root .. "/file", "x")
          fails("FS_NOT_DIRECTORY", '"' .. root .. '/file" exists and is not a directory',
            fs:makeDir(root .. "/file"))
          fails("FS_IO_ERROR", '^cannot create directory "' .. pesc(root) .. '/file/sub": ',
            fs:makeDir(root .. "/file/sub"))
          assert.equal("x", env.get(root .. "/file"))
          fails("FS_NOT_FOUND", "file_path must be a non-empty string", fs:makeDir(" "))
          local ctl = async.controller()
          ctl:abort()
          fails("FS_ABORTED", "create directory aborted", fs:makeDir(root .. "/never", { signal = ctl.signal }))
          assert.is_nil(fs:stat(root .. "/never"))
        end)

      test("remove removes a file, a symlink (not its target) and an empty directory", function(env, fs, root)
        env.put(root .. "/f", "x")
        env.mkdir(root .. "/target")
        env.put(root .. "/target/kept", "kept")
        env.symlink("target", root .. "/link")
        env.mkdir(root .. "/empty")
        assert.is_true(fs:remove(root .. "/f"))
        assert.is_nil(env.get(root .. "/f"))
        assert.is_true(fs:remove("link", { cwd = root }))
        assert.is_nil(fs:lstat(root .. "/link"))
        assert.equal("kept", env.get(root .. "/target/kept"))
        assert.is_true(fs:remove(root .. "/empty"))
        assert.is_nil(fs:stat(root .. "/empty"))
        fails("FS_NOT_FOUND", '"' .. root .. '/f" does not exist', fs:remove(root .. "/f"))
        fails("FS_PERMISSION_DENIED", 'cannot remove "/"', fs:remove("/"))
        fails("FS_PERMISSION_DENIED", 'cannot remove "/"', fs:remove(root .. "/../../../../../.."))
        assert.has_error(function() fs:remove(root .. "/x", { recursive = "yes" }) end,
          "dsh.fs: remove: opts.recursive must be a boolean")
      end)

      test("remove refuses a directory with entries unless recursive, which never follows links",
        function(env, fs, root)
          env.mkdir(root .. "/outside")
          env.put(root .. "/outside/precious", "p")
          env.mkdir(root .. "/tree/a/b")
          env.put(root .. "/tree/a/b/f", "f")
          env.put(root .. "/tree/top", "t")
          env.symlink(root .. "/outside", root .. "/tree/a/out")
          fails("FS_DIRECTORY_NOT_EMPTY",
            '"' .. root .. '/tree" is a directory that is not empty; remove it with recursive = true',
            fs:remove(root .. "/tree"))
          assert.equal("t", env.get(root .. "/tree/top"))
          assert.is_true(fs:remove(root .. "/tree", { recursive = true }))
          assert.is_nil(fs:lstat(root .. "/tree"))
          assert.equal("p", env.get(root .. "/outside/precious"))
          -- a file needs no recursive, and recursive on a file is fine
          env.put(root .. "/g", "g")
          assert.is_true(fs:remove(root .. "/g", { recursive = true }))
        end)

      test("remove maps a refusal of the world to FS_PERMISSION_DENIED", function(env, fs, root)
        env.put(root .. "/locked", "x")
        env.lock(root .. "/locked")
        local ok, err = fs:remove(root .. "/locked")
        env.unlock(root .. "/locked")
        fails("FS_PERMISSION_DENIED", '^cannot remove "' .. pesc(root) .. '/locked": ', ok, err)
        assert.equal("x", env.get(root .. "/locked"))
      end)

      test("move renames, makes missing parents, and gives the version stat gives", function(env, fs, root)
        env.put(root .. "/a.txt", "A")
        local m = assert(fs:move(root .. "/a.txt", "new/dir/b.txt", { cwd = root }))
        assert.equal("file", m.type)
        assert.is_nil(env.get(root .. "/a.txt"))
        assert.equal("A", env.get(root .. "/new/dir/b.txt"))
        assert.equal(assert(fs:stat(root .. "/new/dir/b.txt")).version, m.version)
        -- a directory with what is in it
        assert.equal("directory", assert(fs:move(root .. "/new", root .. "/moved")).type)
        assert.equal("A", env.get(root .. "/moved/dir/b.txt"))
        -- a symlink moves as a link
        env.put(root .. "/t", "T")
        env.symlink("t", root .. "/l1")
        assert.equal("symlink", assert(fs:move(root .. "/l1", root .. "/l2")).type)
        assert.equal("symlink", assert(fs:lstat(root .. "/l2")).type)
        assert.equal("t", (env.run("readlink -- '" .. root .. "/l2'"):gsub("\n$", "")))
        assert.equal("T", env.get(root .. "/t"))
        -- onto itself: nothing happens
        assert.equal("file", assert(fs:move(root .. "/t", root .. "/./t")).type)
        assert.equal("T", env.get(root .. "/t"))
        fails("FS_NOT_FOUND", '"' .. root .. '/nope" does not exist', fs:move(root .. "/nope", root .. "/x"))
        fails("FS_IO_ERROR", 'cannot move "' .. root .. '/moved" into itself ("' .. root .. '/moved/dir/in")',
          fs:move(root .. "/moved", root .. "/moved/dir/in"))
        assert.has_error(function() fs:move(root .. "/t", root .. "/u", { overwrite = 1 }) end,
          "dsh.fs: move: opts.overwrite must be a boolean")
      end)

      test("move replaces an existing target only with overwrite, and only by its kind", function(env, fs, root)
        env.put(root .. "/src", "new")
        env.put(root .. "/dst", "old")
        fails("FS_ALREADY_EXISTS", '"' .. root .. '/dst" already exists; pass overwrite = true to replace it',
          fs:move(root .. "/src", root .. "/dst"))
        assert.same({ "new", "old" }, { env.get(root .. "/src"), env.get(root .. "/dst") })
        assert(fs:move(root .. "/src", root .. "/dst", { overwrite = true }))
        assert.same({ "new" }, { env.get(root .. "/dst"), env.get(root .. "/src") })
        env.mkdir(root .. "/d1/x")
        env.mkdir(root .. "/d2")
        env.mkdir(root .. "/full/y")
        fails("FS_ALREADY_EXISTS", '"' .. root .. '/d2" is a directory; only a directory can replace it',
          fs:move(root .. "/dst", root .. "/d2", { overwrite = true }))
        fails("FS_ALREADY_EXISTS", '"' .. root .. '/dst" is not a directory; a directory cannot replace it',
          fs:move(root .. "/d1", root .. "/dst", { overwrite = true }))
        fails("FS_DIRECTORY_NOT_EMPTY",
          '"' .. root .. '/full" is a directory that is not empty; it cannot be replaced',
          fs:move(root .. "/d1", root .. "/full", { overwrite = true }))
        assert.equal("directory", assert(fs:move(root .. "/d1", root .. "/d2", { overwrite = true })).type)
        assert.equal("directory", assert(fs:stat(root .. "/d2/x")).type)
        assert.is_nil(fs:stat(root .. "/d1"))
      end)

      test("writes may leave cwd (fs:contains tells the host), like every other call", function(env, fs, root)
        env.mkdir(root .. "/ws")
        local ws = root .. "/ws"
        assert(fs:writeText("../outside.txt", "o", { cwd = ws }))
        assert.equal("o", env.get(root .. "/outside.txt"))
        assert.is_false(fs:contains(ws, "../outside.txt", { cwd = ws }))
        assert.is_true(fs:contains(ws, "inside.txt", { cwd = ws }))
        env.symlink(root, ws .. "/up")
        assert.is_false(fs:contains(ws, ws .. "/up/x.txt"))
      end)
    end)

    describe("serialisation", function()
      test("gives up waiting for a busy file when aborted, leaving the lock usable", function(env, fs, root)
        local p = root .. "/busy.txt"
        local held = async.future()
        local holder = async.run(function()
          return fs:writeText(p, "first", {
            onStep = function(step) if step == "stat" then held:resolve(true) async.sleep(60) end end,
          })
        end)
        held:await()
        local ctl = async.controller()
        local waiter = async.run(function() return fs:writeText(p, "second", { signal = ctl.signal }) end)
        async.sleep(20) -- long enough to reach the lock, well before the holder is done
        ctl:abort()
        fails("FS_ABORTED", "write aborted", waiter:await())
        assert.equal("create", assert(holder:await()).operation)
        local third = assert(fs:writeText(p, "third"))
        assert.same({ "update", "first" }, { third.operation, third.before })
        assert.equal("third", env.get(p))
      end)
    end)

    describe("paths for other worlds", function()
      test("gives processPath, fileUrl and contains", function(env, fs, root)
        assert.equal(root .. "/x/y", fs:processPath("x/./z/../y", { cwd = root }))
        assert.equal(fs.cwd .. "/rel", fs:processPath("rel"))
        local enc = root:gsub("[^%w%-%._~/]", function(c) return string.format("%%%02X", c:byte()) end)
        assert.equal("file://" .. enc .. "/a%20b/%C3%BC%23%3F.txt", fs:fileUrl(root .. "/a b/\xc3\xbc#?.txt"))
        env.mkdir(root .. "/in/sub")
        env.mkdir(root .. "/out")
        env.symlink("../out", root .. "/in/escape")
        env.symlink("../in/sub", root .. "/out/enter")
        local inr = root .. "/in"
        assert.is_true(fs:contains(inr, inr))
        assert.is_true(fs:contains(inr, inr .. "/sub/new.txt"))
        assert.is_true(fs:contains(inr, "sub/../sub", { cwd = inr }))
        assert.is_false(fs:contains(inr, inr .. "/sub/../../out"))
        assert.is_false(fs:contains(inr, inr .. "/escape/f"))
        assert.is_true(fs:contains(inr, root .. "/out/enter/f"))
        assert.is_false(fs:contains(inr, root .. "/in2"))
        assert.is_false(fs:contains(inr, root .. "/i"))
        assert.is_true(fs:contains("/", root .. "/out"))
      end)
    end)

    if factory.transport then
      describe("transport", function()
        test("maps an unreachable world to FS_IO_ERROR (§6.3.10, §6.3.22)", function(env, fs, root)
          env.put(root .. "/f", "x")
          env.breakTransport()
          fails("FS_IO_ERROR", '^cannot stat "' .. pesc(root) .. '/f": ', fs:stat(root .. "/f"))
          fails("FS_IO_ERROR", '^cannot list "', fs:listDir(root))
          fails("FS_IO_ERROR", '^cannot lstat "', fs:lstat(root .. "/f"))
          fails("FS_IO_ERROR", '^cannot write "', fs:writeText(root .. "/f", "y"))
        end)
      end)
    end
  end)
end
