--- dsh.lsp._config: the `servers` config of the language-server providers
-- (lsp-e2b, lsp-local), validated when the provider is added (reference §2.5).
--
--   servers = { clangd = { command = "clangd", args = { "--log=error" },
--                          extensionToLanguage = { [".c"] = "c", [".h"] = "c" } } }
--
-- Keys and defaults: command (required), args ({}), env ({}),
-- extensionToLanguage (required; checked by ctx.lsp when registered),
-- initializationOptions (null), configuration (null), maxMessageBytes
-- (16000000), maxStderrBytes (1000000), maxDocumentBytes (4000000),
-- shutdownTimeoutMs (5000), killGraceMs (2000). Every number is a positive
-- safe integer; the *Ms ones at most 2147483647.
local errors = require "dsh.errors"
local schema = require "dsh.schema"

local M = {}

M.DEFAULTS = {
  maxMessageBytes = 16000000, maxStderrBytes = 1000000, maxDocumentBytes = 4000000,
  shutdownTimeoutMs = 5000, killGraceMs = 2000,
}
local KEYS = {
  command = true, args = true, env = true, extensionToLanguage = true, initializationOptions = true,
  configuration = true,
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
  if type(v) ~= "number" or v < 1 or v % 1 ~= 0 or v > bound then
    fail(prefix, "servers.%s.%s must be a positive safe integer%s", id, key,
      bound == MAX_MS and " no greater than 2147483647" or "")
  end
  return v
end

local function server(prefix, id, s)
  if type(s) ~= "table" then fail(prefix, "servers.%s must be a table", id) end
  for k in pairs(s) do
    if not KEYS[k] then
      local near = type(k) == "string" and schema.closest(k, KEY_LIST)
      local hint = near and (' (did you mean "' .. near .. '"?)') or ""
      fail(prefix, 'servers.%s: unknown key "%s"%s', id, tostring(k), hint)
    end
  end
  if type(s.command) ~= "string" or s.command == "" then fail(prefix, "servers.%s.command must be non-empty", id) end
  local out = { id = id, command = s.command, args = {}, env = {} }
  if s.args ~= nil then
    if type(s.args) ~= "table" then fail(prefix, "servers.%s.args must be an array of strings", id) end
    for i, a in ipairs(s.args) do
      if type(a) ~= "string" or a:find("\0", 1, true) then
        fail(prefix, "servers.%s.args must be an array of strings", id)
      end
      out.args[i] = a
    end
    for k in pairs(s.args) do
      if type(k) ~= "number" or not out.args[k] then fail(prefix, "servers.%s.args must be an array of strings", id) end
    end
  end
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
  for k, d in pairs(M.DEFAULTS) do
    out[k] = s[k] == nil and d or number_key(prefix, id, k, s[k])
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
