--- The envd backend of ctx.e2b: an envd (E2B's, self-hosted, or a dshd) at
-- a URL, with no control plane, as E2B's SDK in debug mode talks to
-- http://localhost:49983.
--
-- Setup asks the daemon's /health, so a URL nothing answers fails at once.
-- Nothing can create, pause, resume or kill the sandbox from here: kill and
-- pause return false (nothing was done), and a daemon that stops answering
-- stays unreachable (recover() says so; it cannot be resumed). The id is
-- sandboxId when given, else "envd". info() says what the daemon says of
-- itself; metrics() reads envd's own GET /metrics (stock envd serves it;
-- dshd does not: unimplemented).
local envd = require "dsh.envd"
local errors = require "dsh.errors"
local http = require "dsh.core.http"
local json = require "dsh.json"

local M = { name = "envd" }

M.ID = "envd"

local Handle = {}
Handle.__index = Handle

local function attach(cfg, id)
  local c = envd.client { url = cfg.envdUrl, access_token = cfg.envdAccessToken, user = "user" }
  local ok, err = c:health()
  if not ok then
    c:close()
    return nil, errors.new(err.code == "unauthenticated" and err.code or "unavailable",
      string.format("the envd at %s does not answer /health: %s", cfg.envdUrl, tostring(err.message)))
  end
  return setmetatable({ id = id or cfg.sandboxId or M.ID, envd = c, _cfg = cfg, _health = ok }, Handle)
end

function M.create(cfg) return attach(cfg) end
function M.connect(cfg, id) return attach(cfg, id) end

--- Nothing to kill without a control plane: false.
function Handle.kill(_) return false end
--- Nothing to pause without a control plane: false.
function Handle.pause(_) return false end

--- After a call failed as unavailable: "running" when the daemon answers
-- again, else nil, err (there is nothing to resume it with).
function Handle:recover()
  if self.envd:health { timeout_ms = 2000 } then return "running" end
  return nil, errors.new("unavailable", string.format("the envd at %s does not answer, and with no control plane"
    .. " (the envd backend) it cannot be resumed or replaced", self._cfg.envdUrl))
end

function Handle:info()
  return {
    sandboxId = self.id, state = "running", backend = "envd", envdUrl = self._cfg.envdUrl,
    dshdVersion = self._health.version, metadata = {},
  }
end

--- envd's GET /metrics as one sample of the shape the other backends give.
function Handle:metrics()
  local c = http.client()
  local headers = { Accept = "application/json" }
  if self._cfg.envdAccessToken then headers["X-Access-Token"] = self._cfg.envdAccessToken end
  local res, err = c:fetch { method = "GET", url = self._cfg.envdUrl:gsub("/+$", "") .. "/metrics",
    headers = headers, timeout_ms = 10000 }
  c:close()
  if not res then return nil, envd.transport_error(err) end
  if res.status == 404 then
    return nil, errors.new("unimplemented", "the envd at " .. self._cfg.envdUrl .. " serves no /metrics")
  end
  if res.status ~= 200 then return nil, envd.answer_error(res.status, res.body) end
  local m = json.decode(res.body)
  if type(m) ~= "table" then return nil, errors.new("internal", "envd /metrics answered no JSON object") end
  local ts = tonumber(m.ts)
  return { {
    timestamp = ts and os.date("!%Y-%m-%dT%H:%M:%SZ", ts) or nil, timestampUnix = ts, cpuCount = m.cpu_count,
    cpuUsedPct = m.cpu_used_pct, memUsed = m.mem_used, memTotal = m.mem_total, memCache = m.mem_cache,
    diskUsed = m.disk_used, diskTotal = m.disk_total,
  } }
end

function Handle:close()
  self.envd:close()
end

return M
