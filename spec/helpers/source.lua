--- Reading dsh's own source for the specs that check the tree itself
-- (spec/00-arch, the error catalogue): the files, a Lua tokenizer that knows
-- comments and every string form, the modules a Lua file requires, the
-- headers a C file includes.
local helpers = require "helpers"
local lfs = require "lfs"

local M = {}

--- Every file under dir (relative to the repository root) whose name matches
-- pattern, as paths relative to the root, sorted. node_modules is skipped.
function M.files(dir, pattern)
  local out = {}
  local function walk(rel)
    local abs = helpers.root .. "/" .. rel
    local mode = lfs.symlinkattributes(abs, "mode")
    if mode == "directory" then
      for name in lfs.dir(abs) do
        if name ~= "." and name ~= ".." and name ~= "node_modules" then walk(rel .. "/" .. name) end
      end
    elseif mode == "file" and rel:match(pattern) then
      out[#out + 1] = rel
    end
  end
  walk(dir)
  table.sort(out)
  return out
end

function M.read(rel)
  return assert(helpers.read_file(helpers.root .. "/" .. rel), "cannot read " .. rel)
end

-- Tokens ---------------------------------------------------------------------------

-- The closing bracket of a long bracket opened at i ("[", "=", ..., "["), or nil.
local function long_bracket(s, i)
  local eq = s:match("^%[(=*)%[", i)
  if not eq then return nil end
  local close = "]" .. eq .. "]"
  local open_len = #eq + 2
  local j = s:find(close, i + open_len, true)
  local body = s:sub(i + open_len, (j or #s + 1) - 1):gsub("^\r?\n", "")
  return (j or #s) + #close - 1, body
end

local ESC = { n = "\n", t = "\t", r = "\r", a = "\a", b = "\b", f = "\f", v = "\v" }

--- Lua tokens of s: {type = "name"|"string"|"number"|"op", value =, line =}.
-- Comments are dropped; strings are decoded (common escapes).
function M.tokens(s)
  local out, i, line, n = {}, 1, 1, #s
  local function add(t, v, l) out[#out + 1] = { type = t, value = v, line = l } end
  while i <= n do
    local c = s:sub(i, i)
    if c == "\n" then
      line = line + 1
      i = i + 1
    elseif c:match("%s") then
      i = i + 1
    elseif s:sub(i, i + 1) == "--" then
      local stop, body = long_bracket(s, i + 2)
      if stop then
        line = line + select(2, s:sub(i, stop):gsub("\n", ""))
        i = stop + 1
        local _ = body
      else
        local e = s:find("\n", i, true) or n + 1
        i = e
      end
    elseif c == "[" and s:match("^%[=*%[", i) then
      local stop, body = long_bracket(s, i)
      add("string", body, line)
      line = line + select(2, s:sub(i, stop):gsub("\n", ""))
      i = stop + 1
    elseif c == '"' or c == "'" then
      local buf, j, l = {}, i + 1, line
      while j <= n do
        local d = s:sub(j, j)
        if d == c then break end
        if d == "\\" then
          local e = s:sub(j + 1, j + 1)
          if e == "\n" then line = line + 1 end
          buf[#buf + 1] = ESC[e] or e
          j = j + 2
        else
          if d == "\n" then line = line + 1 end
          buf[#buf + 1] = d
          j = j + 1
        end
      end
      add("string", table.concat(buf), l)
      i = j + 1
    elseif c:match("[%a_]") then
      local w = s:match("^[%w_]+", i)
      add("name", w, line)
      i = i + #w
    elseif c:match("%d") then
      local w = s:match("^0[xX]%x+", i) or s:match("^%d+%.?%d*[eE][%+%-]?%d+", i) or s:match("^%d+%.?%d*", i)
      add("number", w, line)
      i = i + #w
    else
      local op = s:match("^%.%.%.", i) or s:match("^[=~<>]=", i) or s:match("^%.%.", i) or s:match("^::", i) or c
      add("op", op, line)
      i = i + #op
    end
  end
  return out
end

--- Modules a Lua file requires: list of {module =, line =}. Knows
-- `require "m"`, `require("m")`, `pcall(require, "m")` and a computed
-- argument (`require(c and "a" or "b")`: every string literal in it).
function M.requires(src)
  local t = M.tokens(src)
  local out = {}
  local function lit(tok) return tok and tok.type == "string" end
  for k, tok in ipairs(t) do
    if tok.type == "name" and tok.value == "require" and not (t[k - 1] and t[k - 1].value == ".") then
      local nx = t[k + 1]
      if lit(nx) then
        out[#out + 1] = { module = nx.value, line = tok.line }
      elseif nx and nx.value == "(" then
        local depth, j = 0, k + 1
        repeat
          local x = t[j]
          if x.value == "(" then depth = depth + 1 elseif x.value == ")" then depth = depth - 1 end
          if x.type == "string" and x.value:match("^[%w_][%w_%.]*[%w_]$") then
            out[#out + 1] = { module = x.value, line = x.line }
          end
          j = j + 1
        until depth == 0 or j > #t
      elseif nx and nx.value == "," and lit(t[k + 2]) then -- pcall(require, "m")
        out[#out + 1] = { module = t[k + 2].value, line = tok.line }
      end
    end
  end
  return out
end

--- The error codes a Lua file spells: {code =, line =} for
--   * the first argument of an error constructor when it is a literal:
--     errors.new("X", ...) through any name bound to require "dsh.errors" or
--     require "dsh.fs._errors", and any local bound to such a module's .new
--     (a literal followed by `..` is the prefix of a family: prefix = true);
--   * every other literal shaped like an UPPER_SNAKE code (a letter, then an
--     underscore somewhere), unless it is os.getenv's argument (a variable name).
function M.error_codes(src)
  local t = M.tokens(src)
  local mods, ctors, out, taken = {}, {}, {}, {}
  -- local a, b = require "dsh.errors" / X.new, ...
  for k, tok in ipairs(t) do
    if tok.value == "local" then
      local names, j = {}, k + 1
      while t[j] and t[j].type == "name" do
        names[#names + 1] = t[j].value
        if t[j + 1] and t[j + 1].value == "," then j = j + 2 else j = j + 1 break end
      end
      if t[j - 1] and t[j - 1].type == "name" and t[j] and t[j].value == "=" then
        j = j + 1
        for _, name in ipairs(names) do
          local a, b, c = t[j], t[j + 1], t[j + 2]
          if a and a.value == "require" and b and b.type == "string"
            and (b.value == "dsh.errors" or b.value == "dsh.fs._errors") then
            mods[name] = true
            j = j + 2
          elseif a and mods[a.value] and b and b.value == "." and c and c.value == "new" then
            ctors[name] = true
            j = j + 3
          else
            break
          end
          if t[j] and t[j].value == "," then j = j + 1 end
        end
      end
    end
  end
  for k, tok in ipairs(t) do
    local arg
    if tok.type == "name" and mods[tok.value] and t[k + 1] and t[k + 1].value == "."
      and t[k + 2] and t[k + 2].value == "new" and t[k + 3] and t[k + 3].value == "(" then
      arg = t[k + 4]
    elseif tok.type == "name" and ctors[tok.value] and t[k + 1] and t[k + 1].value == "("
      and not (t[k - 1] and (t[k - 1].value == "." or t[k - 1].value == ":")) then
      arg = t[k + 2]
    end
    if arg and arg.type == "string" then
      local nx = t[k + (t[k + 4] == arg and 5 or 3)]
      -- "PROC_" .. name: the prefix of a family of codes
      out[#out + 1] = { code = arg.value, line = arg.line, prefix = nx and nx.value == ".." or nil }
      taken[arg] = true
    end
  end
  for k, tok in ipairs(t) do
    if tok.type == "string" and not taken[tok] and tok.value:match("^[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]$") then
      local getenv = t[k - 1] and t[k - 1].value == "(" and t[k - 2] and t[k - 2].value == "getenv"
      if not getenv then out[#out + 1] = { code = tok.value, line = tok.line } end
    end
  end
  table.sort(out, function(a, b) return a.line < b.line end)
  return out
end

--- Headers a C file includes: list of {header =, line =, system = bool}.
function M.includes(src)
  local out, line = {}, 0
  for l in (src .. "\n"):gmatch("([^\n]*)\n") do
    line = line + 1
    local kind, name = l:match('^%s*#%s*include%s*([<"])([^>"]+)[>"]')
    if name then out[#out + 1] = { header = name, line = line, system = kind == "<" } end
  end
  return out
end

return M
