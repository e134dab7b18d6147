--- dsh.lsp._glob: the glob patterns of LSP file-watcher registrations.
--
-- `*` matches within one path segment, `?` one character of a segment, `**`
-- any number of segments (none included), `{a,b}` either (not nested, at
-- most MAX_ALTERNATIVES after expansion), `[abc]`, `[a-z]` and `[!abc]` one
-- character. compile(pattern) returns a function(subject) -> boolean, or
-- nil for a pattern it will not take (too long, unbalanced, too many
-- alternatives): such a registration watches nothing.
local M = {}

M.MAX_PATTERN = 1024
M.MAX_ALTERNATIVES = 64

local function expand(p)
  local open = p:find("{", 1, true)
  if not open then return { p } end
  local close = p:find("}", open, true)
  if not close then return nil end
  local head, body, tail = p:sub(1, open - 1), p:sub(open + 1, close - 1), p:sub(close + 1)
  if body:find("{", 1, true) then return nil end
  local rest = expand(tail)
  if not rest then return nil end
  local out = {}
  for alt in (body .. ","):gmatch("([^,]*),") do
    for _, r in ipairs(rest) do
      out[#out + 1] = head .. alt .. r
      if #out > M.MAX_ALTERNATIVES then return nil end
    end
  end
  return out
end

-- The class at p[i] ("[...]"): a predicate on one character and the index after it.
local function class(p, i)
  local j = i + 1
  local negate = false
  if p:sub(j, j) == "!" or p:sub(j, j) == "^" then
    negate, j = true, j + 1
  end
  local items = {}
  local first = true
  while j <= #p do
    local c = p:sub(j, j)
    if c == "]" and not first then
      return function(ch)
        local hit = false
        for _, it in ipairs(items) do
          if ch >= it[1] and ch <= it[2] then hit = true break end
        end
        return hit ~= negate and ch ~= "/"
      end, j + 1
    end
    if p:sub(j + 1, j + 1) == "-" and p:sub(j + 2, j + 2) ~= "]" and j + 2 <= #p then
      items[#items + 1] = { c, p:sub(j + 2, j + 2) }
      j = j + 3
    else
      items[#items + 1] = { c, c }
      j = j + 1
    end
    first = false
  end
  return nil
end

-- Does pattern p from index i match subject s from index j? Backtracking,
-- bounded by the lengths (patterns and subjects are short paths).
local function match(p, i, s, j, budget)
  budget[1] = budget[1] - 1
  if budget[1] < 0 then return false end
  while i <= #p do
    local c = p:sub(i, i)
    if c == "*" and p:sub(i + 1, i + 1) == "*" then
      -- "**": any number of whole segments; "**/" may match nothing
      local after = i + 2
      if p:sub(after, after) == "/" then
        if match(p, after + 1, s, j, budget) then return true end
        for k = j, #s do
          if s:sub(k, k) == "/" and match(p, after + 1, s, k + 1, budget) then return true end
        end
        return false
      end
      for k = j, #s + 1 do
        if match(p, after, s, k, budget) then return true end
      end
      return false
    elseif c == "*" then
      for k = j, #s + 1 do
        if match(p, i + 1, s, k, budget) then return true end
        if s:sub(k, k) == "/" then break end
      end
      return false
    elseif c == "?" then
      if j > #s or s:sub(j, j) == "/" then return false end
      i, j = i + 1, j + 1
    elseif c == "[" then
      local pred, nexti = class(p, i)
      if not pred then
        if s:sub(j, j) ~= "[" then return false end
        i, j = i + 1, j + 1
      else
        if j > #s or not pred(s:sub(j, j)) then return false end
        i, j = nexti, j + 1
      end
    else
      if s:sub(j, j) ~= c then return false end
      i, j = i + 1, j + 1
    end
  end
  return j > #s
end

--- A matcher for pattern, or nil.
---@param pattern string
---@return (fun(subject:string):boolean)|nil
function M.compile(pattern)
  if type(pattern) ~= "string" or #pattern > M.MAX_PATTERN or pattern == "" then return nil end
  local alts = expand(pattern)
  if not alts then return nil end
  return function(subject)
    for _, a in ipairs(alts) do
      if match(a, 1, subject, 1, { 20000 }) then return true end
    end
    return false
  end
end

return M
