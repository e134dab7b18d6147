--- dsh.code_runtime._bindings: checks of run{bindings=...} and the names a
-- program may not be given (reference §2.6 run step 2, §6.8.8), per language.
--
-- A failure raises (bindings are the caller's code) with the reference's
-- messages, after the provider's name and the method ("<provider>: run: ...").
local declare = require "dsh.code_runtime._declare"
local errors = require "dsh.errors"
local wire = require "dsh.code_runtime._wire"

local M = {}

local IDENT = "^[A-Za-z_][A-Za-z0-9_]*$"
local DUNDER = "^__.+__$"

local function set(list)
  local s = {}
  for w in list:gmatch("%S+") do s[w] = true end
  return s
end

-- JavaScript's and Python's reserved words together (the seam's portable rule).
local JS_PY_WORDS = set [[
  break case catch class const continue debugger default delete do else enum export extends false finally for
  function if import in instanceof new null return super switch this throw true try typeof var void while with
  yield let static implements interface package private protected public await async arguments eval undefined
  NaN Infinity
  and as assert def del elif except from global is lambda nonlocal not or pass raise None True False
]]

local LUA_WORDS = set [[
  and break do else elseif end false for function goto if in local nil not or repeat return then true until while
]]

--- Globals a program already has, which a binding may not replace.
M.RESERVED_GLOBALS = {
  typescript = set "console __dsh_main__ __builtins__ __name__ __debug__",
  lua = set [[
    print io os string table math bit coroutine json _G _VERSION assert error ipairs next pairs pcall select
    tonumber tostring type unpack xpcall rawequal rawget rawset setmetatable getmetatable require load
    loadstring dofile debug ffi package
  ]],
}
M.RESERVED_GLOBALS.javascript = M.RESERVED_GLOBALS.typescript

--- Members a binding error already has.
M.RESERVED_ERROR_MEMBERS = set "name message stack args with_traceback add_note"

local function usable(lang, name)
  if type(name) ~= "string" or not name:match(IDENT) or name:match(DUNDER) then return false end
  if lang == "lua" then return not LUA_WORDS[name] end
  return not JS_PY_WORDS[name]
end

--- Checks bindings for language; returns the normalised list
-- {{global=, functions={name=fn}, names={...}, errorClass=, declarations={name=decl}}}
-- (decl: dsh.code_runtime._declare's) and the boot's namespaces.
function M.check(prefix, lang, bindings, method)
  local function fail(msg) errors.misuse(prefix, "%s: %s", method or "run", msg) end
  if bindings == nil then return {}, {} end
  if type(bindings) ~= "table" then fail("bindings must be a list") end
  local reserved = M.RESERVED_GLOBALS[lang]
  local globals, injected = {}, {}
  local out, namespaces = {}, {}
  for i, b in ipairs(bindings) do
    if type(b) ~= "table" then fail("bindings[" .. i .. "] must be a table") end
    local g = b.global
    if not usable(lang, g) then fail(string.format('binding global "%s" is not a usable identifier', tostring(g))) end
    if reserved[g] or globals[g] then fail(string.format('duplicate binding global "%s"', g)) end
    globals[g] = true
    if type(b.functions) ~= "table" then fail('binding "' .. g .. '" must have a table of functions') end
    local fns, names, decls = {}, {}, {}
    for name, f in pairs(b.functions) do
      if type(name) ~= "string" or name == "" then
        fail('binding "' .. g .. '" has a function name that is not a string')
      end
      fns[name], decls[name] = declare.check_function(fail, g, name, f, function(p) return usable(lang, p) end)
      names[#names + 1] = name
    end
    table.sort(names)
    local ec = b.errorClass
    if ec ~= nil then
      if type(ec) ~= "table" then fail('binding "' .. g .. '" errorClass must be {name=, memberNameProperty=}') end
      if not usable(lang, ec.name) then
        fail(string.format('binding error class "%s" is not a usable identifier', tostring(ec.name)))
      end
      local p = ec.memberNameProperty
      if type(p) ~= "string" or p == "" or M.RESERVED_ERROR_MEMBERS[p] then
        fail(string.format('binding error member property "%s" is not usable', tostring(p)))
      end
      ec = { name = ec.name, memberNameProperty = p }
    end
    out[i] = { global = g, functions = fns, names = names, errorClass = ec, declarations = decls }
    -- names is an array even when empty (a Node runner iterates it)
    namespaces[i] = { global = g, names = wire.array(names), errorClass = ec }
  end
  -- class names join the globals once every global is known
  for _, b in ipairs(out) do
    local ec = b.errorClass
    if ec then
      if reserved[ec.name] or globals[ec.name] or injected[ec.name] then
        fail(string.format('duplicate injected global "%s"', ec.name))
      end
      injected[ec.name] = true
    end
  end
  return out, namespaces
end

return M
