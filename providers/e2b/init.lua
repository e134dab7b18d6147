--- ctx.e2b: the owner of the one sandbox every provider of a context shares.
--
-- Creates a sandbox (or reconnects to sandboxId), makes cwd and the private
-- runtime root (mode 0700; /tmp/.dsh-e2b unless config.runtimeRoot says
-- otherwise: outside the workspace, where the reference has <cwd>/.dsh-e2b),
-- and on dispose applies exactly one disposition: kill, pause or leave. A
-- sandbox it created is killed when its setup fails, or the start of its
-- context (a rollback); a reconnected one never is. Two backends: "local"
-- (default, a dsh.sandbox) and "cloud" (E2B's control plane; envd over HTTPS).
--
-- The sandbox's lifetime never surprises the host (dsh.providers.e2b.session):
-- a sandbox that paused (on its idle timeout, or from elsewhere) is resumed
-- by the next call, files kept, processes gone (what waited on one says so);
-- one that is gone for good (killed, or killed by its timeout) makes every
-- call return SANDBOX_GONE, saying why and when. Work through the context
-- counts as activity. After dispose every call returns DISPOSED.
--
-- info() and metrics() describe the sandbox, and the module's list(),
-- info() and metrics() any sandbox of a backend, in E2B's shapes on every
-- backend (the cloud: E2B's API; local: the host's records and cgroups).
-- A third backend, "envd", attaches to an envd URL with no control plane.
--
-- The host never waits on the sandbox past its own deadlines: a daemon that
-- does not answer ends the calls waiting on it with SANDBOX_UNRESPONSIVE
-- (dsh.envd's watch), and dispose has a deadline, disposeTimeoutMs (4000 ms
-- by default) from ctx:dispose(): past it every call still waiting on the
-- sandbox is given up and the disposition is applied from outside (the
-- local sandbox's supervisor, E2B's control plane). Dispose then reports,
-- as SANDBOX_UNRESPONSIVE, that the sandbox's work was not ended gracefully;
-- so it does when the sandbox stopped answering while the context ran.
local async = require "dsh.async"
local errors = require "dsh.errors"
local loop = require "dsh.core.loop"
local schema = require "dsh.providers.e2b.schema"
local session = require "dsh.providers.e2b.session"

local M = {
  name = "dsh-e2b",
  provides = "e2b",
  inject = {},
  validate = schema.validate,
}

M.EXEC_TIMEOUT_MS = 60000 -- exec's deadline when the caller gives none

---@class dsh.E2B
---@field cwd string
---@field runtimeRoot string
---@field created boolean
---@field timeoutMode string
---@field disposeMode string
---@field backend string
local E2B = {}
E2B.__index = E2B
E2B.__tostring = function(e)
  return "dsh.e2b(" .. (e._handle and e._handle.id or "?") .. (e._disposing and ", disposing" or "") .. ")"
end

--- POSIX shell quoting: 'a'"'"'b' for a'b.
function M.quote(s)
  return "'" .. tostring(s):gsub("'", [['"'"']]) .. "'"
end
E2B.quote = M.quote

-- The reference's text; DISPOSED is the code every disposed service uses.
function E2B._disposed_error(_)
  return errors.new("DISPOSED", "E2B sandbox service is disposing")
end

--- The sandbox {id=, envd=}, or nil, err: DISPOSED once disposal began,
-- SANDBOX_GONE once the sandbox is known to be gone. envd is the sandbox's
-- envd session (see the header): hold on to it, it stays valid across a resume.
function E2B:getSandbox()
  if self._disposing then return nil, self:_disposed_error() end
  if self._gone then return nil, self._gone end
  return self._sb
end

function E2B:sandboxId()
  local h, err = self:getSandbox()
  if not h then return nil, err end
  return h.id
end

--- Run argv in the sandbox without a shell and collect its output:
-- {exit_code=, stdout=, stderr=, signal=} or nil, err. opts: cwd, signal,
-- timeout_ms (EXEC_TIMEOUT_MS by default; 0: none), stdin.
function E2B:exec(argv, opts)
  opts = opts or {}
  local h, err = self:getSandbox()
  if not h then return nil, err end
  local args = {}
  for i = 2, #argv do args[i - 1] = argv[i] end
  local timeout = opts.timeout_ms
  if timeout == nil then timeout = M.EXEC_TIMEOUT_MS end
  local p, serr = h.envd:start { cmd = argv[1], args = args, cwd = opts.cwd, envs = opts.envs,
    timeout_ms = timeout, signal = opts.signal, stdin = opts.stdin ~= nil }
  if not p then return nil, serr end
  if opts.stdin then
    local ok, ierr = p:send_stdin(opts.stdin)
    if ok then ok, ierr = p:close_stdin() end
    if not ok then p:close() return nil, ierr end
  end
  local r, werr = p:wait()
  p:close()
  return r, werr
end

--- The absolute path of executable cmd in the sandbox (reference §2.1):
-- an absolute path must be an executable file; a bare name is looked up with
-- `command -v` in a login shell and must print one absolute line.
function E2B:resolveExecutable(cmd, opts)
  if type(cmd) ~= "string" or cmd == "" then
    return nil, errors.new("E2B_EXECUTABLE", "E2B executable name must be non-empty")
  end
  if cmd:sub(1, 1) == "/" then
    local r, err = self:exec({ "test", "-f", cmd, "-a", "-x", cmd }, opts)
    if not r then return nil, err end
    if r.exit_code ~= 0 then
      return nil, errors.new("E2B_EXECUTABLE", 'E2B executable "' .. cmd .. '" is not an executable file')
    end
    return cmd
  end
  local r, err = self:exec({ "/bin/bash", "-l", "-c", "command -v -- " .. M.quote(cmd) }, opts)
  if not r then return nil, err end
  local line = r.stdout:gsub("\n$", "")
  if r.exit_code ~= 0 or line:sub(1, 1) ~= "/" or line:find("\n") then
    return nil, errors.new("E2B_EXECUTABLE", 'E2B executable "' .. cmd .. '" did not resolve to one absolute path')
  end
  return line
end

local function backend_of(cfg)
  if cfg.backend == "cloud" then return require "dsh.providers.e2b.cloud_backend" end
  if cfg.backend == "envd" then return require "dsh.providers.e2b.envd_backend" end
  return require "dsh.providers.e2b.local_backend"
end

---@class dsh.SandboxInfo
---@field sandboxId string
---@field state string          "running" or "paused"
---@field metadata table<string,string>
---@field startedAt string|nil  ISO 8601
---@field endAt string|nil      when E2B's deadline ends it (cloud)
---@field templateId string|nil
---@field envdVersion string|nil
---@field cpuCount number|nil
---@field memoryMB number|nil
---@field network boolean|nil   false: no internet access
---@field onTimeout string|nil
---@field backend string

--- This sandbox as its backend describes it (dsh.SandboxInfo), or nil, err.
function E2B:info()
  local h, err = self:getSandbox()
  if not h then return nil, err end
  return self._handle:info()
end

--- Resource use of this sandbox: a list of samples, oldest first (E2B's
-- SandboxMetric fields: timestamp, timestampUnix, cpuCount, cpuUsedPct,
-- memUsed, memTotal, memCache, diskUsed, diskTotal; a figure the backend
-- cannot tell is nil). The cloud gives E2B's series (opts.start, opts["end"]:
-- unix seconds), a local sandbox one sample now.
function E2B:metrics(opts)
  local h, err = self:getSandbox()
  if not h then return nil, err end
  return self._handle:metrics(opts)
end

local function query_of(query)
  if query == nil then return {} end
  errors.check("dsh.providers.e2b", "list: query", query, "table")
  local out = {}
  if query.state ~= nil then
    local list = type(query.state) == "string" and { query.state } or query.state
    if type(list) ~= "table" then
      errors.misuse("dsh.providers.e2b", "list: query.state must be a string or a list")
    end
    for _, st in ipairs(list) do
      if st ~= "running" and st ~= "paused" then
        errors.misuse("dsh.providers.e2b", 'list: query.state must be "running" or "paused", got %s', tostring(st))
      end
    end
    out.state = list
  end
  if query.metadata ~= nil then
    errors.check("dsh.providers.e2b", "list: query.metadata", query.metadata, "table")
    for k, v in pairs(query.metadata) do
      if type(k) ~= "string" or type(v) ~= "string" then
        errors.misuse("dsh.providers.e2b", "list: query.metadata must map strings to strings")
      end
    end
    out.metadata = query.metadata
  end
  return out
end

--- The sandboxes of a backend (cfg: a dsh-e2b config; {} is the local one,
-- {backend = "cloud"} E2B's with E2B_API_KEY): a list of dsh.SandboxInfo,
-- newest first, or nil, err. query.state: "running", "paused" or a list of
-- them (default both); query.metadata: pairs every sandbox listed has.
function M.list(cfg, query)
  cfg = schema.validate(cfg or {})
  local q = query_of(query)
  local backend = backend_of(cfg)
  if not backend.list then return nil, errors.new("unimplemented", backend.name .. " backends list no sandboxes") end
  return backend.list(cfg, q)
end

--- One sandbox of a backend (see list): dsh.SandboxInfo or nil, err (not_found).
function M.info(cfg, id)
  errors.check("dsh.providers.e2b", "info: id", id, "string")
  cfg = schema.validate(cfg or {})
  local backend = backend_of(cfg)
  if not backend.info then
    return nil, errors.new("unimplemented", backend.name .. " backends describe no sandboxes")
  end
  return backend.info(cfg, id)
end

--- Resource use of one sandbox of a backend (see E2B:metrics), or nil, err.
function M.metrics(cfg, id, opts)
  errors.check("dsh.providers.e2b", "metrics: id", id, "string")
  cfg = schema.validate(cfg or {})
  local backend = backend_of(cfg)
  if not backend.metrics then return nil, errors.new("unimplemented", backend.name .. " backends have no metrics") end
  return backend.metrics(cfg, id, opts)
end

-- cwd, then the runtime root, then chmod 700 (reference §1 step 3),
-- through envd (the session at setup, the new daemon's client after a resume).
local function prepare(service, envd)
  local ok, err = envd:make_dir(service.cwd)
  if not ok and err.code ~= "already_exists" then return nil, err end
  ok, err = envd:make_dir(service.runtimeRoot)
  if not ok and err.code ~= "already_exists" then return nil, err end
  local p, serr = envd:start { cmd = "chmod", args = { "700", "--", service.runtimeRoot },
    timeout_ms = M.EXEC_TIMEOUT_MS }
  if not p then return nil, serr end
  local r, werr = p:wait()
  p:close()
  if not r then return nil, werr end
  if r.exit_code ~= 0 then
    return nil, errors.new("E2B_SETUP", "chmod 700 " .. service.runtimeRoot .. " failed: " .. r.stderr)
  end
  return true
end

function M.setup(scope, cfg)
  local backend = backend_of(cfg)
  local service = setmetatable({
    cwd = cfg.cwd,
    runtimeRoot = cfg.runtimeRoot,
    created = cfg.sandboxId == nil and backend.name ~= "envd",
    timeoutMode = cfg.onTimeout,
    disposeMode = cfg.onDispose,
    backend = backend.name,
  }, E2B)
  local h, err
  if cfg.sandboxId then
    h, err = backend.connect(cfg, cfg.sandboxId)
  else
    h, err = backend.create(cfg)
  end
  if not h then return nil, err end
  service._handle = h
  -- a local sandbox keeps only /home/user and /tmp across a pause: make the
  -- directories again on the daemon it resumed with
  service._session = session.new(service, h, { on_resume = function() return prepare(service, h.envd) end })
  service._sb = { id = h.id, envd = service._session }
  local setup_done, deadline = false, nil
  -- dispose began: the sandbox has disposeTimeoutMs to let it finish
  -- (not after a rollback: a failed start already ran the cleanup below)
  scope.signal:on_abort(function()
    if not setup_done or service._disposing then return end
    deadline = loop.timer(function()
      deadline:close()
      deadline = nil
      service:_give_up(h, cfg.disposeTimeoutMs)
    end)
    deadline:start(cfg.disposeTimeoutMs)
  end)
  -- Registered first, so it runs last: the disposition, or the kill of a
  -- created sandbox whose setup failed, or whose context's start failed
  -- (why == "rollback": the start undoes all it made, whatever onDispose says;
  -- a reconnected sandbox is only let go).
  scope:on_dispose(function(why)
    service._disposing = true
    if deadline then
      deadline:close()
      deadline = nil
    end
    if not setup_done then
      if service.created then h:kill() end
      h:close()
      return
    end
    local mode = service.disposeMode
    if why == "rollback" then mode = service.created and "kill" or "leave" end
    local ok, derr
    if service._ending then
      ok, derr = service._ending:await()
    else
      ok, derr = service:_dispose_sandbox(h, mode)
    end
    local state = h.envd:unresponsive()
    h:close()
    if ok == nil then return nil, derr end
    if state then return nil, service:_ungraceful(h, state) end
    return true
  end)
  if scope.signal.aborted then return nil, async.abort_error(scope.signal.reason) end
  local ok, perr = prepare(service, service._sb.envd)
  if not ok then return nil, perr end
  setup_done = true
  return service
end

--- Apply the disposition (kill, pause or leave; mode, default onDispose's)
-- through the backend, which needs nothing of the sandbox's daemon: true,
-- or nil, err.
function E2B:_dispose_sandbox(h, mode)
  if self._gone then return true end -- nothing left to kill or pause
  mode = mode or self.disposeMode
  if mode == "kill" then
    local ok, err = h:kill()
    if ok == nil then return nil, err end
  elseif mode == "pause" then
    local ok, err = h:pause()
    if ok == nil then return nil, err end -- false: it was paused already
  end
  return true
end

-- How the disposition reached the sandbox, for the report.
function E2B:_how()
  local mode = self.disposeMode
  if self._gone then return "it was gone already" end
  if mode == "leave" then return "it was left running (onDispose = leave): what the context started may still run" end
  local via = self.backend == "local" and "its supervisor" or "E2B's control plane"
  return (mode == "kill" and "it was killed" or "it was paused") .. " through " .. via
    .. ", which ended what the context had started there"
end

--- Dispose ran past its deadline: give up every call still waiting on the
-- sandbox (later ones fail at once) and apply the disposition from outside.
function E2B:_give_up(h, ms)
  if self._overdue then return end
  local label = "sandbox " .. tostring(h.id)
  self._overdue = errors.new("SANDBOX_UNRESPONSIVE",
    string.format("%s: dispose did not finish within %d ms; calls still waiting on it were given up", label, ms),
    { sandbox = label })
  h.envd:abandon(self._overdue)
  self._ending = async.run(function() return self:_dispose_sandbox(h) end)
end

-- The report of a dispose that could not end the sandbox's work gracefully.
function E2B:_ungraceful(h, state)
  local label = "sandbox " .. tostring(h.id)
  local why = self._overdue and self._overdue.message
    or string.format("%s %s", label, state.why)
  return errors.new("SANDBOX_UNRESPONSIVE", why .. "; " .. self:_how(), { sandbox = label })
end

M.E2B = E2B
return M
