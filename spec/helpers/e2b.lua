--- Spec helpers for ctx.e2b: the E2B stand-in (spec/fixtures/e2b-api.mjs)
-- for the cloud backend, and host-side process checks.
--
--   local E = require "helpers.e2b"
--   describe("...", function()
--     D.use_state()              -- helpers.dshd: isolated state, assert_clean after each test
--     local S = E.use_standin()  -- the stand-in for the block
--   ctx:use(require "dsh.providers.e2b", S:config { onDispose = "pause" })
--
-- The stand-in is one Node process per spec file. Its dsh.core.proc handle is
-- left out of the per-test leak check (it lives from setup to teardown);
-- stop() closes it and fails unless every process the stand-in started
-- (node, bubblewrap, dshd and all their descendants) is gone, and unless
-- every API call it got was one of the contract's routes and every answer
-- it gave was one the contract allows: a client (dsh, or the SDK) asking
-- for a path E2B does not serve fails the spec that made it do so.
--
-- Its templates: "base" and "agent-template" (envd 0.6.4, all dsh needs)
-- and "old-envd" (envd 0.2.0, older than dsh needs).
local helpers = require "helpers"
local http = require "dsh.core.http"
local json = require "dsh.json"
local lfs = require "lfs"
local loop = require "dsh.core.loop"
local proc = require "dsh.core.proc"
local sys = require "dsh.core.sysutil"

local M = {}

-- Host processes -----------------------------------------------------------------------

--- Live (not zombie) host pids whose command line — or, with environ, whose
-- environment — contains s.
function M.procs_with(s, environ)
  local out = {}
  for name in lfs.dir("/proc") do
    if name:match("^%d+$") and helpers.pid_alive(name) then
      local text = sys.read_file("/proc/" .. name .. "/cmdline") or ""
      if environ then text = text .. "\0" .. (sys.read_file("/proc/" .. name .. "/environ") or "") end
      if text:find(s, 1, true) then out[#out + 1] = tonumber(name) end
    end
  end
  return out
end

--- A pid and all its descendants (host pids).
function M.tree(pid, out)
  out = out or {}
  out[#out + 1] = tonumber(pid)
  local ok, iter, d = pcall(lfs.dir, "/proc/" .. pid .. "/task")
  if not ok then return out end
  for tid in iter, d do
    if tid:match("^%d+$") then
      for c in (sys.read_file("/proc/" .. pid .. "/task/" .. tid .. "/children") or ""):gmatch("%d+") do
        M.tree(c, out)
      end
    end
  end
  return out
end

--- Every host pid of a running local sandbox (its supervisor and everything below).
function M.local_pids(id)
  local sup = require("dsh.sandbox.state").supervisor_pid(id)
  if not sup then return {} end
  return M.tree(sup)
end

--- The pids of list still alive after waiting up to timeout_ms (default 5000) for them to go.
function M.survivors(pids, timeout_ms)
  local left
  helpers.eventually(function()
    left = {}
    for _, p in ipairs(pids) do
      if helpers.pid_alive(p) then left[#left + 1] = p end
    end
    return #left == 0
  end, timeout_ms or 5000, 20)
  return left
end

-- The E2B stand-in -------------------------------------------------------------------------

--- In a describe block: the stand-in, started in setup and stopped (checked
-- to leave nothing) in teardown. Returns it, filled in when setup runs.
function M.use_standin(opts)
  local env = getfenv(2)
  local S = {}
  env.setup(function() M.standin(S, opts) end)
  env.teardown(function() if S.proc then S:stop() end end)
  return S
end

local Standin = {}
Standin.__index = Standin

M.TEMPLATES = { "agent-template=0.6.4", "old-envd=0.2.0" }

--- Start spec/fixtures/e2b-api.mjs (call from setup). Returns the stand-in
-- (filled into `into` when given). opts.args: more options for it
-- ({"--tls-domain", "e2b.test"}).
function M.standin(into, opts)
  local S
  helpers.run(function()
    local dir = helpers.tmpdir()
    local key = "e2b_spec_" .. sys.random_hex(16)
    local argv = { "node", helpers.root .. "/spec/fixtures/e2b-api.mjs", "--api-key", key,
      "--dshd", helpers.bin("dshd"), "--state-dir", dir .. "/sandboxes" }
    for _, t in ipairs(M.TEMPLATES) do
      argv[#argv + 1] = "--template"
      argv[#argv + 1] = t
    end
    for _, a in ipairs(opts and opts.args or {}) do argv[#argv + 1] = a end
    local p = assert(proc.spawn {
      argv = argv,
      env = { PATH = os.getenv("PATH") or "/usr/bin:/bin", HOME = dir, LANG = "C.UTF-8" },
      stdin = "null", stdout = "pipe", stderr = "inherit",
    })
    local line = ""
    while not line:find("\n", 1, true) do
      local chunk = p:read()
      if not chunk then break end
      line = line .. chunk
    end
    local info = json.decode(line:match("^[^\n]*"))
    if type(info) ~= "table" or not info.api then
      p:terminate(1000)
      p:wait_quiescent()
      p:close()
      helpers.rm_rf(dir)
      error("the E2B stand-in did not start: " .. line, 0)
    end
    helpers.outlives_test(p) -- lives for the whole spec file; stop() closes it
    S = setmetatable(into or {}, Standin)
    S.proc, S.dir, S.key, S.pid = p, dir, key, info.pid
    S.api_url, S.router_url = "http://127.0.0.1:" .. info.api, "http://127.0.0.1:" .. info.router
    S.tls_port, S.ca = info.tls, info.ca
  end)
  return S
end

--- A ctx.e2b config for the cloud backend through the stand-in, merged with extra.
-- Keys set to false in extra are left out (e.g. apiKey = false).
function Standin:config(extra)
  local cfg = { backend = "cloud", apiKey = self.key, apiUrl = self.api_url, sandboxUrl = self.router_url }
  for k, v in pairs(extra or {}) do
    if v == false and (k == "apiKey" or k == "apiUrl" or k == "sandboxUrl") then cfg[k] = nil else cfg[k] = v end
  end
  return cfg
end

--- A request to the stand-in's API port: {status=, body=<decoded JSON or text>}.
-- key: X-API-KEY (default the right one; false: none).
function Standin:request(method, path, body, key)
  local c = http.client()
  local headers = { ["Content-Type"] = "application/json" }
  if key == nil then key = self.key end
  if key then headers["X-API-KEY"] = key end
  local res, err = c:fetch { method = method, url = self.api_url .. path, headers = headers,
    body = body and json.encode(body) or nil, timeout_ms = 30000 }
  c:close()
  assert(res, tostring(err))
  local decoded = res.body ~= "" and json.decode(res.body) or nil
  return { status = res.status, body = decoded == nil and res.body or decoded }
end

--- Every API call the stand-in recorded, from index first (default 1):
-- {method=, path=, body=, key=, status=} (and query=, when it had one).
function Standin:calls(first)
  local all = self:request("GET", "/__calls").body
  local out = {}
  for i = first or 1, #all do
    local c = all[i]
    out[#out + 1] = { method = c.method, path = c.path, body = c.body, key = c.key, status = c.status,
      query = c.query ~= "" and c.query or nil }
  end
  return out
end

--- The index the next recorded call will have.
function Standin:mark()
  return #self:request("GET", "/__calls").body + 1
end

--- Routed requests recorded since index first: {method=, path=, sandboxId=, apiKey=,
-- accessToken=, chunked=}; and the index the next one will have.
function Standin:routed(first)
  local all = self:request("GET", "/__router").body
  local out = {}
  for i = first or 1, #all do out[#out + 1] = all[i] end
  return out, #all + 1
end

--- Queue a fault: the next count (default 1) calls of the route (method and
-- the contract's path template, "/sandboxes/{sandboxID}/connect") answer
-- status; retry_after: a Retry-After header (seconds).
function Standin:fault(method, path, status, count, retry_after, message)
  local r = self:request("POST", "/__faults", { method = method, path = path, status = status, count = count,
    retryAfter = retry_after, message = message })
  assert(r.status == 204, "the stand-in refused the fault: " .. tostring(type(r.body) == "table" and r.body.message))
end

--- Hold the next pause or resume of sandbox id in "pausing"/"resuming"
-- until release(id).
function Standin:gate(id)
  assert(self:request("POST", "/__gate", { sandboxID = id }).status == 204, "no sandbox " .. id .. " to gate")
end

function Standin:release(id)
  assert(self:request("POST", "/__release", { sandboxID = id }).status == 204, "no sandbox " .. id .. " to release")
end

--- The routes the stand-in serves: {{method=, path=, deprecated=}, ...}.
function Standin:routes()
  return self:request("GET", "/__routes").body
end

--- Every recorded call that no route of the contract served, or whose
-- answer the contract does not allow (the stand-in's own mistake).
function Standin:strays()
  local out = {}
  for _, c in ipairs(self:request("GET", "/__calls").body) do
    if c.route == nil or c.route == json.null then
      out[#out + 1] = c.method .. " " .. c.path .. ": no such route"
    elseif type(c.problems) == "table" and #c.problems > 0 then
      out[#out + 1] = c.method .. " " .. c.path .. ": " .. table.concat(c.problems, "; ")
    end
  end
  return out
end

--- The stand-in's sandboxes: {sandboxID=, state=, dir=, pids=}.
function Standin:sandboxes()
  return self:request("GET", "/__sandboxes").body
end

--- The state of sandbox id ("running", "paused"), or nil when the stand-in
-- has no such sandbox (asked without an API call, so nothing is recorded).
function Standin:state(id)
  for _, s in ipairs(self:sandboxes()) do
    if s.sandboxID == id then return s.state end
  end
  return nil
end

--- Host pids of a running stand-in sandbox (bubblewrap, dshd and below).
function Standin:pids(id)
  for _, s in ipairs(self:sandboxes()) do
    if s.sandboxID == id then return s.pids end
  end
  return {}
end

--- The 127.0.0.1 port the dshd of a running stand-in sandbox listens on.
function Standin:port(id)
  for _, s in ipairs(self:sandboxes()) do
    if s.sandboxID == id then return s.port end
  end
end

--- Established TCP connections accepted on 127.0.0.1:port (this network
-- namespace, which the stand-in's sandboxes share).
function M.established(port)
  local n = 0
  local want = string.format("0100007F:%04X", port)
  for line in (sys.read_file("/proc/net/tcp") or ""):gmatch("[^\n]+") do
    local localaddr, st = line:match("^%s*%d+:%s+(%S+)%s+%S+%s+(%x+)")
    if localaddr == want and st == "01" then n = n + 1 end
  end
  return n
end

--- Stop the stand-in (call from teardown) and fail unless everything it
-- started is gone and its state directory can be removed.
function Standin:stop()
  local left, strays
  helpers.run(function()
    strays = self:strays()
    local pids = { self.pid }
    for _, s in ipairs(self:sandboxes()) do
      for _, p in ipairs(s.pids) do pids[#pids + 1] = p end
    end
    loop.track(self.proc, "proc")
    self.proc:terminate(10000)
    self.proc:wait()
    self.proc:wait_quiescent()
    self.proc:close()
    left = M.survivors(pids)
    local named = M.procs_with(self.dir)
    for _, p in ipairs(named) do left[#left + 1] = p end
  end)
  helpers.rm_rf(self.dir)
  assert(#left == 0, "the E2B stand-in left processes running: " .. table.concat(left, " "))
  assert(#strays == 0, "calls E2B's contract does not serve (or answers it does not allow):\n"
    .. table.concat(strays, "\n"))
end

-- Stock envd ------------------------------------------------------------------------------

--- A ctx.e2b owner (a provider table) over an envd client that is no sandbox
-- dsh created (a bare `dshd --envd-compat`, standing for E2B's stock envd):
-- the real dsh.E2B service class with cwd and runtimeRoot, the runtime root
-- made at setup, the client closed at disposal. Returns owner, service.
function M.envd_owner(client, cwd, id)
  id = id or "envd-compat"
  local service = setmetatable({
    cwd = cwd, runtimeRoot = cwd .. "/.dsh-e2b", created = true, backend = "envd-compat",
    _handle = { id = id, envd = client }, _sb = { id = id, envd = client },
  }, require("dsh.providers.e2b").E2B)
  local owner = {
    name = "e2b-envd-compat", provides = "e2b",
    setup = function(scope)
      assert(client:make_dir(service.runtimeRoot))
      scope:on_dispose(function()
        service._disposing = true
        client:close()
      end)
      return service
    end,
  }
  return owner, service
end

return M
