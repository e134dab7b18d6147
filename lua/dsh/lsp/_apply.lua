--- dsh.lsp._apply: what the language-server providers do when a context
-- starts (reference §2.5 "apply"), written once for every backend.
--
--   1. ctx.subprocess must be the backend's own subprocess provider (servers
--      and sources must live in the same world);
--   2. the reader's interpreter (luajit) and every server's command resolve
--      there (concurrently);
--   3. every server registers with ctx.lsp; when one registration fails the
--      earlier ones are undone in reverse and the failure is returned.
-- Disposal unregisters in reverse, then disposes every provider (each
-- instance to quiescence) and stops the reader.
local async = require "dsh.async"
local errors = require "dsh.errors"
local provider = require "dsh.lsp._provider"
local reader = require "dsh.lsp._reader"
local uri = require "dsh.lsp.uri"

local M = {}

M.READER_INTERPRETER = "luajit"

-- A command that did not resolve, in words a user can act on: which server,
-- which binary, where it was looked for, and what to do. Other failures (the
-- sandbox gone, ...) keep their own message.
local function unresolved(o, cfg, i, name, err)
  local code = type(err) == "table" and err.code or nil
  local why = tostring(type(err) == "table" and err.message or err)
  local what = i == 1 and "the source reader's interpreter" or ('server "' .. cfg.order[i - 1] .. '"')
  if code ~= "E2B_EXECUTABLE" and code ~= "SUBPROCESS_EXECUTABLE" then
    return errors.new("LSP_UNAVAILABLE", string.format("%s: %s: %s", o.prefix, what, why), { cause = err })
  end
  local where = o.where == "remote " and "in the sandbox" or "on this machine"
  local state = name:sub(1, 1) == "/" and "is not an executable file" or "is not installed (not found on the PATH)"
  local todo
  if i == 1 then
    todo = "install LuaJIT " .. where .. " (the source reader runs under it)"
  else
    todo = string.format("install it %s, set servers.%s.command to its absolute path, or leave the server out",
      where, cfg.order[i - 1])
  end
  return errors.new("LSP_UNAVAILABLE", string.format('%s: %s: its command "%s" %s %s: %s', o.prefix, what, name,
    state, where, todo), { cause = err })
end

---@class dsh.lsp.ApplyOpts
---@field prefix string            the provider's name ("lsp-e2b")
---@field where string             "remote " or ""
---@field subprocess_name string   the subprocess provider this backend needs
---@field subprocess_module string its module, for the message
---@field before_read fun(path:string)|nil

---@param scope dsh.Scope
---@param cfg table   validated by dsh.lsp._config
---@param o dsh.lsp.ApplyOpts
function M.apply(scope, cfg, o)
  local ctx = scope.ctx
  local sub, lsp = ctx.subprocess, ctx.lsp
  if type(sub) ~= "table" or sub.name ~= o.subprocess_name then
    return nil, errors.new("LSP_UNAVAILABLE", o.prefix .. " requires " .. o.subprocess_module .. " as ctx.subprocess")
  end
  if type(lsp) ~= "table" or type(lsp.register) ~= "function" then
    return nil, errors.new("LSP_UNAVAILABLE", o.prefix .. ' requires ctx.lsp (ctx:use(require("dsh.lsp").provider))')
  end
  -- resolve the reader's interpreter and every command at once
  local names = { M.READER_INTERPRETER }
  for _, id in ipairs(cfg.order) do names[#names + 1] = cfg.servers[id].command end
  local futures = {}
  for i, name in ipairs(names) do
    futures[i] = async.run(function() return sub:resolveExecutable(name) end)
  end
  local paths = {}
  for i, f in ipairs(futures) do
    local p, err = f:await()
    if not p then return nil, unresolved(o, cfg, i, names[i], err) end
    paths[i] = p
  end
  local max_doc = 0
  for _, id in ipairs(cfg.order) do max_doc = math.max(max_doc, cfg.servers[id].maxDocumentBytes) end
  local rd = reader.new { name = o.prefix, subprocess = sub, luajit = paths[1], maxBytes = max_doc, graceMs = 2000 }
  scope:on_dispose(function() rd:close() end)
  local function uri_of(p) return uri.from_path(p, o.prefix) end
  local registered = {}
  scope:on_dispose(function()
    for i = #registered, 1, -1 do registered[i].unregister() end
    for i = #registered, 1, -1 do registered[i].provider:disposeAll() end
  end)
  for i, id in ipairs(cfg.order) do
    local server = {}
    for k, v in pairs(cfg.servers[id]) do server[k] = v end
    server.argv = { paths[i + 1] }
    for _, a in ipairs(server.args) do server.argv[#server.argv + 1] = a end
    local p = provider.new { prefix = o.prefix, where = o.where, server = server, subprocess = sub, reader = rd,
      uri_of = uri_of, before_read = o.before_read }
    local unregister, err = lsp:register(p)
    if not unregister then
      for j = #registered, 1, -1 do registered[j].unregister() end
      registered = {}
      return nil, err
    end
    registered[#registered + 1] = { provider = p, unregister = unregister }
  end
  return { prefix = o.prefix, providers = registered, reader = rd }
end

return M
