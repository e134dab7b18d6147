--- dsh.lsp.backend: the one language-server backend — what every LSP world's
-- provider does when a context starts (reference §2.5 "apply"), over
-- whatever ctx.subprocess is, and the provider itself.
--
-- Owns: the provider a world declares (lsp-e2b in the sandbox, lsp-local on
-- this machine: its name, what it injects, where its servers' files change);
-- config validation (dsh.lsp._config, the reference's keys and messages
-- under the provider's name); and at setup:
--   1. ctx.subprocess must be the world's own subprocess provider (servers
--      and sources must live in the same world);
--   2. the reader's interpreter (luajit) and every server's command resolve
--      there (concurrently); a server whose command (or the interpreter) is
--      missing still registers, as unavailable: its queries fail with
--      LSP_UNAVAILABLE naming the server, the command and what to install,
--      and the start goes on (ctx.lsp:status() lists it);
--   3. every server registers with ctx.lsp; when one registration fails the
--      earlier ones are undone in reverse and the failure is returned.
-- One watch hub (dsh.lsp._watch over the world's watch) serves every
-- server's roots. Disposal unregisters in reverse, then disposes every
-- provider (each instance to quiescence), stops the watches and the reader.
-- Never starts a process itself (ctx.subprocess does) and knows no wire.
--
--   return require("dsh.lsp.backend").provider {
--     name = "lsp-local", inject = { "lsp", "subprocess" }, where = "",
--     subprocess = "subprocess-local", subprocess_module = "dsh.providers.subprocess_local",
--     world = "this machine's PATH", watch_program = true,
--   }
local async = require "dsh.async"
local config = require "dsh.lsp._config"
local errors = require "dsh.errors"
local provider = require "dsh.lsp._provider"
local reader = require "dsh.lsp._reader"
local schema = require "dsh.schema"
local uri = require "dsh.lsp.uri"
local watch = require "dsh.lsp._watch"

local M = {}

M.READER_INTERPRETER = "luajit"

---@class dsh.lsp.BackendDecl
---@field name string              the provider's name, the prefix of its messages ("lsp-e2b")
---@field inject string[]          the services it injects (ctx.lsp and ctx.subprocess among them)
---@field where string             "remote " or "", in messages about paths
---@field subprocess string        the subprocess provider its world needs ("subprocess-e2b")
---@field subprocess_module string that provider's module, for the message
---@field world string             where commands are looked up ("the sandbox", "this machine's PATH")
---@field watch (fun(scope:dsh.Scope):fun(root:string):table|nil, dsh.Error|nil)|nil  opens a watch of a
---                                root (dsh.lsp._watch), given the context
---@field watch_program boolean|nil  watch with remote/lsp/watcher.lua through ctx.subprocess instead

--- The provider of a language-server world (see the header). Config:
--- servers (dsh.lsp._config); an unknown key raises naming the closest one.
---@param decl dsh.lsp.BackendDecl
---@return dsh.Provider
function M.provider(decl)
  local p = { name = decl.name, inject = decl.inject }
  function p.validate(cfg)
    if type(cfg) == "table" then schema.keys(decl.name, cfg, { "servers" }) end
    return config.validate(decl.name, cfg)
  end
  function p.setup(scope, cfg)
    return M.apply(scope, cfg, decl)
  end
  return p
end

-- Set up the servers of cfg for the provider decl o (steps 1-3 of the header).
function M.apply(scope, cfg, o)
  local ctx = scope.ctx
  local sub, lsp = ctx.subprocess, ctx.lsp
  if type(sub) ~= "table" or sub.name ~= o.subprocess then
    return nil, errors.new("LSP_UNAVAILABLE", o.name .. " requires " .. o.subprocess_module .. " as ctx.subprocess")
  end
  if type(lsp) ~= "table" or type(lsp.register) ~= "function" then
    return nil, errors.new("LSP_UNAVAILABLE", o.name .. ' requires ctx.lsp (ctx:use(require("dsh.lsp").provider))')
  end
  -- resolve the reader's interpreter and every command at once
  local names = { M.READER_INTERPRETER }
  for _, id in ipairs(cfg.order) do names[#names + 1] = cfg.servers[id].command end
  local futures = {}
  for i, name in ipairs(names) do
    futures[i] = async.run(function() return sub:resolveExecutable(name) end)
  end
  local paths, missing = {}, {}
  for i, f in ipairs(futures) do
    local p, err = f:await()
    if p then
      paths[i] = p
    else
      missing[i] = tostring(err and err.message or err)
    end
  end
  local max_doc = 0
  for _, id in ipairs(cfg.order) do max_doc = math.max(max_doc, cfg.servers[id].maxDocumentBytes) end
  local rd = reader.new { name = o.name, subprocess = sub, luajit = paths[1] or M.READER_INTERPRETER,
    maxBytes = max_doc, graceMs = 2000 }
  scope:on_dispose(function() rd:close() end)
  local open = o.watch and o.watch(scope)
  if o.watch_program and paths[1] then
    open = require("dsh.lsp._local_watch").opener { subprocess = sub, luajit = paths[1] }
  end
  local hub = watch.new(open)
  scope:on_dispose(function() hub:close() end)
  local function uri_of(p) return uri.from_path(p, o.name) end
  -- a source about to be read: the registry's fault point (dsh.faults)
  local points = lsp._faults
  local before_read = points and function(path) points:fire("beforeRead", path) end
  local function fs() return ctx.fs end
  local registered = {}
  scope:on_dispose(function()
    for i = #registered, 1, -1 do registered[i].unregister() end
    for i = #registered, 1, -1 do registered[i].provider:disposeAll() end
  end)
  for i, id in ipairs(cfg.order) do
    local server = {}
    for k, v in pairs(cfg.servers[id]) do server[k] = v end
    server.argv = { paths[i + 1] or server.command }
    for _, a in ipairs(server.args) do server.argv[#server.argv + 1] = a end
    local p = provider.new { prefix = o.name, where = o.where, server = server, subprocess = sub, reader = rd,
      uri_of = uri_of, before_read = before_read, hub = hub, fs = fs,
      unavailable = M.unavailable(o, server, missing[1] and 1 or (missing[i + 1] and i + 1), missing) }
    local unregister, err = lsp:register(p)
    if not unregister then
      for j = #registered, 1, -1 do registered[j].unregister() end
      registered = {}
      return nil, err
    end
    registered[#registered + 1] = { provider = p, unregister = unregister }
  end
  return { prefix = o.name, providers = registered, reader = rd }
end

--- Why a server cannot run (nil when it can): which = 1 for the reader's
--- interpreter, i + 1 for the server's own command.
function M.unavailable(o, server, which, missing)
  if not which then return nil end
  local what, name
  if which == 1 then
    what, name = "the source reader's interpreter", M.READER_INTERPRETER
  else
    what, name = "its command", server.command
  end
  local fix = which == 1 and "install LuaJIT there (Debian: apt-get install luajit)"
    or ("install " .. (server.install or ("the program that provides " .. name))
      .. ', or set servers.' .. server.id .. '.command to where it is')
  return errors.new("LSP_UNAVAILABLE", string.format('%s: language server "%s" is not available: %s "%s" was not '
    .. "found in %s (%s); %s", o.name, server.id, what, name, o.world or "its world", missing[which], fix))
end

return M
