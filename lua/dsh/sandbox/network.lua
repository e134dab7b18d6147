--- dsh.sandbox.network: outbound network for a sandbox that asked for one.
--
-- Every sandbox has a network namespace of its own (bubblewrap
-- --unshare-net); with network = true, slirp4netns gives it a user-mode NAT:
-- interface tap0 with 10.0.2.100/24, gateway 10.0.2.2, DNS 10.0.2.3 (which
-- forwards to the host's resolver), IPv4 only, nothing listens for inbound
-- connections. --disable-host-loopback keeps the host's loopback out of
-- reach, so a sandbox never meets another sandbox or a host service bound to
-- 127.0.0.1; hosts on the network, and the host's own non-loopback
-- addresses, are reachable as from any other machine. slirp4netns runs
-- outside the sandbox, sandboxed itself (--enable-sandbox: own mount
-- namespace, no capabilities but binding low ports; --enable-seccomp), never
-- as the host's root: on a root host as the sandbox's root uid (which owns
-- the sandbox's user namespace), through dsh-launch, which gives it a
-- /dev/net/tun of its own; without root as the host user. It exits when the
-- supervisor closes its stdin (-e 0) or dies. dshd is not reached through
-- it: the host talks to dshd over a unix socket.
local async = require "dsh.async"
local errors = require "dsh.errors"
local proc = require "dsh.core.proc"
local sys = require "dsh.core.sysutil"

local M = {}

M.RESOLV_CONF = "nameserver 10.0.2.3\n"
M.READY_TIMEOUT_MS = 10000

function M.available()
  return sys.which("slirp4netns") ~= nil
end

--- Why slirp4netns cannot run here without root, or nil: it must open
-- /dev/net/tun, which many hosts leave to root (mode 0600).
function M.unusable()
  if sys.getuid() == 0 then return nil end
  local f = io.open("/dev/net/tun", "r+b")
  if f then
    f:close()
    return nil
  end
  return "/dev/net/tun cannot be opened by this user (slirp4netns needs it to give a sandbox its network): "
    .. "make it usable (chmod 0666 /dev/net/tun, as most distributions ship it), run as root, "
    .. "or create the sandbox with network = false"
end

---@class dsh.SlirpTarget
---@field pid integer          a process in the sandbox's network namespace
---@field owner integer|nil    root host: run as this uid (the sandbox's root, owner of its user namespace)
---@field launcher string|nil  dsh-launch (root host)
---@field userns_of integer|nil without root, shared identities: join this process's user namespace
--- slirp4netns's command line for the sandbox's network namespace.
---@param t dsh.SlirpTarget
function M.argv(t)
  local argv = {}
  local slirp = { sys.which("slirp4netns") or "slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback",
    "--enable-sandbox", "--enable-seccomp", "--ready-fd=1", "--exit-fd=0" }
  if t.owner then
    argv = { t.launcher, "--tun", t.owner .. ":" .. t.owner, "--as", t.owner .. ":" .. t.owner, "--" }
  elseif t.userns_of then
    argv = { "nsenter", "--target", tostring(t.userns_of), "--user", "--preserve-credentials", "--" }
    slirp[#slirp + 1] = "--netns-type=path"
    slirp[#slirp + 1] = "/proc/" .. t.userns_of .. "/ns/net"
    for _, a in ipairs(slirp) do argv[#argv + 1] = a end
    argv[#argv + 1] = "tap0"
    return argv
  end
  -- by pid: slirp4netns joins the user namespace that owns the network namespace
  for _, a in ipairs(slirp) do argv[#argv + 1] = a end
  argv[#argv + 1] = tostring(t.pid)
  argv[#argv + 1] = "tap0"
  return argv
end

--- Attach outbound network to the sandbox; returns the running slirp4netns
-- (a dsh.Proc) once the interface is configured, or nil, err.
---@param t dsh.SlirpTarget
function M.start(t)
  local why = M.unusable()
  if why then return nil, errors.new("failed_precondition", why) end
  local p, err = proc.spawn {
    argv = M.argv(t), env = { PATH = "/usr/sbin:/usr/bin:/sbin:/bin" },
    stdin = "pipe", stdout = "pipe", stderr = "inherit",
  }
  if not p then return nil, errors.new("unavailable", "cannot start slirp4netns: " .. err.message) end
  -- it writes "1" to the ready fd once tap0 is up and configured
  local tag = async.timeout(M.READY_TIMEOUT_MS, function()
    local seen = ""
    while not seen:find("1", 1, true) do
      local c = p:read()
      if not c then return "eof", seen end
      seen = seen .. c
    end
    return "ready"
  end)
  if tag ~= "ready" then
    M.stop(p)
    return nil, errors.new("unavailable", "slirp4netns did not configure the sandbox's network ("
      .. (tag == "eof" and "it exited" or "timed out") .. ")")
  end
  return p
end

--- Make slirp4netns exit now. It keeps nothing worth a graceful exit: SIGKILL
-- (its exit still takes the kernel a while: it removes tap0).
function M.kill(p)
  if not p or p:status().closed then return end
  p:close_stdin()
  p:signal("SIGKILL", true)
end

--- Stop slirp4netns and wait for it.
function M.stop(p)
  if not p then return end
  M.kill(p)
  p:wait()
  p:wait_quiescent()
  p:close()
end

return M
