--- ctx.codeRuntime on this machine (code-runtime-local): the runners run on
-- the host, started through ctx.subprocess (subprocess-local), so each run is
-- a managed process group of this machine. Setup copies the runner files
-- into a private directory (0700, files 0600) and finds LuaJIT and Node.
-- There is no sandbox: this backend is for development, tests and trusted
-- programs (isolation "process").
--
-- Config: the seam's (dsh.code_runtime.validate_config) plus luajit and node
-- (absolute paths; default: this LuaJIT, the provisioned Node, else `node`
-- on PATH) and runtimeDir (default: a fresh <TMPDIR>/dsh-<uid>/code-runtime-<random>).
local code_runtime = require "dsh.code_runtime"
local errors = require "dsh.errors"
local node = require "dsh.node"
local sysutil = require "dsh.core.sysutil"

local M = {
  name = "code-runtime-local",
  provides = "codeRuntime",
  inject = { "subprocess" },
}

local EXTRA = { luajit = true, node = true, runtimeDir = true }

-- Every key (the seam's, luaLibraries and the provider's own, EXTRA) and the check.
M.KEYS, M.validate = code_runtime.provider_config(M.name, EXTRA)

local Backend = {}
Backend.__index = Backend

local function luajit_path()
  local exe = arg and arg[-1]
  if exe and exe:sub(1, 1) == "/" then return exe end
  return os.getenv("DSH_LUAJIT") or sysutil.which("luajit")
end

function Backend:prepare(check)
  local ok, err = check()
  if not ok then return nil, err end
  local files, ferr = code_runtime.runner_files()
  if not files then return nil, ferr end
  local dir = self.dir
  local parent = dir:match("^(.*)/[^/]+$")
  sysutil.mkdir_p(parent, "700")
  ok, err = sysutil.mkdir_p(dir, "700")
  if not ok then return nil, errors.new("CODE_RUNTIME_SETUP", tostring(err)) end
  for _, f in ipairs(files) do
    ok, err = sysutil.write_file(dir .. "/" .. f.name, f.data, "600")
    if not ok then return nil, errors.new("CODE_RUNTIME_SETUP", tostring(err)) end
  end
  local luajit = self.cfg.luajit or luajit_path()
  if not luajit then return nil, errors.new("CODE_RUNTIME_SETUP", "luajit not found") end
  return { root = dir, luajit = luajit, node = self.cfg.node or node.bin() or sysutil.which("node") }
end

local function default_dir()
  local tmp = os.getenv("TMPDIR")
  if not tmp or tmp:sub(1, 1) ~= "/" then tmp = "/tmp" end
  return tmp .. "/dsh-" .. sysutil.getuid() .. "/code-runtime-" .. sysutil.random_id(12)
end

function M.setup(scope, cfg)
  local sub = scope.ctx.subprocess
  if type(sub) ~= "table" or sub.name ~= "subprocess-local" then
    return nil, errors.new("DEPENDENCY_MISSING", M.name .. " requires subprocess-local as ctx.subprocess")
  end
  local backend = setmetatable({
    name = M.name, label = "local runtime", isolation = "process", subprocess = sub, cwd = sub.cwd,
    cfg = cfg, dir = cfg.runtimeDir or default_dir(),
  }, Backend)
  local svc = code_runtime.service(backend, cfg)
  scope:on_dispose(function()
    svc:dispose()
    if not cfg.runtimeDir then sysutil.rm_rf(backend.dir) end
  end)
  return svc
end

return M
