--- dsh.sandbox.bwrap: the command line that starts a local sandbox.
--
-- The supervisor runs dsh-launch (launcher/launch.h), which prepares what
-- bubblewrap cannot (cgroups, limits, the state directory and disk image in
-- a private mount namespace, dshd's socket on the host, the token pipe, the
-- user namespace with its two identities) and then runs bubblewrap, with:
-- private pid, ipc, uts, cgroup and network namespaces (a sandbox with
-- network = true gets outbound access through dsh.sandbox.network, never the
-- host's); read-only system directories (/usr, /bin, /sbin, /lib*, /etc,
-- /var, /opt, /run), each a read-only mount that cannot be removed or
-- replaced; the root itself a writable tmpfs (memory, within the sandbox's
-- memory limit) so that a workspace can be made at any path; a curated /etc
-- (only what programs need to run: no host secrets such as shadow or ssh
-- keys, nor files that carry credentials on some hosts, such as
-- /etc/environment, npmrc or gitconfig, unless create's `etc` names them);
-- generated passwd/group naming root and `user` (uid 1000); a writable
-- /home/user and /tmp (in the sandbox's disk image when it has one); dshd
-- read-only at /opt/dsh/bin/dshd; an empty /proc/cmdline. Nothing else of
-- the host is visible: no host home directories, no project tree.
--
-- Identities (dsh.sandbox.uids): with two, dshd runs as the sandbox's root
-- with only the capabilities it needs to serve `user` (CAPS) and commands as
-- `user`; bubblewrap then runs as root of the namespace the launcher made.
-- With one ("shared"), bubblewrap makes the user namespace itself and
-- everything runs as `user`, as before two identities existed.
local lfs = require "lfs"
local sys = require "dsh.core.sysutil"

local M = {}

M.UID, M.GID = 1000, 1000
M.DSHD = "/opt/dsh/bin/dshd"
M.STAGE = "/run/dsh/stage" -- where a root host's launcher binds the state directory
-- dsh-launch's descriptors (launcher/launch.h)
M.FD_LISTEN, M.FD_TOKEN, M.FD_INFO = 3, 4, 5

-- What dshd keeps as the sandbox's root: switching to `user` for commands,
-- serving files on its behalf (owner, modes, its directories), signalling
-- its processes, and letting a root service bind a low port of its own
-- network. Not CAP_SYS_ADMIN, CAP_SYS_RESOURCE, CAP_SYS_PTRACE nor CAP_NET_ADMIN.
M.CAPS = { "cap_setuid", "cap_setgid", "cap_chown", "cap_fowner", "cap_dac_override", "cap_kill",
  "cap_net_bind_service" }

-- /etc entries programs commonly need; everything else of the host's /etc stays out.
M.ETC = {
  "alternatives", "bash.bashrc", "bash_completion", "bash_completion.d", "ca-certificates",
  "ca-certificates.conf", "debian_version", "gai.conf", "host.conf", "inputrc",
  "issue", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "locale.alias", "locale.gen",
  "localtime", "login.defs", "magic", "mime.types", "nsswitch.conf", "os-release", "profile",
  "profile.d", "protocols", "rpc", "services", "shells", "skel", "ssl/certs",
  "ssl/openssl.cnf", "terminfo", "timezone", "vim", "xdg", "nodejs",
}
-- Generated per sandbox (dsh.sandbox.bwrap.etc_files).
M.ETC_OWN = { "passwd", "group", "hosts", "hostname", "resolv.conf", "cmdline" }

local function add(argv, ...)
  for i = 1, select("#", ...) do argv[#argv + 1] = select(i, ...) end
end

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
    cmdline = "", -- what the sandbox sees as /proc/cmdline: not the host's boot arguments
  }
end

--- Check create's `etc` option: names of further host /etc entries to mount
-- read-only (relative, no "..", not one the sandbox generates). Raises.
function M.check_etc(mod, etc)
  if etc == nil then return end
  if type(etc) ~= "table" then error(mod .. ": create: etc must be a list of /etc entry names", 4) end
  for i, name in ipairs(etc) do
    if type(name) ~= "string" or name == "" or name:sub(1, 1) == "/" or name:find("%.%.") then
      error(string.format("%s: create: etc[%d] must name an entry under /etc (such as \"gitconfig\")", mod, i), 4)
    end
    for _, own in ipairs(M.ETC_OWN) do
      if name == own then error(string.format("%s: create: etc[%d]: /etc/%s is the sandbox's own", mod, i, name), 4) end
    end
  end
end

---@class dsh.BwrapPaths
---@field home string   source of /home/user
---@field tmp string    source of /tmp
---@field etc string    directory holding the generated /etc files
---@field dshd string   the dshd binary

---@param o {id:string, paths:dsh.BwrapPaths, network:boolean, netns_made:boolean, separate:boolean,
---  idle_timeout_ms:number, max_open_files:integer, etc:string[]|nil, staged:boolean}
function M.argv(o)
  local argv = { sys.which("bwrap") or "/usr/bin/bwrap" }
  if o.separate then
    -- root of the launcher's user namespace: keep only what dshd needs
    add(argv, "--cap-drop", "all")
    for _, c in ipairs(M.CAPS) do add(argv, "--cap-add", c) end
  else
    add(argv, "--unshare-user", "--uid", tostring(M.UID), "--gid", tostring(M.GID), "--disable-userns")
  end
  add(argv, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try")
  if not o.netns_made then add(argv, "--unshare-net") end
  add(argv, "--die-with-parent", "--new-session", "--hostname", "dsh-" .. o.id:sub(1, 12))
  add(argv, "--info-fd", tostring(M.FD_INFO))
  add(argv, "--ro-bind", "/usr", "/usr")
  -- /bin and friends are mounts (not links, as on a merged-/usr host): a
  -- mount point cannot be removed or replaced from inside
  for _, d in ipairs { "bin", "sbin", "lib", "lib32", "lib64", "libx32" } do
    local target = lfs.symlinkattributes("/" .. d, "target")
    local src = target and (target:sub(1, 1) == "/" and target or "/" .. target) or "/" .. d
    if sys.is_dir(src) then add(argv, "--ro-bind", src, "/" .. d) end
  end
  -- parents bubblewrap would make 0700 when it runs as root: made 0755 first
  add(argv, "--tmpfs", "/etc", "--dir", "/etc/ssl")
  for _, e in ipairs(M.ETC) do add(argv, "--ro-bind-try", "/etc/" .. e, "/etc/" .. e) end
  for _, e in ipairs(o.etc or {}) do add(argv, "--ro-bind-try", "/etc/" .. e, "/etc/" .. e) end
  for _, e in ipairs { "passwd", "group", "hosts", "hostname" } do
    add(argv, "--ro-bind", o.paths.etc .. "/" .. e, "/etc/" .. e)
  end
  if o.network then add(argv, "--ro-bind", o.paths.etc .. "/resolv.conf", "/etc/resolv.conf") end
  -- the host's boot arguments are not the sandbox's business
  add(argv, "--proc", "/proc", "--ro-bind", o.paths.etc .. "/cmdline", "/proc/cmdline")
  add(argv, "--dev", "/dev", "--chmod", "1777", "/dev/shm", "--tmpfs", "/run")
  add(argv, "--dir", "/home", "--bind", o.paths.home, "/home/user")
  add(argv, "--bind", o.paths.tmp, "/tmp")
  add(argv, "--tmpfs", "/var", "--symlink", "/tmp", "/var/tmp")
  add(argv, "--perms", "0700", "--dir", "/root")
  add(argv, "--tmpfs", "/opt", "--dir", "/opt/dsh", "--dir", "/opt/dsh/bin", "--ro-bind", o.paths.dshd, M.DSHD)
  -- Code Mode's Node, read-only at /opt/dsh/node (staged: as a host uid of the sandbox's own)
  local node = require("dsh.node").sandbox_source(o.staged)
  if node then add(argv, "--ro-bind", node, require("dsh.node").SANDBOX_DIR) end
  -- last (not recursive: the mounts on top keep their own flags)
  for _, d in ipairs { "/etc", "/var", "/opt", "/run" } do add(argv, "--remount-ro", d) end
  -- the root is the sandbox's scratch space: a workspace may be made at any
  -- path (sticky, as /tmp: nobody removes what another made)
  add(argv, "--chmod", "1777", "/")
  add(argv, "--chdir", "/home/user")
  add(argv, "--", M.DSHD, "--listen", "fd:" .. M.FD_LISTEN, "--access-token-fd", tostring(M.FD_TOKEN),
    "--user", "user", "--seccomp", "--max-open-files", tostring(o.max_open_files))
  if o.idle_timeout_ms and o.idle_timeout_ms > 0 then
    add(argv, "--idle-timeout-ms", tostring(math.floor(o.idle_timeout_ms)))
  end
  return argv
end

--- True when the launcher's command makes the sandbox's user and network
-- namespaces before bubblewrap (network with shared identities on a host
-- that does not run as root: slirp4netns must be able to join both).
function M.netns_made(o)
  return o.network and not o.separate and sys.getuid() ~= 0
end

--- Path of dsh-launch: $DSH_LAUNCH, else beside dshd (a build tree, or an
-- installed bin/), else on $PATH.
function M.launcher(dshd)
  local env = os.getenv("DSH_LAUNCH")
  if env and env ~= "" then return env end
  local dir = dshd:match("^(.*)/[^/]*$") or "."
  local here = dir .. "/dsh-launch"
  if lfs.attributes(here, "mode") == "file" then return here end
  return sys.which("dsh-launch")
end

---@class dsh.LaunchOpts
---@field id string
---@field dir string              the state directory
---@field dshd string             the dshd binary
---@field launcher string|nil     dsh-launch (default: beside dshd)
---@field ids dsh.SandboxIdentities
---@field image boolean           the files live in dir/disk.img
---@field network boolean
---@field idle_timeout_ms number
---@field nproc integer           RLIMIT_NPROC
---@field max_open_files integer  every command's RLIMIT_NOFILE
---@field dshd_open_files integer dshd's own
---@field cgroup_procs string[]
---@field sysctls table[]         {name, value} for the sandbox's user namespace
---@field etc string[]|nil        further host /etc entries

--- The supervisor's command: dsh-launch with its steps, then bubblewrap.
---@param o dsh.LaunchOpts
function M.launch_argv(o)
  local separate = o.ids.mode ~= "shared"
  local staged = o.ids.mode == "dedicated"
  local argv = { o.launcher or M.launcher(o.dshd) or "dsh-launch" }
  for _, f in ipairs(o.cgroup_procs) do add(argv, "--cgroup-procs", f) end
  add(argv, "--rlimit", "nproc=" .. o.nproc, "--rlimit", "nofile=" .. o.dshd_open_files)
  local src = staged and M.STAGE or o.dir
  local paths = { home = src .. "/home", tmp = src .. "/tmp", etc = src .. "/etc", dshd = o.dshd }
  if staged then
    add(argv, "--stage", o.dir .. "=" .. M.STAGE)
    paths.dshd = M.STAGE .. "/dshd"
    if o.image then
      -- dshd and /etc's files come from the image, so that no host path shows inside
      local img = M.STAGE .. "/disk"
      add(argv, "--disk", o.dir .. "/disk.img=" .. img)
      add(argv, "--copy", o.dshd .. "=" .. img .. "/.dsh/dshd")
      for _, e in ipairs(M.ETC_OWN) do
        if sys.exists(o.dir .. "/etc/" .. e) then
          add(argv, "--copy", M.STAGE .. "/etc/" .. e .. "=" .. img .. "/.dsh/etc/" .. e)
        end
      end
      paths = { home = img .. "/home", tmp = img .. "/tmp", etc = img .. "/.dsh/etc", dshd = img .. "/.dsh/dshd" }
    else
      add(argv, "--copy", o.dshd .. "=" .. M.STAGE .. "/dshd")
    end
  end
  -- made in the sandbox's user namespace (inside ids) when missing
  local uid = separate and (":" .. M.UID .. ":" .. M.GID) or ""
  local root = separate and ":0:0" or ""
  add(argv, "--mkdir", paths.home .. "=0755" .. uid, "--mkdir", paths.tmp .. "=1777" .. root)
  add(argv, "--listen", o.dir .. "/dshd.sock", "--token", "--info")
  if separate then
    local i = o.ids
    if staged then add(argv, "--as", i.root_uid .. ":" .. i.root_gid) end
    add(argv, "--map-uids", string.format("0 %d 1 %d %d 1", i.root_uid, M.UID, i.uid),
      "--map-gids", string.format("0 %d 1 %d %d 1", i.root_gid, M.GID, i.gid))
    for _, s in ipairs(o.sysctls or {}) do add(argv, "--ns-sysctl", s[1] .. "=" .. tostring(s[2])) end
  end
  argv[#argv + 1] = "--"
  local made = M.netns_made { network = o.network, separate = separate }
  if made then add(argv, "unshare", "--user", "--map-root-user", "--net", "--") end
  local b = M.argv { id = o.id, paths = paths, network = o.network, netns_made = made, separate = separate,
    idle_timeout_ms = o.idle_timeout_ms, max_open_files = o.max_open_files, etc = o.etc, staged = staged }
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
