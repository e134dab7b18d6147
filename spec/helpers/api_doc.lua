--- What docs/api.md must document, found in the code (used by
-- spec/02-lua/71-api_reference_spec.lua), and a skeleton of the section a
-- missing function needs, taken from its doc comment.
--
-- docs/api.md's format: a module or service is a `## ` heading, each function
-- a `### receiver.name(args)` or `### receiver:name(args)` heading, where the
-- receiver is a module (`dsh.async`), a service on a context (`ctx.fs`) or an
-- object named in OBJECTS below (`future`, `sb`, `sb.envd`, ...). Expected
-- failures are listed on a line starting `Errors:`.
--
-- The rule for what is public (and so must be documented):
--   * modules: lua/dsh/<name>.lua and lua/dsh/<name>/init.lua, every
--     lua/dsh/core/<name>.lua (the bindings) and lua/dsh/tools/<name>.lua, and
--     the submodules in PUBLIC_SUBMODULES; never a name starting with `_`
--     (private by the project's convention), never the command line's own
--     modules (lua/dsh/app/: documented as `dsh` commands);
--     other submodules are internal parts of their parent (dsh.sandbox.bwrap,
--     dsh.fs._read, ...); providers (dsh.providers.*) are documented by the
--     service they publish (SERVICES), walked on a composed context;
--   * functions: the function-valued fields of a module table or service (its
--     metatable's __index tables included) and the methods (`Class:name`) an
--     object's class defines in its source, whose names do not start with `_`.
local M = {}

M.root = os.getenv("PWD")

M.PUBLIC_SUBMODULES = { "dsh.lsp.position", "dsh.lsp.uri" }

-- Services a context composes (providers composed by M.compose).
M.SERVICES = { "e2b", "fs", "subprocess", "bash", "pty", "lsp", "codeRuntime" }

-- Objects: receiver name in docs/api.md -> the class table in a source file
-- whose `function Class:name(` / `function Class.name(` definitions are its methods.
M.OBJECTS = {
  { receiver = "ctx", file = "lua/dsh/context/init.lua", class = "Context" },
  { receiver = "scope", file = "lua/dsh/context/init.lua", class = "Scope" },
  { receiver = "future", file = "lua/dsh/async.lua", class = "Future" },
  { receiver = "signal", file = "lua/dsh/async.lua", class = "Signal" },
  { receiver = "controller", file = "lua/dsh/async.lua", class = "Controller" },
  { receiver = "sb", file = "lua/dsh/sandbox/init.lua", class = "Sandbox" },
  { receiver = "envdProcess", file = "lua/dsh/envd/process.lua", class = "Process" },
  { receiver = "handle", file = "lua/dsh/subprocess/_handle.lua", class = "Handle" },
  { receiver = "stdin", file = "lua/dsh/subprocess/_handle.lua", class = "Writer" },
}

local function read(path)
  local f = assert(io.open(M.root .. "/" .. path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

local function lines_of(path)
  local t = {}
  for l in (read(path) .. "\n"):gmatch("(.-)\n") do t[#t + 1] = l end
  return t
end

local function public_name(name)
  return type(name) == "string" and name:sub(1, 1) ~= "_"
end

--- The public modules' names, sorted.
function M.modules()
  local lfs = require "lfs"
  local out = {}
  local function add(name) out[#out + 1] = name end
  -- folders that are layers, not modules: the bindings are walked below, the
  -- application is the command line, providers are documented as services
  local LAYER_DIRS = { core = true, app = true, providers = true }
  for f in lfs.dir(M.root .. "/lua/dsh") do
    local base = f:match("^([%w_]+)%.lua$")
    if base and public_name(base) and base ~= "init" then add("dsh." .. base) end
    local attr = lfs.attributes(M.root .. "/lua/dsh/" .. f)
    if attr and attr.mode == "directory" and f:match("^[%w_]+$") and public_name(f) and not LAYER_DIRS[f]
        and lfs.attributes(M.root .. "/lua/dsh/" .. f .. "/init.lua") then
      add("dsh." .. f)
    end
  end
  for _, dir in ipairs { "core", "tools" } do
    local abs = M.root .. "/lua/dsh/" .. dir
    for f in lfs.dir(abs) do
      local base = f:match("^([%w_]+)%.lua$") or (f:match("^[%w_]+$") and lfs.attributes(abs .. "/" .. f .. "/init.lua")
        and f)
      if base and public_name(base) and base ~= "init" then add("dsh." .. dir .. "." .. base) end
    end
  end
  for _, name in ipairs(M.PUBLIC_SUBMODULES) do add(name) end
  table.sort(out)
  return out
end

--- The function-valued public fields of t (and of its metatables' __index tables).
function M.fields(t)
  local out, seen = {}, {}
  local cur, depth = t, 0
  while type(cur) == "table" and depth < 5 do
    for k, v in pairs(cur) do
      if type(v) == "function" and public_name(k) and not seen[k] then
        seen[k] = v
        out[#out + 1] = k
      end
    end
    local mt = getmetatable(cur)
    cur = mt and type(mt.__index) == "table" and mt.__index or nil
    depth = depth + 1
  end
  table.sort(out)
  return out, seen
end

--- The public methods an object's class defines: name -> {file, line, sep}.
function M.class_methods(file, class)
  local out = {}
  for i, l in ipairs(lines_of(file)) do
    local sep, name = l:match("^%s*function " .. class .. "([:.])([%w_]+)%(")
    if not name then
      name, sep = l:match("^" .. class .. "%.([%w_]+) = function"), "."
    end
    if name and sep == ":" and public_name(name) then out[name] = { file = file, line = i, sep = sep } end
  end
  return out
end

--- Compose a context with every service on a local sandbox (call inside a task).
function M.compose()
  local ctx = require("dsh.context").new()
  ctx:use(require "dsh.providers.e2b", { timeoutMs = 120000, onTimeout = "kill", onDispose = "kill" })
  ctx:use(require "dsh.providers.fs_e2b")
  ctx:use(require "dsh.providers.subprocess_e2b")
  ctx:use(require "dsh.providers.bash")
  ctx:use(require("dsh.pty").provider)
  ctx:use(require "dsh.providers.pty_e2b")
  ctx:use(require("dsh.lsp").provider)
  ctx:use(require "dsh.providers.lsp_e2b",
    { servers = { clangd = { command = "clangd", extensionToLanguage = { [".c"] = "c" } } } })
  ctx:use(require "dsh.providers.code_runtime_e2b")
  assert(ctx:start())
  return ctx
end

--- Everything that must be documented: list of {receiver=, name=, sep=, file=, line=}.
-- ctx: a context from M.compose().
function M.inventory(ctx)
  local out = {}
  local function add(receiver, name, sep, fn, file, line)
    if fn then
      local info = debug.getinfo(fn, "S")
      file = info.source:match("^@(.*)$")
      line = info.linedefined
      if file and file:sub(1, #M.root + 1) == M.root .. "/" then file = file:sub(#M.root + 2) end
    end
    out[#out + 1] = { receiver = receiver, name = name, sep = sep, file = file, line = line }
  end
  for _, mod in ipairs(M.modules()) do
    local t = require(mod)
    if type(t) == "table" then
      local names, fns = M.fields(t)
      for _, n in ipairs(names) do add(mod, n, ".", fns[n]) end
    end
  end
  for _, key in ipairs(M.SERVICES) do
    local names, fns = M.fields(ctx[key])
    for _, n in ipairs(names) do add("ctx." .. key, n, ":", fns[n]) end
  end
  -- The envd client (sb.envd, ctx.e2b:getSandbox().envd): its methods come
  -- from several files (mixins), so they are walked on a client made here.
  local client = require("dsh.envd").client { url = "http://127.0.0.1:9" }
  local cnames, cfns = M.fields(client)
  for _, n in ipairs(cnames) do add("sb.envd", n, ":", cfns[n]) end
  client:close()
  for _, o in ipairs(M.OBJECTS) do
    local names = {}
    for n in pairs(M.class_methods(o.file, o.class)) do names[#names + 1] = n end
    table.sort(names)
    local ms = M.class_methods(o.file, o.class)
    for _, n in ipairs(names) do add(o.receiver, n, ms[n].sep, nil, o.file, ms[n].line) end
  end
  return out
end

--- The headings of docs/api.md: list of {receiver=, name=, sep=, args=, line=}
-- and the `## ` sections (list of titles).
function M.parse(text)
  local funcs, sections, n = {}, {}, 0
  for l in (text .. "\n"):gmatch("(.-)\n") do
    n = n + 1
    local title = l:match("^## (.-)%s*$")
    if title then sections[#sections + 1] = title end
    local h = l:match("^### (.-)%s*$")
    if h then
      local recv, sep, name, args = h:match("^`?([%w_.]+)([.:])([%w_]+)(%b())`?$")
      funcs[#funcs + 1] = { receiver = recv, sep = sep, name = name, args = args, line = n, text = h }
    end
  end
  return funcs, sections
end

--- The parameter list and doc comment of the function defined at file:line,
-- as a docs/api.md section (parameters typed `|nil` or named `x?` are marked optional).
function M.skeleton(item)
  local ls = lines_of(item.file)
  local def = ls[item.line] or ""
  local params = def:match("function[^(]*%((.-)%)") or ""
  local doc, i = {}, item.line - 1
  while i > 0 and ls[i]:match("^%s*%-%-") do
    table.insert(doc, 1, (ls[i]:gsub("^%s*%-%-%-?%s?", "")))
    i = i - 1
  end
  -- A type written as `{field: type, ...}` may span lines: join them first.
  local joined = {}
  for _, l in ipairs(doc) do
    local prev = joined[#joined]
    local _, opens = (prev or ""):gsub("{", "")
    local _, closes = (prev or ""):gsub("}", "")
    if prev and prev:match("^@") and opens > closes then
      joined[#joined] = prev .. " " .. l:gsub("^%s+", "")
    else
      joined[#joined + 1] = l
    end
  end
  local optional, text, ret = {}, {}, {}
  for _, l in ipairs(joined) do
    local name, ty, rest = l:match("^@param%s+([%w_.?]+)%s+(%b{}[|%w]*)%s*(.*)$")
    if not name then name, ty, rest = l:match("^@param%s+([%w_.?]+)%s+(%S+)%s*(.*)$") end
    if ty and ty:sub(-1) == "," then ty, rest = ty .. " " .. rest, "" end -- fun():a, b
    local r = l:match("^@return%s+(.*)$")
    if name then
      local bare = name:gsub("%?$", "")
      if name:sub(-1) == "?" or ty:match("|nil$") or ty:match("%?$") then optional[bare] = true end
      text[#text + 1] = "- `" .. bare .. "` (`" .. ty .. "`)" .. (rest ~= "" and " " .. rest or "")
    elseif r then
      ret[#ret + 1] = "`" .. r .. "`"
    elseif not l:match("^@") then
      text[#text + 1] = l
    end
  end
  local args = {}
  for a in params:gmatch("[^,%s]+") do args[#args + 1] = a .. (optional[a] and "?" or "") end
  if #ret > 0 then text[#text + 1] = "Returns " .. table.concat(ret, "; ") .. "." end
  return "### " .. item.receiver .. item.sep .. item.name .. "(" .. table.concat(args, ", ") .. ")\n\n"
    .. table.concat(text, "\n") .. "\n"
end

return M
