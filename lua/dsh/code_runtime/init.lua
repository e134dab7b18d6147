--- dsh.code_runtime: the Code Mode seam, ctx.codeRuntime (reference §2.6).
--
-- A model writes a short program instead of a chain of tool calls; run()
-- runs it in a fresh worker (Lua, TypeScript or JavaScript), serves the
-- program's binding calls here on the host, and returns
--   {logs = {...}, value = v?, error = {kind=, message=}?}
-- with kinds exception, timeout, abort, worker-exit, invalid-output and
-- output-limit. Program failures are results; only misuse raises. No state
-- is kept between runs; dispose() settles every run in flight as `abort`
-- ("runtime disposed") and returns once each run's process group is gone.
--
--   local r = ctx.codeRuntime:run {
--     language = "lua",
--     program = "return tools.double(21)",
--     bindings = { { global = "tools", functions = { double = function(x) return 2 * x end },
--                    errorClass = { name = "ToolCallError", memberNameProperty = "toolName" } } },
--   }
--   --> { logs = {}, value = 42 }
--
-- Everything providers share is here and in dsh.code_runtime._run: config
-- and binding checks, the frame bridge, binding dispatch, the one output
-- ledger, lossless JSON (dsh.code_runtime._wire) and disposal. A provider
-- (code_runtime_local, code_runtime_e2b) only says where the runner files
-- and interpreters are and which ctx.subprocess starts them.
local async = require "dsh.async"
local bindings = require "dsh.code_runtime._bindings"
local errors = require "dsh.errors"
local json = require "dsh.code_runtime._json"
local run = require "dsh.code_runtime._run"
local schema = require "dsh.schema"
local sys = require "dsh.core.sysutil"
local wire = require "dsh.code_runtime._wire"

local M = {}

M.KINDS = run.KINDS
M.LANGUAGES = { lua = true, typescript = true, javascript = true }
M.null, M.array, M.object = wire.null, wire.array, wire.object
M.encode, M.decode = wire.encode, wire.decode
--- The lossless JSON text codec of the boundary (quote, number,
--- encode_json, decode_json, valid_utf8, array_mt): what tools render values with.
M.json = json
M.RESERVED_GLOBALS = bindings.RESERVED_GLOBALS

--- Checks bindings as run() does for language (misuse raises "<prefix>:
-- <method>: ..." at the caller; method defaults to "run") and returns them
-- normalised: each
-- {global=, names=, functions={name=fn}, errorClass=, declarations={name=
-- {description=, params=, returns=}}} (see docs/code-runtime.md, "Bindings").
function M.check_bindings(prefix, language, list, method)
  if not M.LANGUAGES[language] then
    errors.misuse(prefix, '%s: language must be "lua", "typescript" or "javascript"', method or "run")
  end
  return (bindings.check(prefix, language, list, method))
end
M.RESERVED_ERROR_MEMBERS = bindings.RESERVED_ERROR_MEMBERS

--- Runner files, by the name they get beside each other, and where their
--- sources are (module names, found on package.path, or repo-relative paths).
M.RUNNER_FILES = {
  { name = "code-runtime-supervisor.lua", source = "remote/code_runtime/supervisor.lua" },
  { name = "code-runtime-worker.lua", source = "remote/code_runtime/worker.lua" },
  { name = "code-runtime-runner.mjs", source = "remote/code_runtime/runner.mjs" },
  { name = "code-runtime-fast.lua", source = "remote/code_runtime/fast.lua" },
  { name = "code-runtime-json.lua", module = "dsh.code_runtime._json" },
  { name = "code-runtime-wire.lua", module = "dsh.code_runtime._wire" },
}

local read_file = sys.read_file -- nil, err when absent

--- Directories where the runner files (remote/code_runtime) may be:
--- $DSH_RUNNER_DIR, the source tree (lua/dsh/code_runtime/ ->
--- remote/code_runtime), an installed tree (<luadir>/dsh/code_runtime/remote,
--- where cmake --install and luarocks put them).
function M.runner_dirs()
  local here = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$")) or "."
  local list = {}
  if os.getenv("DSH_RUNNER_DIR") then list[1] = os.getenv("DSH_RUNNER_DIR") end
  list[#list + 1] = here .. "/../../../remote/code_runtime"
  list[#list + 1] = here .. "/remote"
  return list
end

--- The runner files {{name=, data=}, ...}, or nil, err when one is missing.
function M.runner_files()
  local out = {}
  for _, f in ipairs(M.RUNNER_FILES) do
    local data
    if f.module then
      local path = package.searchpath(f.module, package.path)
      data = path and read_file(path)
    else
      local base = f.source:match("[^/]+$")
      for _, d in ipairs(M.runner_dirs()) do
        data = read_file(d .. "/" .. base)
        if data then break end
      end
    end
    if not data then
      return nil, errors.new("CODE_RUNTIME_SETUP", "runner file " .. (f.module or f.source) .. " not found")
    end
    out[#out + 1] = { name = f.name, data = data }
  end
  return out
end

-- Config ------------------------------------------------------------------------

M.DEFAULTS = {
  computeMs = 60000,
  maxWallMs = 600000,
  maxOutputBytes = 67108864,
  maxOldGenerationSizeMb = 512,
  maxFrameBytes = 67108864, -- the reference has 256 MiB; see docs/decisions.md ("Code Mode traffic")
  killGraceMs = 2000,
  maxMemoryMb = 512,
  language = "lua",
}
local INT_KEYS = { "computeMs", "maxWallMs", "maxOutputBytes", "maxOldGenerationSizeMb", "maxFrameBytes",
  "killGraceMs", "maxMemoryMb" }
M.LUA_LIBRARIES = { os = true, io = true, debug = true, ffi = true, require = true, load = true }

--- Validates the config every provider shares (reference §2.6 "Config"),
-- plus dsh's own: maxMemoryMb (a Lua worker's address-space bound beyond its
-- code), language (the default of run{}), luaLibraries (whole libraries a
-- Lua program gets: os, io, debug, ffi, require, load). extra: the
-- provider's own keys (name -> true). Raises "<prefix>: ..."; returns the
-- normalised config.
function M.validate_config(prefix, cfg, extra)
  local function fail(msg) errors.misuse(prefix, "%s", msg) end
  local known = { "luaLibraries", "language" }
  for _, k in ipairs(INT_KEYS) do known[#known + 1] = k end
  for k in pairs(extra or {}) do known[#known + 1] = k end
  schema.keys(prefix, cfg, known)
  local out = {}
  for k, v in pairs(cfg) do out[k] = v end
  for _, k in ipairs(INT_KEYS) do
    local v = cfg[k]
    if v == nil then v = M.DEFAULTS[k] end
    out[k] = schema.positive(prefix, "config." .. k, v)
  end
  if out.maxWallMs > 2147483647 then fail("config.maxWallMs must be at most 2147483647") end
  if out.killGraceMs > 2147483647 then fail("config.killGraceMs must be at most 2147483647") end
  if out.maxOutputBytes < 4 then fail("config.maxOutputBytes must be at least 4") end
  if out.maxFrameBytes < out.maxOutputBytes then fail("config.maxFrameBytes must be at least maxOutputBytes") end
  out.language = cfg.language or M.DEFAULTS.language
  if not M.LANGUAGES[out.language] then fail('config.language must be "lua", "typescript" or "javascript"') end
  local libs = {}
  if cfg.luaLibraries ~= nil then
    if type(cfg.luaLibraries) ~= "table" then fail("config.luaLibraries must be a list of library names") end
    for _, l in ipairs(cfg.luaLibraries) do
      if not M.LUA_LIBRARIES[l] then
        fail("config.luaLibraries: unknown library " .. tostring(l) .. " (os, io, debug, ffi, require, load)")
      end
      libs[#libs + 1] = l
    end
  end
  out.luaLibraries = libs
  return out
end

--- The config of a Code Mode provider named name: its keys (the seam's,
--- luaLibraries and extra's) and its validate (an unknown key raises naming
--- the closest known one, dsh.schema; then validate_config; each extra key
--- must be an absolute path).
---@param name string
---@param extra table<string, boolean>  the provider's own keys
---@return string[] keys, fun(cfg:table):table validate
function M.provider_config(name, extra)
  local keys = { "luaLibraries" }
  for k in pairs(M.DEFAULTS) do keys[#keys + 1] = k end
  for k in pairs(extra) do keys[#keys + 1] = k end
  table.sort(keys)
  local function validate(cfg)
    if type(cfg) == "table" then schema.keys(name, cfg, keys) end
    local out = M.validate_config(name, cfg or {}, extra)
    for k in pairs(extra) do
      local v = out[k]
      if v ~= nil and (type(v) ~= "string" or v:sub(1, 1) ~= "/") then
        errors.misuse(name, "config.%s must be an absolute path", k)
      end
    end
    return out
  end
  return keys, validate
end

-- Service ------------------------------------------------------------------------

---@class dsh.code_runtime.Binding
---@field global string
---@field functions table<string, function|{fn:function, description:string?, params:table?, returns:table|string|nil}>
---@field errorClass {name:string, memberNameProperty:string}|nil

---@class dsh.code_runtime.RunOpts
---@field program string
---@field language "lua"|"typescript"|"javascript"|nil  default: the provider's config.language
---@field bindings dsh.code_runtime.Binding[]|nil
---@field signal dsh.AbortSignal|nil

---@class dsh.code_runtime.Result
---@field logs string[]
---@field value any      absent when the program returned nothing (null is M.null)
---@field error {kind:string, message:string}|nil

---@class dsh.code_runtime.Service
---@field name string       the provider's name, the prefix of its messages
---@field language string   the default language
---@field languages string[]
---@field isolation string  a label ("container" in a sandbox, "process" on the host); not a security claim
local Service = {}
Service.__index = Service
Service.__tostring = function(s)
  local n = 0
  for _ in pairs(s._live) do n = n + 1 end
  return string.format("%s(%d live%s)", s.name, n, s._disposing and ", disposed" or "")
end

--- The backend contract: the functions every backend provides. A backend is
--- a table with
---   backend.name, backend.label ("E2B runtime"), backend.isolation
---   backend.subprocess          the ctx.subprocess service runs are started with
---   backend.cwd                 where runs start
---   backend:prepare(check)      -> {root=, luajit=, node=} | nil, err; check() -> nil, err once disposed
--- and fails with CODE_RUNTIME_SETUP (or what ctx.subprocess says).
M.BACKEND = { "prepare" }

--- A service over a backend (M.BACKEND).
---@return dsh.code_runtime.Service
function M.service(backend, cfg)
  schema.backend("dsh.code_runtime", "service", backend, M.BACKEND)
  local svc = setmetatable({
    name = backend.name, language = cfg.language, isolation = backend.isolation or "container",
    languages = { "lua", "typescript", "javascript" },
    _backend = backend, _cfg = cfg, _live = {},
  }, Service)
  svc._ready = async.run(function()
    local check = function()
      if svc._disposing then
        return nil, errors.new("CODE_RUNTIME_DISPOSED", svc.name .. ": runtime disposed during setup")
      end
      return true
    end
    local ok, prep, err = pcall(backend.prepare, backend, check)
    if not ok then return nil, errors.new("CODE_RUNTIME_SETUP", tostring(prep)) end
    return prep, err
  end)
  return svc
end

--- Run one program. Returns its result (never raises for program failures).
---@param o dsh.code_runtime.RunOpts
---@return dsh.code_runtime.Result
function Service:run(o)
  if self._disposing then errors.misuse(self.name, "run() after disposal") end
  errors.check(self.name, "run: options", o, "table")
  errors.check(self.name, "run: program", o.program, "string")
  local lang = o.language or self.language
  if not M.LANGUAGES[lang] then
    errors.misuse(self.name, 'run: language must be "lua", "typescript" or "javascript"')
  end
  if o.signal ~= nil and not async.is_signal(o.signal) then
    errors.misuse(self.name, "run: signal must be an abort signal")
  end
  local list, namespaces = bindings.check(self.name, lang, o.bindings)
  return run.execute(self, {
    program = o.program, language = lang, bindings = list, namespaces = namespaces, signal = o.signal,
  })
end

--- Settle every live run as abort ("runtime disposed"), wait until each one's
-- group is gone and setup has ended. Returns true.
function Service:dispose()
  if self._disposed then return self._disposed:await() end
  local f = async.future()
  self._disposed = f
  self._disposing = true
  local list = {}
  for r in pairs(self._live) do list[#list + 1] = r end
  for _, r in ipairs(list) do r:settle_abort("runtime disposed") end
  for _, r in ipairs(list) do r:wait() end
  pcall(self._ready.await, self._ready)
  f:resolve(true)
  return f:await()
end

--- Number of runs in flight.
function Service:live_count()
  local n = 0
  for _ in pairs(self._live) do n = n + 1 end
  return n
end

M.Service = Service
return M
