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
-- namespace, no capabilities but binding low ports; --enable-seccomp), and
-- exits when the supervisor closes its stdin (-e 0) or dies. dshd is not
-- reached through it: the host talks to dshd over a unix socket.
local async = require "dsh.async"
local errors = require "dsh.errors"
local proc = require "dsh.proc"
local sys = require "dsh.sysutil"

local M = {}

M.RESOLV_CONF = "nameserver 10.0.2.3\n"
M.READY_TIMEOUT_MS = 10000

function M.available()
  return sys.which("slirp4netns") ~= nil
end

--- slirp4netns's command line for the network namespace of process pid;
-- in_userns: run it as root of pid's user namespace, which owns that network
-- namespace and which this host user owns (the way in without root).
function M.argv(pid, in_userns)
  local argv = {}
  if in_userns then argv = { "nsenter", "--target", tostring(pid), "--user", "--preserve-credentials", "--" } end
  for _, a in ipairs {
    sys.which("slirp4netns") or "slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback",
    "--enable-sandbox", "--enable-seccomp", "--ready-fd=1", "--exit-fd=0", "--netns-type=path",
    "/proc/" .. pid .. "/ns/net", "tap0",
  } do
    argv[#argv + 1] = a
  end
  return argv
end

--- Attach outbound network to the namespace of pid; returns the running
-- slirp4netns (a dsh.Proc) once the interface is configured, or nil, err.
function M.start(pid, in_userns)
  local p, err = proc.spawn {
    argv = M.argv(pid, in_userns), env = { PATH = "/usr/sbin:/usr/bin:/sbin:/bin" },
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
