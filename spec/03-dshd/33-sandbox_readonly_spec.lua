-- A local sandbox's system directories are read-only (issue 9, §3: README
-- promises it): /usr, /bin, /sbin, /lib*, /etc, /var, /opt and /run can be
-- neither written nor moved or replaced. What a program may write: the
-- user's /home/user and /tmp (kept on disk, across pauses), /dev/shm, and new
-- directories at any other path (a workspace at the host's cwd string, in
-- memory).
local D = require "helpers.dshd"
local helpers = require "helpers"
local sys = require "dsh.core.sysutil"

local function sh(client, script)
  local p = assert(client:start { cmd = "/bin/bash", args = { "-c", script } })
  local r = assert(p:wait())
  p:close()
  return r.exit_code, r.stdout, r.stderr
end

describe("local sandbox file system", function()
  local S = D.use_sandbox { network = false }

  it("keeps the system directories read-only", function()
    helpers.run(function()
      local c = S:test_client()
      local dirs = { "/usr", "/bin", "/sbin", "/lib", "/etc", "/var", "/opt", "/run" }
      if sys.is_dir("/lib64") then dirs[#dirs + 1] = "/lib64" end
      for _, d in ipairs(dirs) do
        local code, out, err = sh(c, "touch " .. d .. "/probe")
        assert.same({ 1, "", "touch: cannot touch '" .. d .. "/probe': Read-only file system\n" },
          { code, out, err }, d)
        code, out, err = sh(c, "mkdir " .. d .. "/probe")
        assert.same({ 1, "", "mkdir: cannot create directory '" .. d .. "/probe': Read-only file system\n" },
          { code, out, err }, d)
      end
      -- nor can they be moved aside or replaced: not by `user` (the root is
      -- sticky), and not by the sandbox's root either (they are mount points)
      local root = S:client { user = "root" }
      for _, d in ipairs { "/etc", "/usr", "/bin", "/run" } do
        local code, _, err = sh(c, "mv " .. d .. " " .. d .. ".old")
        assert.equal(1, code, d)
        assert.matches("Operation not permitted", err)
        code, _, err = sh(root, "mv " .. d .. " " .. d .. ".old")
        assert.equal(1, code, d)
        assert.matches("Device or resource busy", err)
      end
      root:close()
      assert.same({ 0, "user:x:1000:1000:user:/home/user:/bin/bash\n", "" }, { sh(c, "grep ^user: /etc/passwd") })
      c:close()
    end)
  end)

  it("lets the user write home, /tmp, /dev/shm and a workspace anywhere else", function()
    helpers.run(function()
      local c = S:test_client()
      for _, d in ipairs { "/home/user", "/tmp", "/var/tmp", "/dev/shm", "/anywhere/project" } do
        local script = "mkdir -p " .. d .. " && echo ok > " .. d .. "/w && cat " .. d .. "/w"
        assert.same({ 0, "ok\n", "" }, { sh(c, script) }, d)
      end
      -- home and /tmp are the sandbox's directories on the host
      assert.equal("ok\n", helpers.read_file(S:home() .. "/w"))
      assert.same({ 0, "", "" }, { sh(c, "rm -r /home/user/w /tmp/w /dev/shm/w /anywhere") })
      c:close()
    end)
  end)
end)
