--- dsh.context: a small service container.
--
-- A provider declares the key it provides (optional) and the keys it injects.
-- It is set up only after every injected service is published, and disposed
-- before any of them. One implementation per key: a second registration fails
-- at once. A service is published (ctx[key]) only when its setup succeeded; a
-- failed setup runs the cleanups it had registered, in reverse, and its
-- dependents are never set up. A start() that fails rolls back every
-- provider set up since the last successful start (the sandbox included), so
-- a failed start leaves nothing running. dispose() tears providers down in
-- reverse order and each returns only when everything it started is gone.
-- ctx.<key> of a service a provider offers but has not published raises,
-- naming start(); ctx:get(key) is the lookup that returns nil instead. Once
-- dispose() was called, ctx.<key> raises (DISPOSED) and start() returns nil,
-- DISPOSED; a provider reaches the services it injects through references
-- taken at setup, never through ctx in its cleanups.
--
--   local ctx = context.new()
--   ctx:use(require "dsh.providers.e2b", { cwd = "/home/user/workspace" })
--   ctx:use(require "dsh.providers.fs_e2b")
--   assert(ctx:start())           -- nil, err if a setup failed
--   ctx.fs:readText("notes.md")
--   ctx:dispose()
local async = require "dsh.async"
local errors = require "dsh.errors"

local M = {}
local MOD = "dsh.context"

---@class dsh.Provider
---@field name string
---@field provides string|nil
---@field inject string[]|nil
---@field setup fun(scope:dsh.Scope, config:table):any, any
---@field validate fun(config:table):table|nil  raises on bad config (called by use)
---@field compose fun(ctx:table, config:table)|nil  a composition: adds its parts with ctx:use (no setup)

---@class dsh.Scope
---@field ctx table
---@field config table
---@field signal dsh.AbortSignal   aborts when the context starts disposing
local Scope = {}
Scope.__index = Scope

--- Register a cleanup; they run in reverse order on rollback or disposal.
-- fn may await (it runs inside a task) and must return only once whatever it
-- cleans up is gone. It reports a failure by returning nil, err (a raise is
-- kept as a failure too); every cleanup runs whatever the others did. fn is
-- called with why: "dispose", or "rollback" when a failed setup or a failed
-- start() undoes what the provider made.
---@param fn fun(why:string):any, dsh.Error?
function Scope:on_dispose(fn)
  errors.check(MOD, "on_dispose", fn, "function")
  self._cleanups[#self._cleanups + 1] = fn
end

local function as_error(e)
  if errors.is(e) then return e end
  return errors.new("DISPOSE_FAILED", tostring(e), { cause = e })
end

-- Runs every cleanup of scope (last registered first); returns the list of failures.
local function run_cleanups(scope, failures, why)
  for i = #scope._cleanups, 1, -1 do
    local fn = scope._cleanups[i]
    scope._cleanups[i] = nil
    local ok, res, err = pcall(fn, why)
    if not ok then
      failures[#failures + 1] = as_error(res)
    elseif res == nil and err ~= nil then
      failures[#failures + 1] = as_error(err)
    end
  end
  return failures
end

local Context = {}
Context.__tostring = function(c)
  return "dsh.context(" .. #c._entries .. " providers" .. (c._disposing and ", disposed" or "") .. ")"
end

-- A service looked up once dispose() was called is a mistake, unless the
-- lookup comes from a provider still being disposed and the service it asks
-- for is not gone yet (a provider disposes before the services it injects).
-- The error names the key, the state and the code, where nil would fail
-- later and elsewhere.
local function disposing_lookup(self, key)
  local done = rawget(self, "_disposed"):done()
  local svc = not done and rawget(self, "_services")[key]
  if svc ~= nil and svc ~= false then return svc end
  errors.misuse(MOD, "ctx.%s: DISPOSED: the context %s; its services went with it", tostring(key),
    done and "was disposed" or "is disposing")
end

-- A service some provider offers but that is not published: used before
-- start(), while it sets up, or after a start() that failed. Saying so here
-- beats "attempt to index a nil value" at the caller's next line.
local function unpublished(self, key)
  local entry
  for _, e in ipairs(rawget(self, "_entries")) do
    if e.provider.provides == key then entry = e end
  end
  if entry.state == "failed" then
    errors.misuse(MOD, "ctx.%s: not available: ctx:start() failed (%s)", key, tostring(entry.err))
  end
  errors.misuse(MOD, "ctx.%s: not set up yet (by %s): call ctx:start() first", key, entry.provider.name)
end

Context.__index = function(self, key)
  local method = Context[key]
  if method then return method end
  if type(key) == "string" and key:sub(1, 1) == "_" then return nil end
  if rawget(self, "_disposing") then return disposing_lookup(self, key) end
  local services = rawget(self, "_services")
  local svc = services and services[key]
  if svc == nil and rawget(self, "_claimed") and self._claimed[key] then return unpublished(self, key) end
  return svc
end

Context.__newindex = function(_, key)
  errors.misuse(MOD, "services are published by providers; cannot assign ctx.%s", tostring(key))
end

--- A new, empty context.
function M.new()
  local c = {
    _entries = {},       -- in registration order
    _claimed = {},       -- key -> provider name
    _services = {},      -- key -> published service
    _order = {},         -- entries in the order their setup succeeded
  }
  rawset(c, "_ctl", async.controller())
  return setmetatable(c, Context)
end

--- Add a provider with its config. Raises if its key is already provided.
function Context:use(provider, config)
  if rawget(self, "_disposing") then errors.misuse(MOD, "use: called after dispose()") end
  errors.check(MOD, "use: provider", provider, "table")
  errors.check(MOD, "use: provider.name", provider.name, "string")
  errors.check(MOD, "use: config", config, "table", true)
  -- A composition (dsh.providers.overlay) is no provider of its own: it
  -- checks its whole config, then adds its parts here with use().
  if provider.compose ~= nil then
    errors.check(MOD, "use: provider.compose", provider.compose, "function")
    provider.compose(self, config or {})
    return self
  end
  errors.check(MOD, "use: provider.setup", provider.setup, "function")
  config = config or {}
  -- Config is validated now, synchronously, so bad config fails before any I/O.
  if provider.validate then config = provider.validate(config) or config end
  local key = provider.provides
  if key ~= nil then
    errors.check(MOD, "use: provider.provides", key, "string")
    if self._claimed[key] then
      errors.misuse(MOD, 'use: service "%s" has been registered (by %s); cannot register %s',
        key, self._claimed[key], provider.name)
    end
    self._claimed[key] = provider.name
  end
  local entry = {
    provider = provider, config = config, inject = provider.inject or {},
    state = "waiting", done = async.future(),
  }
  self._entries[#self._entries + 1] = entry
  self:_kick()
  return self
end

function Context:_deps_state(entry)
  for _, key in ipairs(entry.inject) do
    if self._services[key] == nil then
      local owner
      for _, e in ipairs(self._entries) do
        if e.provider.provides == key then owner = e end
      end
      if owner and owner.state == "failed" then return "failed", key end
      return "waiting", key
    end
  end
  return "ready"
end

local function offered(self, key)
  for _, e in ipairs(self._entries) do
    if e.provider.provides == key then return true end
  end
  return false
end

local function fail(entry, code, fmt, ...)
  entry.state = "failed"
  entry.err = errors.new(code, string.format(fmt, ...))
  entry.done:resolve(false)
end

-- Start the setup of every entry whose injected services are all published;
-- fail entries that can never start (a missing service, a cycle).
function Context:_kick()
  if not rawget(self, "_started") then return end
  local progressed = true
  while progressed do
    progressed = false
    for _, entry in ipairs(self._entries) do
      if entry.state == "waiting" then
        local st, key = self:_deps_state(entry)
        if st == "ready" then
          progressed = true
          self:_setup(entry)
        elseif st == "failed" then
          progressed = true
          fail(entry, "DEPENDENCY_FAILED", '%s: not set up because service "%s" failed', entry.provider.name, key)
        elseif not offered(self, key) then
          progressed = true
          fail(entry, "DEPENDENCY_MISSING", '%s: injects "%s", which no provider offers', entry.provider.name, key)
        end
      end
    end
  end
  for _, entry in ipairs(self._entries) do
    if entry.state == "setting-up" then return end
  end
  for _, entry in ipairs(self._entries) do
    if entry.state == "waiting" then
      fail(entry, "DEPENDENCY_CYCLE", "%s: its injected services depend on it (a cycle)", entry.provider.name)
    end
  end
end

function Context:_setup(entry)
  entry.state = "setting-up"
  local scope = setmetatable({
    ctx = self, config = entry.config, signal = self._ctl.signal, _cleanups = {},
  }, Scope)
  entry.scope = scope
  async.run(function()
    local ok, service, err = pcall(entry.provider.setup, scope, entry.config)
    if ok and service == nil and err ~= nil then ok, service = false, err end
    if ok and rawget(self, "_disposing") then
      ok, service = false, errors.new("DISPOSED", entry.provider.name .. ": context disposed during setup")
    end
    if not ok then
      local failure = errors.is(service) and service
        or errors.new("SETUP_FAILED", entry.provider.name .. ": " .. tostring(service), { cause = service })
      local undo = run_cleanups(scope, {}, "rollback")
      if #undo > 0 then
        table.insert(undo, 1, failure)
        failure = errors.combine(undo, "SETUP_FAILED",
          entry.provider.name .. ": setup failed and so did its rollback")
      end
      entry.state = "failed"
      entry.err = failure
      entry.done:resolve(false)
      self:_kick()
      return
    end
    entry.state = "ready"
    entry.service = service
    local key = entry.provider.provides
    if key ~= nil then self._services[key] = service == nil and true or service end
    self._order[#self._order + 1] = entry
    entry.done:resolve(true)
    self:_kick()
  end)
end

-- A failed start: undo every provider set up since the last successful
-- start, dependents first, as dispose would (a created sandbox is killed:
-- e2b's cleanup is told "rollback"). Each keeps failure as its error, so a
-- later start() or ctx.<key> says what went wrong. Returns failure, or
-- SETUP_FAILED holding it and the rollback's own failures.
function Context:_roll_back(failure)
  local undo = {}
  for i = #self._order, 1, -1 do
    local entry = self._order[i]
    if not entry.committed then
      table.remove(self._order, i)
      local key = entry.provider.provides
      if key ~= nil then self._services[key] = nil end
      run_cleanups(entry.scope, undo, "rollback")
      entry.state, entry.err = "failed", failure
    end
  end
  if #undo == 0 then return failure end
  table.insert(undo, 1, failure)
  return errors.combine(undo, "SETUP_FAILED", MOD .. ": start failed and so did its rollback")
end

--- Set up every provider (in dependency order) and wait for all setups.
-- Returns true, or nil and the first failure (every other setup still
-- settles). A failed start rolls back every provider set up since the last
-- successful one, so nothing it made (a sandbox, a process) is left behind.
function Context:start()
  if rawget(self, "_disposing") then
    return nil, errors.new("DISPOSED", MOD .. ": start: the context was disposed")
  end
  rawset(self, "_started", true)
  self:_kick()
  for _, entry in ipairs(self._entries) do entry.done:await() end
  for _, entry in ipairs(self._entries) do
    if entry.state == "failed" then
      if rawget(self, "_disposing") then return nil, entry.err end -- dispose undoes the rest
      return nil, self:_roll_back(entry.err)
    end
  end
  for _, entry in ipairs(self._order) do entry.committed = true end
  return true
end

--- The published service for key, or nil (raises once it went with dispose()).
function Context:get(key)
  if rawget(self, "_disposing") then return disposing_lookup(self, key) end
  return self._services[key]
end

--- Dispose every provider in reverse order of setup. Providers that inject a
-- service go before it. Waits for pending setups first. Returns true, or nil
-- and the failure: a cleanup's own error when one failed, DISPOSE_FAILED
-- listing every failure (in .errors) when several did. Every cleanup runs.
function Context:dispose()
  if rawget(self, "_disposed") then return rawget(self, "_disposed"):await() end
  local done = async.future()
  rawset(self, "_disposed", done)
  rawset(self, "_disposing", true)
  self._ctl:abort(errors.new("DISPOSED", "context is disposing"))
  local failures = {}
  for _, entry in ipairs(self._entries) do
    if entry.state == "setting-up" then entry.done:await() end
  end
  for i = #self._order, 1, -1 do
    local entry = self._order[i]
    local key = entry.provider.provides
    if key ~= nil then self._services[key] = nil end
    run_cleanups(entry.scope, failures, "dispose")
    entry.state = "disposed"
  end
  local err = errors.combine(failures, "DISPOSE_FAILED", MOD .. ": dispose")
  if err then done:resolve(nil, err) else done:resolve(true) end
  return done:await()
end

M.Context = Context
return M
