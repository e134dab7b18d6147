-- dsh for a host user without root (issue 20, item 4; issue 18, item 1): the
-- poc's steps run as an unprivileged user the spec makes, with subordinate
-- ids (two identities: dshd as the user, commands as one of its subordinate
-- uids) and without (one shared identity, said so in the limits); a sandbox
-- with network needs a /dev/net/tun the user may open, and without one dsh
-- says what to do before it starts anything. The user runs a copy of the
-- tree it may read (the checkout may sit under a directory only root
-- enters). This spec makes and removes host users, so it runs as root.
local helpers = require "helpers"
local proc = require "dsh.core.proc"
local sys = require "dsh.core.sysutil"

local function run(argv, env)
  local out, code
  helpers.run(function()
    local p = assert(proc.spawn { argv = argv, env = env or { PATH = "/usr/sbin:/usr/bin:/sbin:/bin" },
      stdout = "pipe", stderr = "pipe" })
    local err = require("dsh.async").run(function() return p:read_all("stderr") end)
    out = p:read_all() .. err:await()
    code = p:wait().exit_code
    p:close()
  end)
  return code, out
end

describe("dsh as a host user without root", function()
  if sys.getuid() ~= 0 then
    it("is run by root, which makes the users (here: already no root)", function()
      print("\n  [70-poc_unprivileged] run as root: it makes the host users it runs as")
    end)
    return
  end
  local tmp, tree, users = nil, nil, {}

  local function make_user(subids)
    local name = "dshpoc" .. sys.random_hex(3)
    local home = tmp .. "/" .. name
    local argv = { "useradd", "-M", "-d", home, "-s", "/bin/sh", "-K", "SUB_UID_COUNT=0", "-K", "SUB_GID_COUNT=0",
      name }
    assert.same({ 0, "" }, { run(argv) })
    users[#users + 1] = name
    assert.equal(0, (run { "install", "-d", "-o", name, "-m", "0700", home }))
    if subids then
      -- a range no other user of this host has (200000 + a random multiple of 65536)
      local start = 0x40000000 + 65536 * (tonumber(sys.random_hex(2), 16) + 1)
      assert.equal(0, (run { "usermod", "--add-subuids", start .. "-" .. (start + 65535), "--add-subgids",
        start .. "-" .. (start + 65535), name }))
    end
    return name, home
  end

  -- cmd (a shell line) as user name, in its home, with the copy of the tree
  local function as(name, home, cmd, tun)
    local env = string.format("HOME=%s DSH_STATE_DIR=%s/state LUA_PATH='%s/lua/?.lua;%s/lua/?/init.lua;;' "
      .. "DSH_BUILD_DIR=%s/build PATH=%s/bin:/usr/sbin:/usr/bin:/sbin:/bin", home, home, tree, tree, tree, tree)
    local inner = "cd " .. home .. " && exec setpriv --reuid " .. name .. " --regid " .. name
      .. " --init-groups -- env -i " .. env .. " sh -c '" .. cmd:gsub("'", "'\\''") .. "'"
    if tun then
      -- a /dev/net/tun this user may open, for this run only (the host's stays as it is)
      inner = "mount -t tmpfs -o size=16k,mode=0755 tun /dev/net && mknod -m 0666 /dev/net/tun c 10 200 && " .. inner
      return run { "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", inner }
    end
    return run { "sh", "-c", inner }
  end

  setup(function()
    tmp = helpers.tmpdir()
    assert(sys.chmod(tmp, "755"))
    tree = tmp .. "/tree"
    assert(sys.mkdir_p(tree .. "/build", "755"))
    for _, d in ipairs { "lua", "providers", "bin", "remote" } do
      assert.equal(0, (run { "cp", "-a", helpers.root .. "/" .. d, tree .. "/" .. d }))
    end
    for _, d in ipairs { "lib", "bin" } do
      assert.equal(0, (run { "cp", "-a", helpers.build .. "/" .. d, tree .. "/build/" .. d }))
    end
    assert.equal(0, (run { "chmod", "-R", "a+rX", tree }))
  end)
  teardown(function()
    for _, name in ipairs(users) do run { "userdel", name } end
    if tmp then helpers.rm_rf(tmp) end
  end)

  local IDENTITY = [[luajit -e '
local sb = assert(require("dsh.sandbox").create { network = false })
local p = assert(sb.envd:start { cmd = "id", args = { "-u" } })
io.write(sb.limits.identities, " ", tostring(sb.limits.diskMb), " ", p:wait().stdout)
assert(sb:kill())']]

  it("runs the poc with two identities from the user's subordinate ids", function()
    local name, home = make_user(true)
    local code, out = as(name, home, IDENTITY)
    assert.same({ 0, "separate nil 1000\n" }, { code, out })
    code, out = as(name, home, "dsh poc --no-network")
    assert.equal(0, code, out)
    assert.matches("poc: all 19 steps passed", out)
    -- nothing of it is left: no process of the user's, no sandbox
    assert.same({ 1, "" }, { run { "pgrep", "-u", name } })
  end)

  it("runs the poc with one shared identity where there are none, and says so", function()
    local name, home = make_user(false)
    local code, out = as(name, home, IDENTITY)
    assert.same({ 0, "shared nil 1000\n" }, { code, out })
    code, out = as(name, home, "dsh poc --no-network")
    assert.equal(0, code, out)
    assert.matches("poc: all 19 steps passed", out)
  end)

  it("gives a sandbox network where /dev/net/tun is open to the user, and says what to do where not", function()
    local name, home = make_user(true)
    local net = [[luajit -e '
local sb, err = require("dsh.sandbox").create {}
if not sb then io.write(err.code, ": ", err.message, "\n") os.exit(3) end
local p = assert(sb.envd:start { cmd = "sh", args = { "-c", "ip -4 -o addr show tap0 | cut -d\" \" -f7" } })
io.write(p:wait().stdout)
assert(sb:kill())']]
    local code, out = as(name, home, net, true)
    assert.same({ 0, "10.0.2.100/24\n" }, { code, out })
    local mode = require("lfs").attributes("/dev/net/tun", "permissions")
    if mode and mode:sub(7, 8) ~= "rw" then
      code, out = as(name, home, net)
      assert.equal(3, code, out)
      assert.equal("failed_precondition: /dev/net/tun cannot be opened by this user (slirp4netns needs it to give a "
        .. "sandbox its network): make it usable (chmod 0666 /dev/net/tun, as most distributions ship it), run as "
        .. "root, or create the sandbox with network = false\n", out)
    end
  end)
end)
