-- filesystem.Filesystem and /files on dshd in a sandbox: EntryInfo exactly
-- as envd fills it (type, size as a string, mode bits, Go permission
-- strings, owner and group, RFC 3339 time, symlinkTarget), the error code and
-- message of each failure, ListDir's depth-first lexical order, WatchDir
-- events (create, write, chmod, rename, remove; recursive; includeEntry) and
-- the polling watchers.
local D = require "helpers.dshd"
local helpers = require "helpers"

local ROOT = "/home/user/fs"

describe("dshd filesystem", function()
  local S = D.use_sandbox()
  before_each(function()
    helpers.run(function()
      local c = S:client()
      assert(c:remove(ROOT))
      assert(c:make_dir(ROOT))
      c:close()
    end)
  end)

  local function sh(c, script)
    local p = assert(c:start { cmd = "/bin/bash", args = { "-c", script }, cwd = ROOT })
    local r = assert(p:wait())
    p:close()
    assert.equal(0, r.exit_code, script .. ": " .. r.stderr)
    return r.stdout
  end

  local function fail(want_code, want_msg, ok, err)
    assert.is_nil(ok)
    assert.same({ want_code, want_msg }, { err.code, err.message })
  end

  describe("Stat", function()
    it("fills EntryInfo as envd does, for every kind of entry", function()
      helpers.run(function()
        local c = S:test_client()
        sh(c, "printf hello > a.txt && chmod 640 a.txt && printf x > suid && chmod 4755 suid" ..
          " && mkdir -m 750 d && mkdir -m 1777 sticky && ln -s a.txt link && ln -s " .. ROOT ..
          "/d dirlink && ln -s nowhere broken && mkfifo fifo")
        local function raw(name)
          return assert(c:call("/filesystem.Filesystem/Stat", { path = ROOT .. "/" .. name })).entry
        end
        local function base(name, e)
          assert.equal(name, e.name)
          assert.equal(ROOT .. "/" .. name, e.path)
          assert.same({ "user", "user" }, { e.owner, e.group })
          assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.?%d*Z$", e.modifiedTime)
          local frac = e.modifiedTime:match("%.(%d+)Z$") or ""
          assert.is_truthy(({ [0] = true, [3] = true, [6] = true, [9] = true })[#frac], e.modifiedTime)
        end
        local cases = {
          { "a.txt", { type = "FILE_TYPE_FILE", size = "5", mode = 416, permissions = "-rw-r-----" } },
          { "suid", { type = "FILE_TYPE_FILE", size = "1", mode = 493, permissions = "urwxr-xr-x" } },
          { "d", { type = "FILE_TYPE_DIRECTORY", size = "4096", mode = 488, permissions = "drwxr-x---" } },
          { "sticky", { type = "FILE_TYPE_DIRECTORY", size = "4096", mode = 511, permissions = "dtrwxrwxrwx" } },
          -- a symlink: its target's type and mode, the link's own size, "L", the resolved target
          { "link", { type = "FILE_TYPE_FILE", size = "5", mode = 416, permissions = "Lrwxrwxrwx",
            symlinkTarget = ROOT .. "/a.txt" } },
          { "dirlink", { type = "FILE_TYPE_DIRECTORY", size = tostring(#(ROOT .. "/d")), mode = 488,
            permissions = "Lrwxrwxrwx", symlinkTarget = ROOT .. "/d" } },
          -- broken: no type (unspecified), the link itself as target
          { "broken", { size = "7", permissions = "Lrwxrwxrwx", symlinkTarget = ROOT .. "/broken" } },
          { "fifo", { mode = 420, permissions = "prw-r--r--" } },
        }
        for _, case in ipairs(cases) do
          local e = raw(case[1])
          base(case[1], e)
          local got = {}
          for _, k in ipairs { "type", "size", "mode", "permissions", "symlinkTarget" } do got[k] = e[k] end
          assert.same(case[2], got, case[1])
        end
        -- the time is the file's mtime
        local mtime = tonumber(sh(c, "stat -c %Y a.txt"))
        local e = assert(c:stat(ROOT .. "/a.txt"))
        local y, mo, d, h, mi, s = e.modified_time:match("^(%d+)%-(%d+)%-(%d+)T(%d+):(%d+):(%d+)")
        local utc = os.time { year = y, month = mo, day = d, hour = h, min = mi, sec = s }
        local offset = os.time(os.date("*t", 0)) - os.time(os.date("!*t", 0))
        assert.equal(mtime, utc + offset)
        -- the client's normalised view: numbers and short type names
        assert.same({ name = "a.txt", type = "file", path = ROOT .. "/a.txt", size = 5, mode = 416,
          permissions = "-rw-r-----", owner = "user", group = "user", modified_time = e.modified_time }, e)
        assert.equal("other", assert(c:stat(ROOT .. "/broken")).type)
        assert.equal("other", assert(c:stat(ROOT .. "/fifo")).type)
        assert.same({ "/", "dir" }, { assert(c:stat("/")).name, assert(c:stat("/")).type })
        c:close()
      end)
    end)

    it("resolves relative and ~ paths against the home, and reports missing ones", function()
      helpers.run(function()
        local c = S:test_client()
        assert(c:write_file(ROOT .. "/a.txt", "x"))
        for _, p in ipairs { "fs/a.txt", "~/fs/a.txt", "~/fs/../fs/./a.txt", ROOT .. "//a.txt" } do
          assert.equal(ROOT .. "/a.txt", assert(c:stat(p)).path, p)
        end
        fail("not_found", "file not found: lstat " .. ROOT .. "/missing: no such file or directory",
          c:stat(ROOT .. "/missing"))
        fail("not_found", "file not found: lstat " .. ROOT .. "/a.txt/below: not a directory",
          c:stat(ROOT .. "/a.txt/below"))
        fail("invalid_argument",
          "failed to expand path '~other/x' for user 'user': cannot expand user-specific home dir",
          c:stat("~other/x"))
        c:close()
      end)
    end)
  end)

  describe("MakeDir, Move, Remove", function()
    it("MakeDir creates parents, and tells an existing directory from a file", function()
      helpers.run(function()
        local c = S:test_client()
        local e = assert(c:make_dir(ROOT .. "/x/y/z"))
        assert.same({ "z", ROOT .. "/x/y/z", "dir", "user", "drwxr-xr-x" },
          { e.name, e.path, e.type, e.owner, e.permissions })
        assert.equal("dir", assert(c:stat(ROOT .. "/x/y")).type)
        fail("already_exists", "directory already exists: " .. ROOT .. "/x/y/z", c:make_dir(ROOT .. "/x/y/z"))
        assert(c:write_file(ROOT .. "/f", "x"))
        fail("invalid_argument", "path already exists but it is not a directory: " .. ROOT .. "/f",
          c:make_dir(ROOT .. "/f"))
        local ok, err = c:make_dir(ROOT .. "/f/sub")
        assert.is_nil(ok)
        assert.equal("internal", err.code)
        c:close()
      end)
    end)

    it("Move renames into new directories, replaces a file, and needs a source", function()
      helpers.run(function()
        local c = S:test_client()
        assert(c:write_file(ROOT .. "/src.txt", "move me"))
        local e = assert(c:move(ROOT .. "/src.txt", ROOT .. "/deep/er/dst.txt"))
        assert.same({ "dst.txt", ROOT .. "/deep/er/dst.txt", "file", 7 }, { e.name, e.path, e.type, e.size })
        assert.equal("move me", assert(c:read_file(ROOT .. "/deep/er/dst.txt")))
        fail("not_found", "file not found: lstat " .. ROOT .. "/src.txt: no such file or directory",
          c:stat(ROOT .. "/src.txt"))
        assert.equal("user", assert(c:stat(ROOT .. "/deep")).owner)
        assert(c:write_file(ROOT .. "/other.txt", "replacement"))
        assert(c:move(ROOT .. "/other.txt", ROOT .. "/deep/er/dst.txt"))
        assert.equal("replacement", assert(c:read_file(ROOT .. "/deep/er/dst.txt")))
        fail("not_found",
          "source file not found: rename " .. ROOT .. "/none " .. ROOT .. "/x: no such file or directory",
          c:move(ROOT .. "/none", ROOT .. "/x"))
        c:close()
      end)
    end)

    it("Remove deletes trees, accepts missing paths and refuses /", function()
      helpers.run(function()
        local c = S:test_client()
        sh(c, "mkdir -p t/a/b && touch t/a/b/f t/g")
        assert.is_true(c:remove(ROOT .. "/t"))
        fail("not_found", "file not found: lstat " .. ROOT .. "/t: no such file or directory", c:stat(ROOT .. "/t"))
        assert.is_true(c:remove(ROOT .. "/t"))
        assert.is_true(c:remove(ROOT .. "/nothing/below"))
        fail("internal", "error removing file or directory: refusing to remove /", c:remove("/"))
        assert.equal("dir", assert(c:stat("/home/user")).type)
        c:close()
      end)
    end)
  end)

  describe("ListDir", function()
    it("walks depth-first in lexical order down to the depth asked", function()
      helpers.run(function()
        local c = S:test_client()
        sh(c, "mkdir -p d/sub/deeper && touch d/a.txt d/c.bin d/B.txt d/sub/b.txt d/sub/deeper/x && ln -s sub d/zlink")
        local function paths(depth, dir)
          local out = {}
          for _, e in ipairs(assert(c:list_dir(dir or ROOT .. "/d", depth))) do
            out[#out + 1] = e.path:sub(#(dir or ROOT .. "/d") + 2) .. ":" .. e.type
          end
          return out
        end
        local one = { "B.txt:file", "a.txt:file", "c.bin:file", "sub:dir", "zlink:dir" }
        assert.same(one, paths(1))
        assert.same(one, paths(0)) -- 0 means 1, as envd
        assert.same({ "B.txt:file", "a.txt:file", "c.bin:file", "sub:dir", "sub/b.txt:file", "sub/deeper:dir",
          "zlink:dir" }, paths(2))
        assert.same({ "B.txt:file", "a.txt:file", "c.bin:file", "sub:dir", "sub/b.txt:file", "sub/deeper:dir",
          "sub/deeper/x:file", "zlink:dir" }, paths(10))
        -- a symlinked directory is listed through the link, links inside are not followed
        assert.same({ "b.txt:file", "deeper:dir", "deeper/x:file" }, paths(5, ROOT .. "/d/zlink"))
        fail("invalid_argument", "path is not a directory: " .. ROOT .. "/d/a.txt", c:list_dir(ROOT .. "/d/a.txt"))
        fail("not_found", "path not found: lstat " .. ROOT .. "/none: no such file or directory",
          c:list_dir(ROOT .. "/none"))
        c:close()
      end)
    end)
  end)

  describe("WatchDir", function()
    -- Collect events of w until pred(list) holds (at most 5 s); returns the list.
    local function collect(w, pred, list)
      list = list or {}
      return D.within(5000, "watch events", function()
        while not pred(list) do
          local ev, err = w:next()
          assert(ev, "watch ended: " .. tostring(err))
          list[#list + 1] = ev
        end
        return list
      end)
    end
    local function has(list, kind, name)
      for _, e in ipairs(list) do
        if e.type == kind and e.name == name then return e end
      end
    end
    local function names(list)
      local t = {}
      for _, e in ipairs(list) do t[#t + 1] = e.type .. ":" .. e.name end
      return table.concat(t, " ")
    end

    it("reports create, write, chmod, rename and remove with relative names", function()
      helpers.run(function()
        local c = S:test_client()
        assert(c:make_dir(ROOT .. "/w/sub"))
        local w = assert(c:watch_dir(ROOT .. "/w"))
        assert(c:write_file(ROOT .. "/w/one.txt", "1"))
        sh(c, "chmod 600 w/one.txt")
        assert(c:move(ROOT .. "/w/one.txt", ROOT .. "/w/uno.txt"))
        assert(c:write_file(ROOT .. "/w/sub/inner.txt", "not seen: not recursive"))
        assert(c:remove(ROOT .. "/w/uno.txt"))
        local list = collect(w, function(l) return has(l, "remove", "uno.txt") end)
        for _, want in ipairs { { "create", "one.txt" }, { "write", "one.txt" }, { "chmod", "one.txt" },
          { "rename", "one.txt" }, { "create", "uno.txt" }, { "remove", "uno.txt" } } do
          assert.is_truthy(has(list, want[1], want[2]), want[1] .. ":" .. want[2] .. " missing in " .. names(list))
        end
        for _, e in ipairs(list) do
          assert.is_nil(e.entry) -- not asked for
          assert.is_nil(e.name:find("inner", 1, true), names(list))
        end
        -- the order of one file's life
        local function index(kind, name)
          for i, e in ipairs(list) do if e.type == kind and e.name == name then return i end end
        end
        assert.is_true(index("create", "one.txt") < index("rename", "one.txt"))
        assert.is_true(index("rename", "one.txt") < index("remove", "uno.txt"))
        w:close()
        c:close()
      end)
    end)

    it("follows subdirectories when recursive, and attaches entries when asked", function()
      helpers.run(function()
        local c = S:test_client()
        assert(c:make_dir(ROOT .. "/r"))
        local w = assert(c:watch_dir(ROOT .. "/r", { recursive = true, include_entry = true }))
        assert(c:write_file(ROOT .. "/r/top.txt", "t"))
        sh(c, "mkdir -p r/a/b/c")
        assert(c:write_file(ROOT .. "/r/a/b/c/deep.txt", "deep"))
        assert(c:remove(ROOT .. "/r/top.txt"))
        local list = collect(w, function(l)
          return has(l, "remove", "top.txt") and has(l, "write", "a/b/c/deep.txt")
        end)
        for _, want in ipairs { "a", "a/b", "a/b/c", "a/b/c/deep.txt", "top.txt" } do
          assert.is_truthy(has(list, "create", want), "create:" .. want .. " missing in " .. names(list))
        end
        local cr = has(list, "create", "a/b/c/deep.txt")
        assert.same({ "file", ROOT .. "/r/a/b/c/deep.txt", "deep.txt" },
          { cr.entry.type, cr.entry.path, cr.entry.name })
        assert.equal("dir", has(list, "create", "a").entry.type)
        assert.equal(4, has(list, "write", "a/b/c/deep.txt").entry.size)
        assert.is_nil(has(list, "remove", "top.txt").entry)
        w:close()
        c:close()
      end)
    end)

    it("ends with not_found, invalid_argument or deadline_exceeded", function()
      helpers.run(function()
        local c = S:test_client()
        assert(c:write_file(ROOT .. "/file", "x"))
        local nowhere = "path " .. ROOT .. "/nowhere not found: stat " .. ROOT .. "/nowhere: no such file or directory"
        fail("not_found", nowhere, c:watch_dir(ROOT .. "/nowhere"))
        fail("invalid_argument", "path " .. ROOT .. "/file not a directory", c:watch_dir(ROOT .. "/file"))
        local w = assert(c:watch_dir(ROOT, { timeout_ms = 300 }))
        fail("deadline_exceeded", "context deadline exceeded", w:next())
        w:close()
        c:close()
      end)
    end)
  end)

  describe("polling watchers", function()
    it("accumulate events until fetched, and go away when removed", function()
      helpers.run(function()
        local c = S:test_client()
        assert(c:make_dir(ROOT .. "/p"))
        local id = assert(c:create_watcher(ROOT .. "/p", { recursive = true, include_entry = true }))
        assert.matches("^w", id)
        assert(c:write_file(ROOT .. "/p/a.txt", "a"))
        sh(c, "mkdir p/sub && echo b > p/sub/b.txt")
        local seen = {}
        assert.is_truthy(helpers.eventually(function()
          for _, e in ipairs(assert(c:watcher_events(id))) do seen[#seen + 1] = e end
          local got = {}
          for _, e in ipairs(seen) do got[e.type .. ":" .. e.name] = e end
          return got["create:a.txt"] and got["create:sub"] and got["create:sub/b.txt"] and got["write:sub/b.txt"]
        end, 5000))
        assert.equal("file", seen[1].entry.type)
        -- fetched events are gone; nothing new happened
        assert.same({}, assert(c:watcher_events(id)))
        assert.is_true(c:remove_watcher(id))
        local msg = "watcher with id " .. id .. " not found"
        fail("not_found", msg, c:remove_watcher(id))
        fail("not_found", msg, c:watcher_events(id))
        local nowhere = "path " .. ROOT .. "/nowhere not found: stat " .. ROOT .. "/nowhere: no such file or directory"
        fail("not_found", nowhere, c:create_watcher(ROOT .. "/nowhere"))
        fail("invalid_argument", "path " .. ROOT .. "/p/a.txt not a directory", c:create_watcher(ROOT .. "/p/a.txt"))
        c:close()
      end)
    end)
  end)

  describe("/files", function()
    it("creates parents owned by the user, and answers envd's errors", function()
      helpers.run(function()
        local c = S:test_client()
        assert.same({ path = ROOT .. "/n/e/w.txt", name = "w.txt", type = "file" },
          assert(c:write_file(ROOT .. "/n/e/w.txt", "new")))
        local e = assert(c:stat(ROOT .. "/n/e/w.txt"))
        assert.same({ "user", "-rw-r--r--", 3 }, { e.owner, e.permissions, e.size })
        local dir = assert(c:stat(ROOT .. "/n/e"))
        assert.same({ "user", "drwxr-xr-x" }, { dir.owner, dir.permissions })
        sh(c, "mkfifo fifo")
        fail("not_found", "path '" .. ROOT .. "/none' does not exist", c:read_file(ROOT .. "/none"))
        fail("invalid_argument", "path '" .. ROOT .. "/n' is a directory", c:read_file(ROOT .. "/n"))
        fail("invalid_argument", "path '" .. ROOT .. "/fifo' is not a regular file", c:read_file(ROOT .. "/fifo"))
        fail("invalid_argument", "path is a directory: " .. ROOT .. "/n", c:write_file(ROOT .. "/n", "x"))
        -- relative paths resolve against the home
        assert.equal(ROOT .. "/rel.txt", assert(c:write_file("fs/rel.txt", "r")).path)
        assert.equal("r", assert(c:read_file(ROOT .. "/rel.txt")))
        c:close()
      end)
    end)
  end)
end)
