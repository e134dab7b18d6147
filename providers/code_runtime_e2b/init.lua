--- ctx.codeRuntime in the sandbox of ctx.e2b (code-runtime-e2b).
--
-- Setup uploads the runner files into ctx.e2b.runtimeRoot (mode 0600) and
-- finds LuaJIT and Node there (Node: the provisioned /opt/dsh/node first, so
-- TypeScript works on a local sandbox; then `node` on the login PATH; none is
-- fine, only TypeScript/JavaScript runs then fail). Each run is a managed
-- process group started through ctx.subprocess, which must be subprocess-e2b
-- (its groups, signals and quiescence are what make cleanup exact).
--
-- The upload goes through the envd client ctx.e2b exposes (one multipart
-- request for all files) rather than ctx.fs: the seam has no multi-file write
-- and this keeps setup at two round trips (upload, then chmod + lookup).
--
-- Config: the seam's (dsh.code_runtime.validate_config) plus luajit and node
-- (absolute paths inside the sandbox, overriding the lookup).
local code_runtime = require "dsh.code_runtime"
local errors = require "dsh.errors"
local node = require "dsh.node"

local M = {
  name = "code-runtime-e2b",
  provides = "codeRuntime",
  inject = { "e2b", "subprocess" },
}

local EXTRA = { luajit = true, node = true }

-- Every key (the seam's, luaLibraries and the provider's own, EXTRA) and the check.
M.KEYS, M.validate = code_runtime.provider_config(M.name, EXTRA)

local Backend = {}
Backend.__index = Backend

local function q(s) return "'" .. s:gsub("'", [['"'"']]) .. "'" end

function Backend:prepare(check)
  local ok, err = check()
  if not ok then return nil, err end
  local sb, serr = self.e2b:getSandbox()
  if not sb then return nil, serr end
  local files, ferr = code_runtime.runner_files()
  if not files then return nil, ferr end
  local root = self.e2b.runtimeRoot
  local list, paths = {}, {}
  for i, f in ipairs(files) do
    list[i] = { path = root .. "/" .. f.name, data = f.data }
    paths[i] = q(list[i].path)
  end
  ok, err = check()
  if not ok then return nil, err end
  local w, werr = sb.envd:write_files(list)
  if not w then return nil, errors.new("CODE_RUNTIME_SETUP", "upload failed: " .. werr.message) end
  ok, err = check()
  if not ok then return nil, err end
  local script = "chmod 600 -- " .. table.concat(paths, " ") .. " || exit 1\n"
    .. (self.cfg.luajit and ("echo " .. q(self.cfg.luajit)) or "command -v luajit || echo -") .. "\n"
    .. (self.cfg.node and ("echo " .. q(self.cfg.node))
      or ("if [ -x " .. node.SANDBOX_DIR .. "/bin/node ]; then echo " .. node.SANDBOX_DIR .. "/bin/node; "
        .. "else command -v node || echo -; fi"))
  local r, rerr = self.e2b:exec({ "/bin/bash", "-l", "-c", script })
  if not r then return nil, rerr end
  local luajit, nodebin = r.stdout:match("^([^\n]*)\n([^\n]*)\n?$")
  if r.exit_code ~= 0 or not luajit then
    return nil, errors.new("CODE_RUNTIME_SETUP", "chmod 600 of the runner failed: " .. r.stderr)
  end
  if luajit == "-" then
    return nil, errors.new("CODE_RUNTIME_SETUP", "luajit not found in the sandbox")
  end
  return { root = root, luajit = luajit, node = nodebin ~= "-" and nodebin or nil }
end

function M.setup(scope, cfg)
  local e2b, sub = scope.ctx.e2b, scope.ctx.subprocess
  if type(sub) ~= "table" or sub.name ~= "subprocess-e2b" then
    return nil, errors.new("DEPENDENCY_MISSING", M.name .. " requires subprocess-e2b as ctx.subprocess")
  end
  local backend = setmetatable({
    name = M.name, label = "E2B runtime", isolation = "container", subprocess = sub, cwd = e2b.cwd,
    e2b = e2b, cfg = cfg,
  }, Backend)
  local svc = code_runtime.service(backend, cfg)
  scope:on_dispose(function() svc:dispose() end)
  return svc
end

return M
