--- dsh.lsp._watch: what changes on disk under the roots language servers
-- work on, for workspace/didChangeWatchedFiles.
--
-- One hub per provider set (dsh.lsp.backend), one watch per root, shared by
-- every instance on that root. A backend gives `open(root)`, which returns a
-- watch whose next() yields {name = path relative to root, type =
-- "create"|"write"|"remove"|"rename"|"chmod"} (dsh.envd's WatchDir stream
-- for lsp-e2b: dshd's inotify watches in the sandbox see every writer there:
-- ctx.fs, Bash, terminals, Code Mode, the servers themselves) and close().
-- Without `open` nothing is watched (then only the documents open in a
-- server are re-synced before each query).
--
-- Events become (absolute path, change) for each subscriber: create →
-- created, write → changed, remove and rename (the old name) → deleted;
-- chmod is dropped, and so are ctx.fs's own temporary files
-- (`.<name>.dsh-<uuid>.tmp`, renamed onto the target) and everything under
-- `.git/`. A watch that ends or fails is opened again on the next ensure()
-- (what happened in between is not known; hub.gaps counts such ends).
local async = require "dsh.async"

local M = {}

M.CREATED, M.CHANGED, M.DELETED = 1, 2, 3

local CHANGE = { create = M.CREATED, write = M.CHANGED, remove = M.DELETED, rename = M.DELETED }

---@class dsh.lsp.WatchHub
local Hub = {}
Hub.__index = Hub
Hub.__tostring = function(h)
  local n = 0
  for _ in pairs(h._roots) do n = n + 1 end
  return string.format("dsh.lsp.watch(%d roots%s)", n, h._closed and ", closed" or "")
end

--- A hub over open(root) (nil: nothing is watched).
---@param open (fun(root:string):table|nil, dsh.Error|nil)|nil
function M.new(open)
  return setmetatable({ _open = open, _roots = {}, gaps = 0 }, Hub)
end

--- Whether changes under a root are watched at all.
function Hub:enabled()
  return self._open ~= nil and not self._closed
end

-- Is this relative name one no server should hear of?
local function ignored(name)
  if name == "." or name == "" then return true end
  local base = name:match("([^/]*)$")
  if base:match("^%..+%.dsh%-[%w%-]+%.tmp$") then return true end
  return name == ".git" or name:sub(1, 5) == ".git/" or name:find("/.git/", 1, true) ~= nil
    or name:sub(-5) == "/.git"
end

function Hub:_pump(root, e)
  local w = e.watch
  while true do
    local ev, err = w:next()
    if not ev or e.watch ~= w then
      if e.watch == w then
        e.watch, e.error = nil, err
        self.gaps = self.gaps + 1
      end
      w:close() -- ended or replaced: its stream goes too
      return
    end
    local change = CHANGE[ev.type]
    local name = type(ev.name) == "string" and ev.name or ""
    if change and not ignored(name) then
      local path = (root == "/" and "" or root) .. "/" .. name
      for fn in pairs(e.subs) do fn(path, change) end
    end
  end
end

--- Make sure root is watched (opened again after it ended): true, or nil, err.
function Hub:ensure(root)
  if not self:enabled() then return nil end
  local e = self._roots[root]
  if not e then
    e = { subs = {} }
    self._roots[root] = e
  end
  if e.watch then return true end
  if e.opening then return e.opening:await() end
  e.opening = async.future()
  local w, err = self._open(root)
  local f = e.opening
  e.opening = nil
  if not w then
    e.error = err
    f:resolve(nil, err)
    return nil, err
  end
  if self._closed then
    w:close()
    f:resolve(nil)
    return nil
  end
  e.watch, e.error = w, nil
  e.task = async.run(Hub._pump, self, root, e)
  e.task:on_settle(function() end)
  f:resolve(true)
  return true
end

-- Close a root's watch, once.
local function close_watch(e)
  local w = e.watch
  if not w then return end
  e.watch = nil
  w:close()
end

--- Call fn(path, change) for every change under root: an unsubscribe function.
function Hub:subscribe(root, fn)
  local e = self._roots[root]
  if not e then
    e = { subs = {} }
    self._roots[root] = e
  end
  e.subs[fn] = true
  return function()
    e.subs[fn] = nil
    if next(e.subs) == nil and self._roots[root] == e then
      self._roots[root] = nil
      close_watch(e)
    end
  end
end

--- Let the changes made before now be dispatched before a query goes on.
--- A watch with a barrier (sync: lsp-local's watcher) is asked for one.
--- Otherwise (envd's WatchDir): a change made before the query (by any
--- writer in the sandbox) was queued by the kernel before dshd answered the
--- query's own round trip, so dshd sent it first; one more turn of the loop
--- delivers it here.
function Hub:settle(signal)
  if not self:enabled() or next(self._roots) == nil then return end
  local barriers, plain = {}, false
  for _, e in pairs(self._roots) do
    local w = e.watch
    if w and w.sync then
      barriers[#barriers + 1] = async.run(w.sync, w, signal)
    elseif w then
      plain = true
    end
  end
  for _, f in ipairs(barriers) do f:await() end
  if plain then
    async.sleep(0)
    async.yield()
  end
end

--- Stop every watch (idempotent).
function Hub:close()
  self._closed = true
  for root, e in pairs(self._roots) do
    self._roots[root] = nil
    close_watch(e)
    if e.task then e.task:await() end
  end
  return true
end

return M
