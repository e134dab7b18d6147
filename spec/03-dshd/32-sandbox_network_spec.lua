-- Every local sandbox has a network namespace of its own (issue 7, isolation
-- items 3 and 4). network = true: outbound access through slirp4netns (a
-- host service on a non-loopback address is reachable), never the host's
-- loopback (a dshd without a token there, the attack of the issue, is not),
-- and nothing of another sandbox (no shared loopback, no listener, no socket
-- of its dshd): one sandbox cannot reach, let alone starve, another. network =
-- false: loopback only, nothing outside.
local D = require "helpers.dshd"
local helpers = require "helpers"
local lfs = require "lfs"
local proc = require "dsh.core.proc"
local sandbox = require "dsh.sandbox"
local state = require "dsh.sandbox.state"
local sys = require "dsh.core.sysutil"

local function sh(client, script)
  local p = assert(client:start { cmd = "/bin/bash", args = { "-c", script } })
  local r = assert(p:wait())
  p:close()
  return r.exit_code, r.stdout, r.stderr
end

local function connect_probe(addr)
  local host, port = addr:match("^(.*):(%d+)$")
  return "exec 3<>/dev/tcp/" .. host .. "/" .. port .. " && echo connected"
end

-- An IPv4 address of this host other than loopback (from `ip`).
local function host_address()
  local p = assert(proc.spawn { argv = { "ip", "-4", "-o", "addr", "show", "scope", "global" },
    env = { PATH = "/usr/sbin:/usr/bin:/sbin:/bin" } })
  local out = p:read_all() or ""
  p:wait()
  p:close()
  return out:match("inet (%d+%.%d+%.%d+%.%d+)/")
end

local function interfaces(client)
  local _, out = sh(client, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '")
  return out
end

-- What the current test leaves to undo when it ends (busted keeps one
-- finally per test).
local pending = {}

local function undo()
  for i = #pending, 1, -1 do pending[i]() end
  pending = {}
end

-- A client of a running sandbox for the current test, closed when it ends.
local function client_of(id)
  local sb = assert(sandbox.connect(id))
  pending[#pending + 1] = function() sb:close() end
  return sb.envd
end

describe("local sandbox network", function()
  local open, closed -- ids
  setup(function()
    helpers.isolate_state()
    helpers.run(function()
      local a = assert(sandbox.create {})
      local b = assert(sandbox.create { network = false })
      open, closed = a.id, b.id
      a:close()
      b:close()
    end)
  end)
  teardown(D.restore_state)
  before_each(helpers.snapshot)
  after_each(function()
    helpers.run(undo)
    helpers.assert_clean()
  end)

  -- The issue's attack: a dshd without a token on the host's loopback; and
  -- a service on the host's own non-loopback address, as on the network.
  -- Both stopped when the test ends.
  local function listeners()
    local ip = assert(host_address(), "this spec needs a non-loopback IPv4 address on the host")
    local tokenless = D.bare()
    local outside = D.bare({}, { listen = ip .. ":0", token = sys.random_hex(16) })
    pending[#pending + 1] = function()
      tokenless.stop()
      outside.stop()
    end
    return tokenless, outside
  end

  it("gives each sandbox a network namespace of its own", function()
    helpers.run(function()
      local host_ns = lfs.symlinkattributes("/proc/self/ns/net", "target")
      local seen = { [host_ns] = "the host" }
      local clients = { open = client_of(open), closed = client_of(closed) }
      for name, c in pairs(clients) do
        local code, ns = sh(c, "readlink /proc/self/ns/net")
        assert.equal(0, code)
        ns = ns:gsub("\n$", "")
        assert.is_nil(seen[ns], name .. " shares the network namespace of " .. tostring(seen[ns]))
        seen[ns] = name
      end
      assert.equal("lo tap0 ", interfaces(clients.open))
      assert.equal("lo ", interfaces(clients.closed))
    end)
  end)

  it("with network = true reaches outside but never the host's loopback", function()
    helpers.run(function()
      local tokenless, outside = listeners()
      local c = client_of(open)
      assert.same({ 0, "connected\n", "" }, { sh(c, connect_probe(outside.addr)) })
      local port = tokenless.addr:match(":(%d+)$")
      -- 127.0.0.1 is the sandbox's own loopback; slirp4netns's gateway
      -- (10.0.2.2) does not lead to the host's
      for addr, why in pairs { ["127.0.0.1:" .. port] = "Connection refused",
        ["10.0.2.2:" .. port] = "Network is unreachable" } do
        local code, out, err = sh(c, connect_probe(addr))
        assert.same({ 1, "" }, { code, out }, addr)
        assert.matches(why, err)
      end
      assert.same({ 0, "nameserver 10.0.2.3\n", "" }, { sh(c, "cat /etc/resolv.conf") })
    end)
  end)

  it("with network = false reaches nothing outside", function()
    helpers.run(function()
      local tokenless, outside = listeners()
      local c = client_of(closed)
      for addr, why in pairs { [outside.addr] = "Network is unreachable",
        ["127.0.0.1:" .. tokenless.addr:match(":(%d+)$")] = "Connection refused" } do
        local code, out, err = sh(c, connect_probe(addr))
        assert.same({ 1, "" }, { code, out }, addr)
        assert.matches(why, err)
      end
      -- and no network helper runs for it
      for _, pid in ipairs(D.descendants(assert(state.supervisor_pid(closed)))) do
        assert.is_nil((sys.read_file("/proc/" .. pid .. "/cmdline") or ""):find("slirp4netns", 1, true))
      end
    end)
  end)

  it("shares nothing with another sandbox: no loopback, no socket, no listener", function()
    helpers.run(function()
      listeners()
      local clients = { client_of(open), client_of(closed) }
      -- the other sandbox's dshd socket does not exist inside
      local code, out, err = sh(clients[1], "ls " .. state.socket(closed))
      assert.same({ 2, "" }, { code, out })
      assert.matches("No such file or directory", err)
      -- no TCP listener of the host or of another sandbox is in sight (the
      -- host's loopback has one: the tokenless dshd)
      for _, c in ipairs(clients) do
        local c2, n = sh(c, "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$4 == \"0A\"' | wc -l")
        assert.same({ 0, "0\n" }, { c2, n })
      end
    end)
  end)
end)
