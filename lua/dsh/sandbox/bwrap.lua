--- dsh.sandbox.bwrap: the bubblewrap command line of a local sandbox.
--
-- Private user, pid, ipc and uts namespaces (and network when asked); system
-- directories read-only; a curated /etc (no host secrets such as shadow or
-- ssh keys; generated passwd/group naming `user`, uid 1000); a writable
-- /home/user, /tmp and /run/dsh from the sandbox's state directory; dshd
-- bind-mounted read-only at /opt/dsh/bin/dshd. Nothing else of the host is
-- visible: no host home directories, no project tree.
local sys = require "dsh.sysutil"

local M = {}

M.UID, M.GID = 1000, 1000
M.DSHD = "/opt/dsh/bin/dshd"

-- /etc entries programs commonly need; everything else of the host's /etc stays out.
M.ETC = {
  "alternatives", "bash.bashrc", "bash_completion", "bash_completion.d", "ca-certificates",
  "ca-certificates.conf", "debian_version", "environment", "gai.conf", "host.conf", "inputrc",
  "issue", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "locale.alias", "locale.gen",
  "localtime", "login.defs", "magic", "mime.types", "nsswitch.conf", "os-release", "profile",
  "profile.d", "protocols", "resolv.conf", "rpc", "services", "shells", "skel", "ssl/certs",
  "ssl/openssl.cnf", "terminfo", "timezone", "vim", "xdg", "gitconfig", "npmrc", "nodejs",
}

local function add(argv, ...)
  for i = 1, select("#", ...) do argv[#argv + 1] = select(i, ...) end
end

--- Files the sandbox sees as /etc/passwd, group, hosts, hostname.
function M.etc_files(id)
  local host = "dsh-" .. id:sub(1, 12)
  return {
    passwd = "root:x:0:0:root:/root:/bin/bash\n" ..
      "user:x:" .. M.UID .. ":" .. M.GID .. ":user:/home/user:/bin/bash\n" ..
      "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    group = "root:x:0:\nuser:x:" .. M.GID .. ":\nnogroup:x:65534:\n",
    hosts = "127.0.0.1\tlocalhost " .. host .. "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    hostname = host .. "\n",
  }
end

---@param o {id:string, dir:string, network:boolean, dshd:string, listen:string, idle_timeout_ms:number}
function M.argv(o)
  local argv = { sys.which("bwrap") or "/usr/bin/bwrap" }
  add(argv, "--unshare-user", "--uid", tostring(M.UID), "--gid", tostring(M.GID))
  add(argv, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try")
  if not o.network then add(argv, "--unshare-net") end
  add(argv, "--die-with-parent", "--new-session", "--hostname", "dsh-" .. o.id:sub(1, 12))
  add(argv, "--ro-bind", "/usr", "/usr")
  for _, d in ipairs { "bin", "sbin", "lib", "lib32", "lib64", "libx32" } do
    local target = require("lfs").symlinkattributes("/" .. d, "target")
    if target then
      add(argv, "--symlink", target, "/" .. d)
    elseif sys.is_dir("/" .. d) then
      add(argv, "--ro-bind", "/" .. d, "/" .. d)
    end
  end
  for _, e in ipairs(M.ETC) do add(argv, "--ro-bind-try", "/etc/" .. e, "/etc/" .. e) end
  for _, e in ipairs { "passwd", "group", "hosts", "hostname" } do
    add(argv, "--ro-bind", o.dir .. "/etc/" .. e, "/etc/" .. e)
  end
  add(argv, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/run")
  add(argv, "--bind", o.dir .. "/run", "/run/dsh")
  add(argv, "--bind", o.dir .. "/home", "/home/user")
  add(argv, "--bind", o.dir .. "/tmp", "/tmp")
  add(argv, "--dir", "/var", "--symlink", "/tmp", "/var/tmp")
  add(argv, "--ro-bind", o.dshd, M.DSHD)
  local node = require("dsh.code_runtime.node").dir() -- Code Mode's Node, read-only at /opt/dsh/node
  if node then add(argv, "--ro-bind", node, require("dsh.code_runtime.node").SANDBOX_DIR) end
  add(argv, "--chdir", "/home/user")
  add(argv, "--", M.DSHD, "--listen", o.listen, "--ready-file", "/run/dsh/ready",
    "--access-token-fd", "0", "--user", "user")
  if o.idle_timeout_ms and o.idle_timeout_ms > 0 then
    add(argv, "--idle-timeout-ms", tostring(math.floor(o.idle_timeout_ms)))
  end
  return argv
end

--- The environment bwrap (and so dshd) starts with: nothing of the host's.
function M.env()
  return {
    PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    HOME = "/home/user",
    USER = "user",
    LOGNAME = "user",
    LANG = "C.UTF-8",
  }
end

return M
