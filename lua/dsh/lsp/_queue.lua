--- dsh.lsp._queue: one FIFO lock per key (a canonical workspace), so that
-- queries on one workspace run one at a time in arrival order while other
-- workspaces run in parallel. Waiting is abortable: an aborted waiter leaves
-- the line with the abort's reason (code ABORTED, err.reason exactly the
-- reason given), and what its predecessor did (failed, raised) never reaches
-- it: each holder must call its release function once.
local async = require "dsh.async"

local M = {}

---@class dsh.lsp.Queue
local Queue = {}
Queue.__index = Queue
Queue.__tostring = function(q)
  local n = 0
  for _ in pairs(q._held) do n = n + 1 end
  return "dsh.lsp.queue(" .. n .. " keys held)"
end

---@return dsh.lsp.Queue
function M.new()
  return setmetatable({ _held = {}, _waiting = {}, _idle = nil }, Queue)
end

function Queue:_release(key)
  local line = self._waiting[key]
  while line and #line > 0 do
    local w = table.remove(line, 1)
    if w:resolve(true) then return end -- handed over
  end
  self._waiting[key] = nil
  self._held[key] = nil
  if next(self._held) == nil and self._idle then
    local f = self._idle
    self._idle = nil
    f:resolve()
  end
end

--- Wait for key's turn: a release function (call it once), or nil, err
--- when signal aborted first (also when it already had).
---@param key string
---@param signal dsh.AbortSignal|nil
---@return (fun())|nil, dsh.Error|nil
---@return boolean waited  whether another holder went first
function Queue:acquire(key, signal)
  if signal and signal.aborted then return nil, async.abort_error(signal.reason) end
  local waited = false
  if self._held[key] then
    waited = true
    local w = async.future()
    local line = self._waiting[key] or {}
    self._waiting[key] = line
    line[#line + 1] = w
    if signal then
      local ok, err = async.race_signal(w, signal)
      if not ok then
        -- leave the line; if the turn came at the same moment, pass it on
        if not w:resolve(false) then self:_release(key) end
        return nil, err
      end
    else
      w:await()
    end
  end
  self._held[key] = true
  local released = false
  return function()
    if released then return end
    released = true
    self:_release(key)
  end, nil, waited
end

--- Wait until no key is held.
function Queue:idle()
  if next(self._held) == nil then return true end
  self._idle = self._idle or async.future()
  self._idle:await()
  return true
end

return M
