-- The tar stream of ctx.fs's tree transfers (dsh.fs._tar, dsh.fs.hosttree)
-- against streams a hostile sandbox could send: nothing is ever written
-- outside the destination or through a symlink, setuid never arrives, every
-- malformed stream is an error naming what was wrong (never a raise), and
-- random damage to a valid stream never does either. (The transfers on real
-- sandboxes: spec/04-providers/07-fs_trees_spec.lua.)
local helpers = require "helpers"
local hostfs = require "dsh.core.hostfs"
local hosttree = require "dsh.fs.hosttree"
local lfs = require "lfs"
local tar = require "dsh.fs._tar"

-- A tar stream of members {name, type, mode, size, mtime, link, data}.
local function archive(members, no_end)
  local parts = {}
  for _, m in ipairs(members) do
    m.type = m.type or "file"
    m.size = m.data and #m.data or 0
    parts[#parts + 1] = tar.header(m)
    if m.data then parts[#parts + 1] = m.data .. tar.padding(#m.data) end
  end
  if not no_end then parts[#parts + 1] = tar.TRAILER end
  return table.concat(parts)
end

local function source_of(s, piece)
  local pos = 1
  return function()
    if pos > #s then return nil end
    local c = s:sub(pos, pos + (piece or 7777) - 1)
    pos = pos + #c
    return c
  end
end

-- Everything below dir: rel -> type (links not followed).
local function tree(dir)
  local out = {}
  local function walk(rel)
    local p = rel == "" and dir or dir .. "/" .. rel
    for name in lfs.dir(p) do
      if name ~= "." and name ~= ".." then
        local r = rel == "" and name or rel .. "/" .. name
        local mode = lfs.symlinkattributes(dir .. "/" .. r, "mode")
        out[r] = mode
        if mode == "directory" then walk(r) end
      end
    end
  end
  walk("")
  return out
end

local function extract(dir, stream, piece)
  return hosttree.extract(dir .. "/dest", source_of(stream, piece))
end

describe("tree streams", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("carry names of any bytes and length, links, modes and times, in any chunking", function()
    local dir = helpers.tmpdir()
    local long = string.rep("n", 200) .. "/" .. string.rep("m", 150)
    local s = archive {
      { name = "./", type = "directory", mode = 448, mtime = 1000 },
      { name = "odd\n\1\255 name", mode = 420, mtime = 1234567890, data = "x\0y" },
      { name = string.rep("n", 200), type = "directory", mode = 493, mtime = 1 },
      { name = long, mode = 384, mtime = 2, data = string.rep("z", 5000) },
      { name = "link", type = "symlink", mode = 511, mtime = 3, link = string.rep("t", 300) },
      { name = "hard", type = "hardlink", mode = 384, mtime = 2, link = long },
      { name = "suid", mode = 3565, mtime = 4, data = "#!" }, -- 06755
    }
    for _, piece in ipairs { 1, 511, 512, 513, 100000 } do
      local sum = assert(extract(dir, s, piece))
      assert.same({ files = 3, directories = 2, symlinks = 1, hardlinks = 1, bytes = 5005, skipped = {} }, sum)
      local d = dir .. "/dest/"
      assert.equal("x\0y", helpers.read_file(d .. "odd\n\1\255 name"))
      assert.equal(string.rep("z", 5000), helpers.read_file(d .. long))
      assert.equal(string.rep("t", 300), hostfs.readlink(d .. "link"))
      local a, b = hostfs.lstat(d .. long), hostfs.lstat(d .. "hard")
      assert.same({ a.ino, 2, 384 }, { b.ino, b.nlink, b.mode })
      assert.equal("1234567890", hostfs.lstat(d .. "odd\n\1\255 name").mtime:match("^%d+"))
      assert.equal(493, hostfs.lstat(d .. "suid").mode) -- setuid and setgid dropped, 0755 left
      assert.equal(448, hostfs.lstat(d).mode)
      helpers.rm_rf(dir .. "/dest")
    end
    helpers.rm_rf(dir)
  end)

  it("refuse every member that would land outside the destination or go through a link", function()
    local dir = helpers.tmpdir()
    assert(lfs.mkdir(dir .. "/outside"))
    local cases = {
      { { name = "../escape", data = "x" } },
      { { name = "a/../../escape", data = "x" } },
      { { name = "/abs", data = "x" } },
      { { name = "l", type = "symlink", link = dir .. "/outside" }, { name = "l/f", data = "x" } },
      { { name = "h", type = "hardlink", link = "../outside/f" } },
      { { name = "h", type = "hardlink", link = "never-made" } },
      { { name = "./", type = "symlink", link = "/" } },
      { { name = "", data = "x" } },
    }
    for i, members in ipairs(cases) do
      local sum, err = extract(dir, archive(members))
      assert.is_nil(sum, "case " .. i)
      assert.equal("FS_IO_ERROR", err.code)
      assert.matches("^refusing tar member", err.message)
      assert.same({}, tree(dir .. "/outside"), "case " .. i)
      helpers.rm_rf(dir .. "/dest")
    end
    -- a link already in the destination is not written through either
    assert(lfs.mkdir(dir .. "/dest"))
    assert(hostfs.symlink(dir .. "/outside", dir .. "/dest/pre"))
    local _, err = extract(dir, archive { { name = "pre/f", data = "x" } })
    assert.equal('"' .. dir .. '/dest/pre" is a symlink; nothing is written through it', err.message)
    -- but a link at a file's own name is replaced, not followed
    assert(extract(dir, archive { { name = "pre", data = "mine" } }))
    assert.equal("mine", helpers.read_file(dir .. "/dest/pre"))
    assert.same({}, tree(dir .. "/outside"))
    helpers.rm_rf(dir)
  end)

  it("say what is wrong with a malformed stream", function()
    local dir = helpers.tmpdir()
    local good = archive { { name = "f", data = "hello" } }
    local function err_of(s) return select(2, extract(dir, s)).message end
    local bad_sum = good:sub(1, 148) .. "0000000\0" .. good:sub(157)
    assert.equal("malformed tar stream: bad header checksum at byte 0", err_of(bad_sum))
    assert.equal("malformed tar stream: it ends in the middle of a header at byte 0", err_of(good:sub(1, 100)))
    assert.equal("malformed tar stream: it ends in the middle of a member's data at byte 512",
      err_of(good:sub(1, 512)))
    assert.equal("malformed tar stream: it ends at byte 1024 without its end-of-archive blocks",
      err_of(archive({ { name = "f", data = "hello" } }, true)))
    local huge = tar.header { name = string.rep("x", 70000), type = "file", mode = 420, size = 0, mtime = 0 }
    assert.equal("malformed tar stream: a long name of 70001 bytes (at most 65536)", err_of(huge .. tar.TRAILER))
    local nonum = good:sub(1, 124) .. "12x4567890a\0" .. good:sub(137)
    local sum = 0
    for i = 1, 512 do sum = sum + ((i >= 149 and i <= 156) and 32 or nonum:byte(i)) end
    nonum = nonum:sub(1, 148) .. string.format("%06o\0 ", sum) .. nonum:sub(157)
    assert.equal("malformed tar stream: bad size field at byte 0", err_of(nonum))
    helpers.rm_rf(dir)
  end)

  it("never raise and never write outside the destination, whatever the damage", function()
    local dir = helpers.tmpdir()
    assert(lfs.mkdir(dir .. "/outside"))
    local s = archive {
      { name = "./", type = "directory", mode = 493 },
      { name = "d", type = "directory", mode = 493 },
      { name = "d/f", mode = 420, data = string.rep("abc", 400) },
      { name = "d/l", type = "symlink", link = "f" },
      { name = "d/h", type = "hardlink", link = "d/f" },
      { name = string.rep("q", 120), mode = 420, data = "long" },
    }
    math.randomseed(20)
    for _ = 1, 300 do
      local b = { s:byte(1, -1) }
      for _ = 1, math.random(1, 8) do
        local i = math.random(1, #b)
        b[i] = math.random(0, 255)
      end
      local damaged = string.char(unpack(b))
      local ok, res, err = pcall(extract, dir, damaged, math.random(1, 2000))
      assert.is_true(ok, tostring(res))
      assert.truthy(res or (err and err.code and err.message), "neither a result nor an error")
      assert.same({}, tree(dir .. "/outside"))
      helpers.rm_rf(dir .. "/dest")
    end
    helpers.rm_rf(dir)
  end)
end)
