--- dsh.lsp._apply: what the language-server providers do when a context
-- starts (reference §2.5 "apply"), written once for every backend.
--
--   1. ctx.subprocess must be the backend's own subprocess provider (servers
--      and sources must live in the same world);
--   2. the reader's interpreter (luajit) and every server's command resolve
--      there (concurrently); a server whose command (or the interpreter) is
--      missing still registers, as unavailable: its queries fail with
--      LSP_UNAVAILABLE naming the server, the command and what to install,
--      and the start goes on (ctx.lsp:status() lists it);
--   3. every server registers with ctx.lsp; when one registration fails the
--      earlier ones are undone in reverse and the failure is returned.
-- One watch hub (dsh.lsp._watch over o.watch, when the backend has one)
-- serves every server's roots. Disposal unregisters in reverse, then
-- disposes every provider (each instance to quiescence), stops the watches
-- and the reader.
local async = require "dsh.async"
local errors = require "dsh.errors"
local provider = require "dsh.lsp._provider"
local reader = require "dsh.lsp._reader"
local uri = require "dsh.lsp.uri"
local watch = require "dsh.lsp._watch"

local M = {}

M.READER_INTERPRETER = "luajit"

---@class dsh.lsp.ApplyOpts
---@field prefix string            the provider's name ("lsp-e2b")
---@field where string             "remote " or ""
---@field subprocess_name string   the subprocess provider this backend needs
---@field subprocess_module string its module, for the message
---@field before_read fun(path:string)|nil
---@field watch (fun(root:string):table|nil, dsh.Error|nil)|nil  opens a watch of root (dsh.lsp._watch)
---@field watch_program boolean|nil  watch with remote/lsp/watcher.lua through the subprocess seam
---@field world string             where commands are looked up ("the sandbox", "this machine")

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
  local rd = reader.new { name = o.prefix, subprocess = sub, luajit = paths[1] or M.READER_INTERPRETER,
    maxBytes = max_doc, graceMs = 2000 }
  scope:on_dispose(function() rd:close() end)
  local open = o.watch
  if o.watch_program and paths[1] then
    open = require("dsh.lsp._local_watch").opener { subprocess = sub, luajit = paths[1] }
  end
  local hub = watch.new(open)
  scope:on_dispose(function() hub:close() end)
  local function uri_of(p) return uri.from_path(p, o.prefix) end
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
    local p = provider.new { prefix = o.prefix, where = o.where, server = server, subprocess = sub, reader = rd,
      uri_of = uri_of, before_read = o.before_read, hub = hub, fs = fs,
      unavailable = M.unavailable(o, server, missing[1] and 1 or (missing[i + 1] and i + 1), missing) }
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
    .. "found in %s (%s); %s", o.prefix, server.id, what, name, o.world or "its world", missing[which], fix))
end

return M
