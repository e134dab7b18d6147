--- ctx.subprocess in the sandbox of ctx.e2b (subprocess-e2b).
--
-- A thin backend of the dsh.subprocess seam over the envd protocol, in one of
-- two flavours chosen per sandbox from /health:
--   dshd  (native.lua)  process groups, group signals with a daemon-side
--         TERM→KILL ladder, exact exit signals, replay/resume, WatchGroup,
--         env-scrub and spill — no polling, no secrets on disk.
--   envd  (compat.lua)  E2B's stock daemon: the reference's setsid wrapper,
--         with the env passed through stdin and the pgid on stderr.
-- Each process's state directory is <runtimeRoot>/processes/<uuid> (0700);
-- it only exists while it holds a spill file (§2.3 step 9 decides which stay).
-- pid is the process group id (on dshd the leader's pid).
--
-- Config (schema.lua): protocol = "auto" | "dshd" | "envd", reconnectMs.
local errors = require "dsh.errors"
local subprocess = require "dsh.subprocess"
local schema = require "dsh.providers.subprocess_e2b.schema"
local native = require "dsh.providers.subprocess_e2b.native"
local compat = require "dsh.providers.subprocess_e2b.compat"

local M = {
  name = "subprocess-e2b",
  provides = "subprocess",
  inject = { "e2b" },
  validate = schema.validate,
}

local Backend = {}
Backend.__index = Backend

function Backend:state_dir(id)
  return self.e2b.runtimeRoot .. "/processes/" .. id
end

--- The flavour for this sandbox's daemon ("dshd" or "envd"), asked once.
function Backend:flavor(client)
  if self.protocol ~= "auto" then return self.protocol end
  if self._flavor_of == client then return self._flavor end
  local ext, err = client:extensions()
  if not ext then return nil, err end
  local flavor = "dshd"
  for _, name in ipairs(native.REQUIRED) do
    if not ext[name] then flavor = "envd" end
  end
  self._flavor_of, self._flavor = client, flavor
  return flavor
end

function Backend:start(spec)
  local sb, err = self.e2b:getSandbox()
  if not sb then return nil, err end
  local flavor, ferr = self:flavor(sb.envd)
  if not flavor then return nil, ferr end
  return (flavor == "dshd" and native or compat).start(self, sb.envd, spec)
end

function Backend:resolveExecutable(cmd)
  return self.e2b:resolveExecutable(cmd)
end

--- The backend over an E2B service (ctx.e2b or an equivalent dsh.E2B object).
function M.backend(e2b, cfg)
  cfg = schema.validate(cfg or {})
  return setmetatable({
    name = M.name, cwd = e2b.cwd, e2b = e2b, protocol = cfg.protocol, reconnect_ms = cfg.reconnectMs,
  }, Backend)
end

function M.setup(scope, cfg)
  local e2b = scope.ctx.e2b
  if not e2b then return nil, errors.new("DEPENDENCY_MISSING", M.name .. " requires ctx.e2b") end
  local svc = subprocess.service(M.backend(e2b, cfg))
  scope:on_dispose(function() return svc:dispose() end)
  return svc
end

M.Backend = Backend
return M
