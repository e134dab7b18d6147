--- dsh.lsp._config: the `servers` config of the language-server providers
-- (lsp-e2b, lsp-local), validated when the provider is added (reference §2.5).
--
--   servers = { clangd = { command = "clangd", args = { "--log=error" },
--                          extensionToLanguage = { [".c"] = "c", [".h"] = "c" } } }
--
-- Keys and defaults: preset (a name from dsh.lsp.presets: its keys are the
-- defaults of the others; a server called like a preset that gives no
-- command uses it), command (required without a preset), args ({}), env
-- ({}), extensionToLanguage (required without a preset; checked by ctx.lsp
-- when registered), initializationOptions (null), configuration (null: the
-- settings, answered to workspace/configuration by section and sent once
-- as workspace/didChangeConfiguration), rootMarkers ({}: file names that
-- make a directory a project root), watchPatterns (glob patterns of the
-- changes told to a server that registers no watchers; default its
-- extensions and root markers), install (what to install when the command
-- is missing, for the message), maxMessageBytes (16000000), maxStderrBytes
-- (1000000), maxDocumentBytes (4000000), shutdownTimeoutMs (5000),
-- killGraceMs (2000), readyTimeoutMs (30000: how long queries wait in all
-- while a new server reports work in progress, or has not yet logged one of
-- readyMessages: texts, one of which a server that reports no progress logs
-- once it has loaded the project), reopenChanged (false: for a server that
-- takes no watched-file notifications, every file of its languages that
-- changed on disk is opened and closed again before the next query),
-- organizeImportsCommand (the command organizeImports runs, with the file's
-- URI, when the server offers no source.organizeImports action),
-- changeMessages (texts one of which the server logs once it took in files
-- of its languages that came or went; the next query waits for it),
-- diagnosticsQuietMs (none: for a server that publishes a file's
-- diagnostics in parts without versions, diagnostics settle once it
-- published nothing more for that long). Every number is a positive
-- safe integer; the *Ms ones at most 2147483647.
local errors = require "dsh.errors"
local presets = require "dsh.lsp.presets"
local schema = require "dsh.schema"

local M = {}

M.DEFAULTS = {
  maxMessageBytes = 16000000, maxStderrBytes = 1000000, maxDocumentBytes = 4000000,
  shutdownTimeoutMs = 5000, killGraceMs = 2000, readyTimeoutMs = 30000,
}
-- numbers with no default (nil: off)
local OPTIONAL_NUMBERS = { diagnosticsQuietMs = true }
local KEYS = {
  command = true, args = true, env = true, extensionToLanguage = true, initializationOptions = true,
  configuration = true, preset = true, rootMarkers = true, watchPatterns = true, install = true,
  readyMessages = true, reopenChanged = true, organizeImportsCommand = true, changeMessages = true,
  diagnosticsQuietMs = true,
}
for k in pairs(M.DEFAULTS) do KEYS[k] = true end
local KEY_LIST = {}
for k in pairs(KEYS) do KEY_LIST[#KEY_LIST + 1] = k end
table.sort(KEY_LIST)

local MAX_SAFE = 2 ^ 53 - 1
local MAX_MS = 2147483647

-- Bad config is misuse, reported at the caller's ctx:use line.
local function fail(prefix, fmt, ...)
  errors.misuse(prefix, fmt, ...)
end

local function number_key(prefix, id, key, v)
  local bound = key:match("Ms$") and MAX_MS or MAX_SAFE
  return schema.positive(prefix, "servers." .. id .. "." .. key, v, bound,
    bound == MAX_MS and " no greater than 2147483647" or "")
end

local function strings(prefix, id, key, v, check)
  if type(v) ~= "table" then fail(prefix, "servers.%s.%s must be an array of strings", id, key) end
  local out = {}
  for i, a in ipairs(v) do
    if type(a) ~= "string" or a:find("\0", 1, true) or (check and not check(a)) then
      fail(prefix, "servers.%s.%s must be an array of %s", id, key, check and "file names" or "strings")
    end
    out[i] = a
  end
  for k in pairs(v) do
    if type(k) ~= "number" or not out[k] then fail(prefix, "servers.%s.%s must be an array of strings", id, key) end
  end
  return out
end

local function file_name(a)
  return a ~= "" and a ~= "." and a ~= ".." and not a:find("/", 1, true)
end

local function server(prefix, id, given)
  if type(given) ~= "table" then fail(prefix, "servers.%s must be a table", id) end
  for k in pairs(given) do
    if not KEYS[k] then
      local near = type(k) == "string" and schema.closest(k, KEY_LIST)
      local hint = near and (' (did you mean "' .. near .. '"?)') or ""
      fail(prefix, 'servers.%s: unknown key "%s"%s', id, tostring(k), hint)
    end
  end
  local name = given.preset
  if name == nil and given.command == nil and presets.get(id) then name = id end
  local s = {}
  if name ~= nil then
    local p = presets.get(name)
    if not p then
      fail(prefix, 'servers.%s.preset "%s" is not one of %s', id, tostring(name), table.concat(presets.names(), ", "))
    end
    for k, v in pairs(p) do s[k] = v end
  end
  for k, v in pairs(given) do s[k] = v end
  s.preset = nil
  if type(s.command) ~= "string" or s.command == "" then fail(prefix, "servers.%s.command must be non-empty", id) end
  local out = { id = id, preset = name, command = s.command, args = {}, env = {} }
  if s.args ~= nil then out.args = strings(prefix, id, "args", s.args) end
  if s.env ~= nil then
    if type(s.env) ~= "table" then fail(prefix, "servers.%s.env must be a table of strings", id) end
    for k, v in pairs(s.env) do
      if type(k) ~= "string" or k == "" or k:find("[=%z]") or type(v) ~= "string" then
        fail(prefix, "servers.%s.env must be a table of strings", id)
      end
      out.env[k] = v
    end
  end
  if type(s.extensionToLanguage) ~= "table" then
    fail(prefix, "servers.%s.extensionToLanguage must be a table of extension = language", id)
  end
  out.extensionToLanguage = s.extensionToLanguage
  out.initializationOptions = s.initializationOptions
  out.configuration = s.configuration
  if s.configuration ~= nil and type(s.configuration) ~= "table" then
    fail(prefix, "servers.%s.configuration must be a table (settings by section)", id)
  end
  out.settings = s.configuration
  out.rootMarkers = s.rootMarkers ~= nil and strings(prefix, id, "rootMarkers", s.rootMarkers, file_name) or {}
  if s.watchPatterns ~= nil then out.watchPatterns = strings(prefix, id, "watchPatterns", s.watchPatterns) end
  if s.reopenChanged ~= nil and type(s.reopenChanged) ~= "boolean" then
    fail(prefix, "servers.%s.reopenChanged must be a boolean", id)
  end
  out.reopenChanged = s.reopenChanged == true
  if s.organizeImportsCommand ~= nil and type(s.organizeImportsCommand) ~= "string" then
    fail(prefix, "servers.%s.organizeImportsCommand must be a string", id)
  end
  out.organizeImportsCommand = s.organizeImportsCommand
  if s.readyMessages ~= nil then out.readyMessages = strings(prefix, id, "readyMessages", s.readyMessages) end
  if s.changeMessages ~= nil then out.changeMessages = strings(prefix, id, "changeMessages", s.changeMessages) end
  if s.install ~= nil and type(s.install) ~= "string" then fail(prefix, "servers.%s.install must be a string", id) end
  out.install = s.install
  for k, d in pairs(M.DEFAULTS) do
    out[k] = s[k] == nil and d or number_key(prefix, id, k, s[k])
  end
  for k in pairs(OPTIONAL_NUMBERS) do
    if s[k] ~= nil then out[k] = number_key(prefix, id, k, s[k]) end
  end
  return out
end

--- Validated copy of a provider config {servers = {...}}; raises with the
--- reference's messages, prefixed (e.g. "lsp-e2b").
---@param prefix string
---@param cfg table
---@return {servers: table<string, table>, order: string[]}
function M.validate(prefix, cfg)
  if type(cfg) ~= "table" then fail(prefix, "config must be a table") end
  for k in pairs(cfg) do
    if k ~= "servers" then fail(prefix, 'unknown config key "%s"', tostring(k)) end
  end
  if type(cfg.servers) ~= "table" or next(cfg.servers) == nil then
    fail(prefix, "servers must contain at least one server")
  end
  local out, order = {}, {}
  for id in pairs(cfg.servers) do
    if type(id) ~= "string" or id == "" then fail(prefix, "server ids must be non-empty strings") end
    order[#order + 1] = id
  end
  table.sort(order)
  for _, id in ipairs(order) do out[id] = server(prefix, id, cfg.servers[id]) end
  return { servers = out, order = order }
end

return M
