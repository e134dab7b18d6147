--- dsh.sandbox.bwrap: the command line that starts a local sandbox.
--
-- bubblewrap with private user, pid, ipc, uts, cgroup and network namespaces
-- (a sandbox with network = true gets outbound access through
-- dsh.sandbox.network, never the host's); read-only system directories
-- (/usr, /bin, /sbin, /lib*, /etc, /var, /opt, /run), each a read-only mount
-- that cannot be removed or replaced; the root itself is a writable tmpfs
-- (memory, within the sandbox's memory limit) so that a workspace can be
-- made at any path, the host's cwd string for one; a curated /etc (no host
-- secrets such as shadow or ssh keys; generated passwd/group naming `user`,
-- uid 1000); a writable /home/user, /tmp and /run/dsh from the sandbox's
-- state directory; dshd bind-mounted read-only at /opt/dsh/bin/dshd. Nothing
-- else of the host is visible: no host home directories, no project tree.
--
-- bubblewrap runs under a small launcher (M.launch_argv) that first joins the
-- sandbox's cgroups and sets RLIMIT_NPROC and, when the host runs as root,
-- makes the state directory reachable in a private mount namespace and drops
-- to the sandbox's own unprivileged host uid, so that the sandbox user maps
-- to that uid (uid_map "1000 <uid> 1") and never to root.
local lfs = require "lfs"
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
  "profile.d", "protocols", "rpc", "services", "shells", "skel", "ssl/certs",
  "ssl/openssl.cnf", "terminfo", "timezone", "vim", "xdg", "gitconfig", "npmrc", "nodejs",
}

local function add(argv, ...)
  for i = 1, select("#", ...) do argv[#argv + 1] = select(i, ...) end
end

-- Where the launcher makes the state directory of a root host's sandbox
-- reachable by the sandbox's uid (a bind mount in its own mount namespace).
M.STAGE = "/run/dsh/stage"

--- Files the sandbox sees as /etc/passwd, group, hosts, hostname and, with
-- network, resolv.conf.
function M.etc_files(id, resolv)
  local host = "dsh-" .. id:sub(1, 12)
  return {
    passwd = "root:x:0:0:root:/root:/bin/bash\n" ..
      "user:x:" .. M.UID .. ":" .. M.GID .. ":user:/home/user:/bin/bash\n" ..
      "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    group = "root:x:0:\nuser:x:" .. M.GID .. ":\nnogroup:x:65534:\n",
    hosts = "127.0.0.1\tlocalhost " .. host .. "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    hostname = host .. "\n",
    ["resolv.conf"] = resolv,
  }
end

---@param o {id:string, src:string, dshd:string, network:boolean, netns_made:boolean, idle_timeout_ms:number}
-- src: the state directory as bubblewrap sees it; dshd: the dshd binary;
-- netns_made: bubblewrap starts in a network namespace made for the sandbox.
function M.argv(o)
  local argv = { sys.which("bwrap") or "/usr/bin/bwrap" }
  add(argv, "--unshare-user", "--uid", tostring(M.UID), "--gid", tostring(M.GID))
  add(argv, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try")
  if not o.netns_made then add(argv, "--unshare-net") end
  add(argv, "--die-with-parent", "--new-session", "--hostname", "dsh-" .. o.id:sub(1, 12))
  add(argv, "--ro-bind", "/usr", "/usr")
  -- /bin and friends are mounts (not links, as on a merged-/usr host): a
  -- mount point cannot be removed or replaced from inside
  for _, d in ipairs { "bin", "sbin", "lib", "lib32", "lib64", "libx32" } do
    local target = lfs.symlinkattributes("/" .. d, "target")
    local src = target and (target:sub(1, 1) == "/" and target or "/" .. target) or "/" .. d
    if sys.is_dir(src) then add(argv, "--ro-bind", src, "/" .. d) end
  end
  add(argv, "--tmpfs", "/etc")
  for _, e in ipairs(M.ETC) do add(argv, "--ro-bind-try", "/etc/" .. e, "/etc/" .. e) end
  for _, e in ipairs { "passwd", "group", "hosts", "hostname" } do
    add(argv, "--ro-bind", o.src .. "/etc/" .. e, "/etc/" .. e)
  end
  if o.network then add(argv, "--ro-bind", o.src .. "/etc/resolv.conf", "/etc/resolv.conf") end
  add(argv, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/run")
  add(argv, "--bind", o.src .. "/run", "/run/dsh")
  add(argv, "--bind", o.src .. "/home", "/home/user")
  add(argv, "--bind", o.src .. "/tmp", "/tmp")
  add(argv, "--tmpfs", "/var", "--symlink", "/tmp", "/var/tmp")
  add(argv, "--tmpfs", "/opt", "--ro-bind", o.dshd, M.DSHD)
  -- Code Mode's Node, read-only at /opt/dsh/node (staged: as the sandbox's own uid)
  local node = require("dsh.node").sandbox_source(o.src == M.STAGE)
  if node then add(argv, "--ro-bind", node, require("dsh.node").SANDBOX_DIR) end
  -- last (not recursive: the mounts on top keep their own flags)
  for _, d in ipairs { "/etc", "/var", "/opt", "/run" } do add(argv, "--remount-ro", d) end
  add(argv, "--chdir", "/home/user")
  add(argv, "--", M.DSHD, "--listen", "/run/dsh/dshd.sock", "--ready-file", "/run/dsh/ready",
    "--access-token-fd", "0", "--user", "user")
  if o.idle_timeout_ms and o.idle_timeout_ms > 0 then
    add(argv, "--idle-timeout-ms", tostring(math.floor(o.idle_timeout_ms)))
  end
  return argv
end

-- The launcher (bash): $1 state dir, $2 stage (empty: none), $3 dshd, $4
-- RLIMIT_NPROC, $5 host uid (empty: keep ours), $6 number of cgroup.procs
-- files that follow, then "--" and the command. Exit 125: a step failed.
M.LAUNCHER = [[
dir=$1 stage=$2 dshd=$3 nproc=$4 uid=$5 n=$6
shift 6
while [ "$n" -gt 0 ]; do echo $$ >"$1" || exit 125; shift; n=$((n - 1)); done
shift
if [ -n "$stage" ]; then
  mount --bind "$dir" "$stage" && mount --bind "$dshd" "$stage/dshd" || exit 125
fi
ulimit -u "$nproc" || exit 125
[ -z "$uid" ] && exec "$@"
exec setpriv --reuid="$uid" --regid="$uid" --clear-groups --no-new-privs -- "$@"
]]

--- True when the launcher makes the sandbox's user and network namespaces
-- (a sandbox with network on a host that does not run as root).
function M.netns_made(o)
  return o.network and o.uid == nil and sys.getuid() ~= 0
end

---@param o {id:string, dir:string, dshd:string, network:boolean, idle_timeout_ms:number, uid:integer|nil,
---  nproc:integer, cgroup_procs:string[]}
-- uid: the sandbox's own host uid (root hosts), nil to run as this user.
-- Without root, a sandbox with network starts in a user and network
-- namespace of its own (unshare) that bubblewrap's outer process stays in,
-- so that slirp4netns can join both (M.netns_made); as root it joins the
-- network namespace bubblewrap made.
function M.launch_argv(o)
  local staged = o.uid ~= nil
  local argv = {}
  if staged then add(argv, "unshare", "--mount", "--propagation", "private", "--") end
  add(argv, "bash", "-c", M.LAUNCHER, "dsh-sandbox", o.dir, staged and M.STAGE or "", o.dshd,
    tostring(o.nproc), o.uid and tostring(o.uid) or "", tostring(#o.cgroup_procs))
  for _, f in ipairs(o.cgroup_procs) do argv[#argv + 1] = f end
  argv[#argv + 1] = "--"
  local made = M.netns_made(o)
  if made then add(argv, "unshare", "--user", "--map-root-user", "--net", "--") end
  local b = M.argv { id = o.id, src = staged and M.STAGE or o.dir, dshd = staged and M.STAGE .. "/dshd" or o.dshd,
    network = o.network, netns_made = made, idle_timeout_ms = o.idle_timeout_ms }
  for _, a in ipairs(b) do argv[#argv + 1] = a end
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
