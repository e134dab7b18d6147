-- Less kernel inside a sandbox (issue 18, item 4): a system-call filter in
-- the spirit of container runtimes' default profiles, installed by dshd on
-- itself before it serves anything, and no nested user namespaces. Each
-- denied call fails with EPERM (ENOSYS for clone3 and io_uring, so the C
-- library and libuv fall back), where the same call with the same invalid
-- arguments fails otherwise on the host: it is the filter that refuses it.
-- Ordinary work (compilers, Python, Node, git, clangd, threads) still runs.
local D = require "helpers.dshd"
local helpers = require "helpers"
local proc = require "dsh.core.proc"

local function sh(client, script)
  local p = assert(client:start { cmd = "/bin/bash", args = { "-c", script } })
  local r = assert(p:wait())
  p:close()
  return r.exit_code, r.stdout, r.stderr
end

local function parse(out)
  local res = {}
  for what, result in out:gmatch("(%S+) (%S+)\n") do res[what] = result end
  return res
end

local PROBE = helpers.build .. "/bin/fixture-probe"

-- The probe on the host, as an unprivileged uid (no filter, no privilege).
local function on_host(what)
  local out
  helpers.run(function()
    local argv = { "setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", PROBE, what }
    local p = assert(proc.spawn { argv = argv, env = { PATH = "/usr/bin:/bin" }, stdout = "pipe" })
    out = p:read_all()
    p:wait()
    p:close()
  end)
  return parse(out)
end

local DENIED = {
  "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "kexec_load", "kexec_file_load",
  "init_module", "finit_module", "delete_module", "mount", "umount2", "pivot_root", "fsopen", "open_tree",
  "move_mount", "swapon", "swapoff", "settimeofday", "clock_settime", "adjtimex", "syslog", "acct", "quotactl",
  "open_by_handle_at", "name_to_handle_at", "setns", "reboot", "ioctl_tiocsti",
}

describe("the kernel a sandbox reaches", function()
  local S = D.use_sandbox { network = false }
  local function probe(c, ...)
    local code, out, err = sh(c, "/tmp/probe " .. table.concat({ ... }, " "))
    assert.same({ 0, "" }, { code, err })
    return parse(out), out
  end
  local function upload(c)
    assert(c:write_file("/tmp/probe", assert(helpers.read_file(PROBE))))
    assert.equal(0, (sh(c, "chmod 0755 /tmp/probe")))
  end

  it("filters system calls: each denied one fails EPERM, clone3 and io_uring ENOSYS", function()
    helpers.run(function()
      local c = S:test_client()
      upload(c)
      local inside, out = probe(c, "syscalls")
      local host = on_host("syscalls")
      local proved = 0
      for _, name in ipairs(DENIED) do
        if inside[name] ~= nil then
          assert.equal("EPERM", inside[name], name .. " inside: " .. out)
          -- the same invalid call without the filter fails another way
          if host[name] ~= "EPERM" then proved = proved + 1 end
        end
      end
      assert.equal("ENOSYS", inside.clone3)
      assert.equal("ENOSYS", inside.io_uring_setup)
      assert.is_not.equal("ENOSYS", host.clone3)
      assert.is_true(proved >= 15, proved .. " calls told the filter's EPERM from the kernel's own")
      local code, status = sh(c, "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status")
      assert.equal(0, code)
      assert.matches("NoNewPrivs:%s+1", status)
      assert.matches("Seccomp:%s+2", status)
    end)
  end)

  it("closes nested user namespaces, to `user` and to the sandbox's root", function()
    helpers.run(function()
      for _, who in ipairs { "user", "root" } do
        local c = S:client { user = who }
        upload(c)
        local r = probe(c, "userns")
        assert.same({ "EPERM", "EPERM" }, { r.unshare_newuser, r.clone_newuser }, who)
        local code, _, err = sh(c, "unshare -Ur true")
        assert.equal(1, code, who)
        assert.matches("unshare failed: Operation not permitted", err, who)
        -- and the namespace's own limit says none, whoever asks
        assert.same({ 0, "0\n", "" }, { sh(c, "cat /proc/sys/user/max_user_namespaces") })
        c:close()
      end
      -- the same probe on the host makes one (nothing stops it there)
      assert.equal("ok", on_host("userns").unshare_newuser)
    end)
  end)

  it("runs ordinary work: a C build, threads, Python, Node, git, make and clangd", function()
    helpers.run(function()
      local c = S:test_client()
      local script = [[
set -e
cd /tmp && mkdir -p work && cd work
cat > t.c <<'EOF'
#include <pthread.h>
#include <stdio.h>
static void *run(void *a) { return a; }
int main(void) { pthread_t t; void *r; pthread_create(&t, 0, run, (void *)42); pthread_join(t, &r);
  printf("threads %ld\n", (long)r); return 0; }
EOF
printf 'all: t\nt: t.c\n\tgcc -O1 -pthread -o t t.c\n' > Makefile
make -s && ./t
python3 -c 'import concurrent.futures as f; print("python", sum(f.ThreadPoolExecutor(4).map(abs, [-1, -2])))'
git init -q . && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x
echo "git $(git rev-list --count HEAD)"
clangd --version | head -1 | sed 's/ version.*//'
if [ -x /opt/dsh/node/bin/node ]; then
  /opt/dsh/node/bin/node -e 'require("fs").promises.readFile("t.c").then(b => console.log("node", b.length > 0))'
else echo "node true"; fi
]]
      local code, out, err = sh(c, script)
      assert.same({ 0, "" }, { code, err })
      assert.equal("threads 42\npython 3\ngit 1\n", out:match("^(threads.-git %d+\n)"))
      assert.matches("clangd\n", out)
      assert.matches("node true\n$", out)
    end)
  end)
end)
