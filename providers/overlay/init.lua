--- dsh.providers.overlay: one remote coding world in one line of configuration.
--
--   ctx:use(require "dsh.providers.overlay", {
--     backend = "local",              -- "local" (embedded sandbox, default), "cloud" (E2B) or "host"
--     e2b = { cwd = "/home/user/workspace", onDispose = "kill" },
--     bash = { timeoutMs = 30000 },
--     pty = { idleSilenceMs = 2000 },
--     lsp = { servers = { clangd = { command = "clangd", extensionToLanguage = { [".c"] = "c" } } } },
--     codeRuntime = { computeMs = 500 },
--   })
--
-- It composes the existing providers on the context and is nothing more: for
-- a sandbox, ctx.e2b (with `backend` passed through), fs-e2b, subprocess-e2b,
-- bash, ctx.pty with pty-e2b, ctx.lsp with lsp-e2b, code-runtime-e2b; for
-- "host", fs-local, subprocess-local, bash, pty-local, lsp-local and
-- code-runtime-local, with no sandbox. Each section is that provider's own
-- config and is validated by that provider, here, before anything is added
-- (a bad config adds nothing). A section set to false leaves its capability
-- out; lsp is left out unless it names servers. A capability that needs one
-- left out (bash without subprocess) is a contradiction and raises.
--
-- Disposal is the context's: a provider disposes before every service it
-- injects, so every managed process group (commands, Bash, terminals,
-- language servers, code workers) is terminated and awaited before ctx.e2b
-- kills, pauses or leaves the sandbox. See docs/overlay.md for what a
-- reconnect by sandboxId restores (files only).
local errors = require "dsh.errors"
local schema = require "dsh.schema"

local NAME = "overlay"

local M = {
  name = NAME,
  SECTIONS = { "backend", "e2b", "fs", "subprocess", "bash", "pty", "lsp", "codeRuntime" },
  BACKENDS = { "local", "cloud", "host" },
}

-- The parts, in the order they are added: section, the service a part
-- provides (as other parts inject it), its provider module and, for pty and
-- lsp, the registry it registers on. Required only for the chosen backend.
local function parts(backend)
  if backend == "host" then
    return {
      { section = "fs", provides = "fs", module = "dsh.providers.fs_local" },
      { section = "subprocess", provides = "subprocess", module = "dsh.providers.subprocess_local" },
      { section = "bash", provides = "bash", module = "dsh.providers.bash" },
      { section = "pty", provides = "pty", module = "dsh.providers.pty_local", registry = "dsh.pty" },
      { section = "lsp", provides = "lsp", module = "dsh.providers.lsp_local", registry = "dsh.lsp" },
      { section = "codeRuntime", provides = "codeRuntime", module = "dsh.providers.code_runtime_local" },
    }
  end
  return {
    { section = "e2b", provides = "e2b", module = "dsh.providers.e2b" },
    { section = "fs", provides = "fs", module = "dsh.providers.fs_e2b" },
    { section = "subprocess", provides = "subprocess", module = "dsh.providers.subprocess_e2b" },
    { section = "bash", provides = "bash", module = "dsh.providers.bash" },
    { section = "pty", provides = "pty", module = "dsh.providers.pty_e2b", registry = "dsh.pty" },
    { section = "lsp", provides = "lsp", module = "dsh.providers.lsp_e2b", registry = "dsh.lsp" },
    { section = "codeRuntime", provides = "codeRuntime", module = "dsh.providers.code_runtime_e2b" },
  }
end

local function fail(fmt, ...)
  errors.misuse(NAME, fmt, ...)
end

-- The backend: the overlay's own key, else e2b.backend, else "local".
local function backend_of(cfg)
  local e2b = type(cfg.e2b) == "table" and cfg.e2b or {}
  local backend = schema.one_of(NAME, cfg, "backend", nil, M.BACKENDS)
  if backend == nil then
    backend = e2b.backend or "local"
    if backend ~= "local" and backend ~= "cloud" then
      fail('e2b.backend must be "local" or "cloud" (for no sandbox: backend = "host")')
    end
  elseif e2b.backend ~= nil and e2b.backend ~= backend then
    fail('backend is "%s" but e2b.backend is "%s": set one of them', backend, tostring(e2b.backend))
  end
  return backend
end

-- The e2b section of a sandbox backend, with the backend passed through.
local function e2b_section(cfg, backend)
  local s = cfg.e2b
  if s == false then
    fail('e2b cannot be false: every capability runs in the sandbox it owns (for none: backend = "host")')
  end
  if s ~= nil and type(s) ~= "table" then fail("e2b must be a table (dsh-e2b's config), got %s", type(s)) end
  local out = {}
  for k, v in pairs(s or {}) do out[k] = v end
  out.backend = backend
  return out
end

--- The plan for cfg: the parts to add, each {part, provider, config}, in
-- order. Raises (naming the section) on an unknown section, a bad backend, a
-- section the provider rejects, or a contradiction; adds nothing.
---@param cfg table
---@return table[]
function M.plan(cfg)
  schema.keys(NAME, cfg, M.SECTIONS)
  local backend = backend_of(cfg)
  if backend == "host" and cfg.e2b ~= nil and cfg.e2b ~= false then
    fail('e2b applies only to a sandbox (backend "local" or "cloud"); backend "host" has none')
  end
  local plan, left_out = {}, {}
  for _, part in ipairs(parts(backend)) do
    local s = part.section == "e2b" and e2b_section(cfg, backend) or cfg[part.section]
    if s == nil and part.section == "lsp" then s = false end -- language servers only when named
    if s == false then
      left_out[part.provides] = part.section
    else
      if s ~= nil and type(s) ~= "table" then
        fail("%s must be a table (%s's config) or false, got %s", part.section, part.module, type(s))
      end
      local provider = require(part.module)
      -- validated as the provider validates it (its own error), then handed
      -- to ctx:use untouched, which validates it again
      if provider.validate then provider.validate(s or {}) end
      plan[#plan + 1] = { part = part, provider = provider, config = s or {} }
    end
  end
  for _, step in ipairs(plan) do
    for _, key in ipairs(step.provider.inject or {}) do
      if left_out[key] then
        fail("%s needs %s, which is set to false: leave %s out too (%s = false) or keep %s",
          step.part.section, left_out[key], step.part.section, step.part.section, left_out[key])
      end
    end
  end
  return plan
end

--- Called by ctx:use: checks the whole config, then adds every part.
---@param ctx table a dsh.context
---@param cfg table
function M.compose(ctx, cfg)
  local plan = M.plan(cfg)
  for _, step in ipairs(plan) do
    if step.part.registry then ctx:use(require(step.part.registry).provider) end
    ctx:use(step.provider, step.config)
  end
end

return M
