--- dsh.lsp._local_watch: watches for lsp-local, through the file watcher
-- program (remote/lsp/watcher.lua: inotify, run with LuaJIT by the
-- provider's ctx.subprocess, where the servers run).
--
-- opener(o) returns open(root) for dsh.lsp._watch: a watch whose next()
-- yields {name, type} as envd's WatchDir does, whose sync() returns once
-- every change the kernel had queued is delivered (the watcher's barrier:
-- the hub calls it before a query), and whose close() stops the process
-- and waits until it is gone. A watcher that ends or breaks its record
-- format ends the watch (the hub opens it again on the next query).
local async = require "dsh.async"
local errors = require "dsh.errors"
local reader = require "dsh.lsp._reader"

local M = {}

M.MAX_NAME = 65536

local TYPES = { c = "create", w = "write", r = "remove", m = "rename" }

---@class dsh.lsp.LocalWatch
local Watch = {}
Watch.__index = Watch
Watch.__tostring = function(w)
  return "dsh.lsp.local_watch(" .. w.root .. (w._closed and ", closed" or "") .. ")"
end

function Watch:_fail(why)
  if self._failed then return end
  self._failed = errors.new("LSP_SERVER_FAILED", "the file watcher of " .. self.root .. " " .. why)
  for _, f in pairs(self._syncs) do f:resolve(false) end
  self._syncs = {}
  self._h:terminate()
  self._h.stdout:close()
end

-- The next record {kind, body}, or nil at the end / on a malformed one.
function Watch:_record()
  while true do
    local kind, n, rest = self._buf:match("^(%a+) (%d+)\n(.*)$")
    if kind then
      n = tonumber(n)
      if n > M.MAX_NAME then return nil, "sent an over-long record" end
      if #rest >= n then
        self._buf = rest:sub(n + 1)
        return kind, rest:sub(1, n)
      end
    elseif #self._buf > 64 and not self._buf:find("\n", 1, true) then
      return nil, "sent a malformed record"
    end
    local chunk = self._h.stdout:read()
    if not chunk then return nil, "ended" end
    self._buf = self._buf .. chunk
  end
end

--- The next event {name=, type=}, or nil, err when the watch ended.
function Watch:next()
  while not self._failed do
    local kind, body = self:_record()
    if not kind then
      self:_fail(body)
      break
    end
    if TYPES[kind] then return { name = body, type = TYPES[kind] } end
    if kind == "s" then
      local f = self._syncs[tonumber(body)]
      self._syncs[tonumber(body)] = nil
      if f then f:resolve(true) end
    elseif kind == "o" then
      self.overflows = (self.overflows or 0) + 1
    elseif kind ~= "l" and kind ~= "ready" then
      self:_fail("sent an unknown record")
    end
  end
  return nil, self._failed
end

--- Wait until every change queued before now was delivered by next().
function Watch:sync(signal)
  if self._failed or self._closed then return false end
  local id = self._next
  self._next = id + 1
  local f = async.future()
  self._syncs[id] = f
  local ok = self._h.stdin:write("sync " .. id .. "\n")
  if not ok then
    self:_fail("stopped taking requests")
    return false
  end
  return async.await(f, signal)
end

function Watch:close()
  if self._closed then return end
  self._closed = true
  self:_fail("was closed")
  self._h.stdin:close()
  self._h.done:await()
  self._h:waitForExit()
end

--- open(root) for dsh.lsp._watch, through subprocess with interpreter luajit.
---@param o {subprocess: table, luajit: string, graceMs: integer|nil}
function M.opener(o)
  return function(root)
    local h, err = o.subprocess:spawn {
      argv = { o.luajit, "-e", reader.program("watcher.lua") }, env = { DSH_WATCH_ROOT = root },
      graceMs = o.graceMs or 2000,
      stdio = { stdin = "pipe", stdout = "pipe", stderr = { maxBytes = 4096 } },
    }
    if not h then return nil, err end
    local w = setmetatable({ root = root, _h = h, _buf = "", _syncs = {}, _next = 1 }, Watch)
    -- armed once it says so
    local kind, body = w:_record()
    if kind ~= "ready" then
      w:_fail(body or "did not start")
      local f = w._failed
      w:close()
      local tail = h.stderr and h.stderr:readFrom(0).text or ""
      return nil, errors.new(f.code, f.message .. (tail ~= "" and (": " .. tail:gsub("%s+$", "")) or ""))
    end
    return w
  end
end

return M
