--- The engine of spec/00-arch: reads a tree's `require`s and `#include`s and
-- checks them against a layer table and a rule table (both live in
-- spec/00-arch/01-layering_spec.lua, where a reader looks first).
--
-- A tree is {files = {path = source, ...}} with paths relative to the
-- repository root; from_disk() reads the real one, specs build small ones to
-- prove each rule fails. check() returns a sorted list of violation messages,
-- each naming both files (or the file and the module) and the rule.
local source = require "helpers.source"

local M = {}

--- The real tree: every Lua file under lua/ and providers/, bin/dsh, every C
-- file and header under core/ and remote/, every CMakeLists.txt.
function M.from_disk()
  local files = {}
  local function add(list)
    for _, p in ipairs(list) do files[p] = source.read(p) end
  end
  add(source.files("lua", "%.lua$"))
  add(source.files("providers", "%.lua$"))
  add(source.files("core", "%.[ch]$"))
  add(source.files("remote", "%.[ch]$"))
  for _, dir in ipairs { "core", "remote", "spec", "bench" } do
    add(source.files(dir, "CMakeLists%.txt$"))
  end
  files["CMakeLists.txt"] = source.read("CMakeLists.txt")
  files["bin/dsh"] = source.read("bin/dsh")
  return { files = files }
end

local function is_lua(path)
  return path:match("%.lua$") or path == "bin/dsh"
end

--- The layer of a path: the name of the first layer with a matching pattern, or nil.
function M.layer_of(layers, path)
  for _, l in ipairs(layers) do
    for _, pat in ipairs(l.paths) do
      if path:match(pat) then return l.name end
    end
  end
  return nil
end

--- The file a module name stands for in tree, or nil (not dsh's, or missing).
function M.resolve(tree, module)
  local rel
  if module == "dsh" then
    rel = "lua/dsh/init"
  elseif module:match("^dsh%.providers%.") then
    rel = "providers/" .. module:sub(#"dsh.providers." + 1):gsub("%.", "/")
  elseif module:match("^dsh%.") then
    rel = "lua/" .. module:gsub("%.", "/")
  else
    return nil
  end
  for _, cand in ipairs { rel .. ".lua", rel .. "/init.lua" } do
    if tree.files[cand] then return cand end
  end
  return nil
end

-- The lua/dsh/providers link makes providers reachable under lua/ too.
local function skipped(path)
  return path:match("^lua/dsh/providers/") ~= nil
end

--- Every require edge of the tree: {from=, from_layer=, module=, to=, to_layer=, line=}.
-- A dsh.* module that resolves to no file is an edge with to = nil.
function M.edges(tree, layers)
  local out = {}
  for path, src in pairs(tree.files) do
    if is_lua(path) and not skipped(path) then
      for _, r in ipairs(source.requires(src)) do
        local to = M.resolve(tree, r.module)
        out[#out + 1] = {
          from = path, from_layer = M.layer_of(layers, path), module = r.module, line = r.line,
          to = to, to_layer = to and M.layer_of(layers, to) or nil,
        }
      end
    end
  end
  table.sort(out, function(a, b)
    if a.from ~= b.from then return a.from < b.from end
    return a.line < b.line
  end)
  return out
end

local function set(list)
  local s = {}
  for _, v in ipairs(list or {}) do s[v] = true end
  return s
end

--- The folder a private module belongs to (the folder its first `_` part is
-- in: dsh.lsp._config -> lua/dsh/lsp/, dsh.core._ffi.check -> lua/dsh/core/,
-- dsh.providers.e2b._x -> providers/e2b/), or nil for a public module.
function M.private_owner(module)
  if not module:match("^dsh%.") then return nil end
  local parts = {}
  for p in module:gmatch("[^.]+") do parts[#parts + 1] = p end
  for i = 2, #parts do
    if parts[i]:sub(1, 1) == "_" then
      local owner = { unpack(parts, 1, i - 1) }
      if owner[2] == "providers" then
        return "providers/" .. table.concat(owner, "/", 3) .. (#owner > 2 and "/" or "")
      end
      return "lua/" .. table.concat(owner, "/") .. "/"
    end
  end
  return nil
end

-- Does rule r forbid edge e? (from side, then to side.)
local function forbids(r, e)
  if r.private then
    local owner = M.private_owner(e.module)
    return owner ~= nil and e.from:sub(1, #owner) ~= owner
  end
  if r.from and not set(r.from)[e.from_layer] then return false end
  if r.from_except and set(r.from_except)[e.from_layer] then return false end
  if r.to_modules and set(r.to_modules)[e.module] then return true end
  if r.to_module_prefixes then
    for _, p in ipairs(r.to_module_prefixes) do
      if e.module:sub(1, #p) == p then return true end
    end
  end
  if r.to_layers and e.to_layer and set(r.to_layers)[e.to_layer] then return true end
  if r.allow_layers and e.to and not set(r.allow_layers)[e.to_layer] then return true end
  if r.allow_layers and not e.to then return true end -- an external module
  return false
end

-- Paths from a file to a module, through requires, never entering a layer of `stop`.
local function reaches(layers, graph, start, module, stop)
  local seen, queue = { [start] = true }, { { file = start, chain = { start } } }
  while #queue > 0 do
    local cur = table.remove(queue, 1)
    for _, e in ipairs(graph[cur.file] or {}) do
      if e.module == module then
        local chain = { unpack(cur.chain) }
        chain[#chain + 1] = module
        return chain
      end
      if e.to and not seen[e.to] and not set(stop)[M.layer_of(layers, e.to)] then
        seen[e.to] = true
        local chain = { unpack(cur.chain) }
        chain[#chain + 1] = e.to
        queue[#queue + 1] = { file = e.to, chain = chain }
      end
    end
  end
  return nil
end

-- C: the headers core includes and dshd's link line.
local LUA_HEADERS = set { "lua.h", "lauxlib.h", "lualib.h", "luajit.h", "luaconf.h", "lua.hpp" }

local function c_violations(tree, out)
  local remote_files = {}
  for path in pairs(tree.files) do
    if path:match("^remote/") then remote_files[#remote_files + 1] = path end
  end
  for path, src in pairs(tree.files) do
    if path:match("^core/") and path:match("%.[ch]$") then
      local dir = path:match("^(.*)/[^/]*$")
      for _, inc in ipairs(source.includes(src)) do
        local name = inc.header
        local base = name:match("[^/]*$")
        if LUA_HEADERS[base] or name:match("^luajit") or name:match("^lua5") then
          out[#out + 1] = string.format("%s:%d includes %s: the C core includes no Lua header",
            path, inc.line, name)
        elseif not inc.system then
          local here = { dir .. "/" .. name, "core/include/" .. name, "core/src/" .. name }
          local found
          for _, c in ipairs(here) do
            local norm = c:gsub("/%./", "/")
            while norm:match("[^/]+/%.%./") do norm = norm:gsub("[^/]+/%.%./", "", 1) end
            if tree.files[norm] then found = norm break end
          end
          local into_remote = found and found:match("^remote/")
          if not found then
            for _, r in ipairs(remote_files) do
              if r:sub(-#name - 1) == "/" .. name then into_remote = r end
            end
          end
          if into_remote then
            out[#out + 1] = string.format("%s:%d includes %s (%s): the C core includes nothing of remote/",
              path, inc.line, name, found or into_remote)
          end
        end
      end
    end
  end
  -- target -> its link items, from every target_link_libraries(...)
  local links = {}
  for path, src in pairs(tree.files) do
    if path:match("CMakeLists%.txt$") then
      for args in src:gmatch("target_link_libraries%s*(%b())") do
        local words = {}
        for w in args:sub(2, -2):gmatch("[^%s]+") do words[#words + 1] = w end
        local target = table.remove(words, 1)
        links[target] = links[target] or {}
        for _, w in ipairs(words) do links[target][#links[target] + 1] = { item = w, file = path } end
      end
    end
  end
  if not links.dshd then
    out[#out + 1] = "no target_link_libraries(dshd ...) found: cannot check that dshd links no Lua"
    return
  end
  local seen = {}
  local function walk(target, via)
    if seen[target] then return end
    seen[target] = true
    for _, l in ipairs(links[target] or {}) do
      if l.item:lower():match("lua") then
        out[#out + 1] = string.format("%s links %s (through %s): dshd links no Lua", l.file, l.item, via)
      end
      if links[l.item] then walk(l.item, via .. " -> " .. l.item) end
    end
  end
  walk("dshd", "dshd")
end

--- Violations of tree against layers and rules, minus known exceptions
-- ("<from> -> <module>" keys); an exception that no longer occurs is a
-- violation too. Returns a sorted list of messages.
function M.check(tree, layers, rules, exceptions)
  local out = {}
  local edges = M.edges(tree, layers)
  local graph = {}
  for _, e in ipairs(edges) do
    graph[e.from] = graph[e.from] or {}
    table.insert(graph[e.from], e)
  end
  local used = {}
  local function violation(key, msg)
    if exceptions and exceptions[key] then
      used[key] = true
    else
      out[#out + 1] = msg
    end
  end
  for path in pairs(tree.files) do
    if is_lua(path) and not skipped(path) and not M.layer_of(layers, path) then
      out[#out + 1] = path .. " belongs to no layer: add its path to LAYERS"
    end
  end
  for _, e in ipairs(edges) do
    if e.module:match("^dsh%.") and not e.to then
      out[#out + 1] = string.format("%s:%d requires %s, which is no file of the tree", e.from, e.line, e.module)
    end
    for _, r in ipairs(rules) do
      if not r.transitive and e.from_layer and forbids(r, e) then
        violation(e.from .. " -> " .. e.module, string.format("%s:%d (%s) requires %s%s (%s): %s%s",
          e.from, e.line, e.from_layer, e.module, e.to and (" = " .. e.to) or "", e.to_layer or "external",
          r.rule, r.private and (", " .. M.private_owner(e.module)) or ""))
      end
    end
  end
  for _, r in ipairs(rules) do
    if r.transitive then
      local from = set(r.from)
      local paths = {}
      for path in pairs(tree.files) do
        if is_lua(path) and not skipped(path) and from[M.layer_of(layers, path)] then paths[#paths + 1] = path end
      end
      table.sort(paths)
      for _, path in ipairs(paths) do
        for _, module in ipairs(r.never_reach) do
          local chain = reaches(layers, graph, path, module, r.stop or {})
          if chain then
            violation(path .. " -> " .. module, string.format("%s reaches %s through %s: %s", path, module,
              table.concat(chain, " -> "), r.rule))
          end
        end
      end
    end
  end
  for key in pairs(exceptions or {}) do
    if not used[key] then
      out[#out + 1] = "known exception " .. key .. " no longer occurs: delete it from KNOWN_EXCEPTIONS"
    end
  end
  c_violations(tree, out)
  table.sort(out)
  return out
end

return M
