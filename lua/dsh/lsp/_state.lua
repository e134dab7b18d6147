--- dsh.lsp._state: what a running language server has told its client, and
-- the answers to the requests a server sends, as editors give them.
--
--   workspace/configuration    each item answered by its section ("a.b" is
--                              settings.a.b; no section: all the settings;
--                              a missing one: null)
--   workspace/workspaceFolders the instance's folders
--   window/workDoneProgress/create, client/(un)registerCapability: null
--                              (watched-file registrations are kept: their
--                              glob patterns filter didChangeWatchedFiles)
--   window/showMessageRequest  null (no action chosen)
--   workspace/diagnostic/refresh null (diagnostics are pulled at every query)
--   anything else              "method not found"
-- A server that registered no watchers hears of the changes matching the
-- fallback patterns (its extensions and root markers, or its configured
-- watchPatterns). Notifications kept: window/showMessage and window/logMessage (the last
-- MAX_MESSAGES, each cut at MAX_MESSAGE_CHARS) and $/progress (which work
-- is under way: the server is busy until every begun token ended).
local async = require "dsh.async"
local glob = require "dsh.lsp._glob"
local json = require "dsh.json"
local loop = require "dsh.core.loop"

local M = {}

M.MAX_MESSAGES = 50
M.MAX_MESSAGE_CHARS = 2000
M.MAX_PROGRESS = 256 -- tokens tracked at once; more are ignored
M.MAX_WATCHERS = 1024

M.METHOD_NOT_FOUND = -32601

local null = json.null
M.MESSAGE_TYPES = { "error", "warning", "info", "log", "debug" }

---@class dsh.lsp.State
local State = {}
State.__index = State

---@param settings table|nil   answers to workspace/configuration by section
---@param folders table        WorkspaceFolder[] of the instance
---@param array fun(t:table):table  marks a JSON array (dsh.json.array)
---@param fallback string[]|nil  glob patterns that stand for the server's registrations while it made none
---@param ready string[]|nil  texts one of which the server logs once it loaded the project
function M.new(settings, folders, array, fallback, ready)
  local fb = {}
  for _, p in ipairs(fallback or {}) do
    local m = glob.compile(p)
    if m then fb[#fb + 1] = m end
  end
  return setmetatable({
    settings = settings, folders = folders, _array = array, _fallback = fb,
    messages = {}, _seq = 0, _progress = {}, _nprogress = 0, _idle_waiters = {},
    _watchers = {}, _nwatchers = 0, _pulls = {}, last_activity = loop.now_ms(),
    _ready_texts = ready and #ready > 0 and ready or nil, loading = ready ~= nil and #ready > 0,
  }, State)
end

local function section_of(settings, section)
  if settings == nil then return null end
  if section == nil or section == null or section == "" then return settings end
  if type(section) ~= "string" then return null end
  local v = settings
  for part in section:gmatch("[^.]+") do
    if type(v) ~= "table" then return null end
    v = v[part]
    if v == nil then return null end
  end
  return v
end

--- The answer to workspace/configuration params.
function State:configuration(params)
  local items = type(params) == "table" and type(params.items) == "table" and params.items or {}
  local out = self._array {}
  for i = 1, #items do
    local it = items[i]
    out[i] = section_of(self.settings, type(it) == "table" and it.section or nil)
  end
  return out
end

function State:_register(params, add)
  local list = type(params) == "table" and (params.registrations or params.unregisterations) or nil
  if type(list) ~= "table" then return end
  for _, r in ipairs(list) do
    if type(r) == "table" and type(r.id) == "string" then
      if r.method == "textDocument/diagnostic" or (not add and self._pulls[r.id]) then
        -- pull diagnostics registered dynamically (pyright): a diagnosticProvider while registered
        self._pulls[r.id] = add and (type(r.registerOptions) == "table" and r.registerOptions or {}) or nil
        local _, any = next(self._pulls)
        self.pull = any
      elseif not add then
        if self._watchers[r.id] then self._nwatchers = self._nwatchers - 1 end
        self._watchers[r.id] = nil
      elseif r.method == "workspace/didChangeWatchedFiles" and self._nwatchers < M.MAX_WATCHERS then
        local ws = type(r.registerOptions) == "table" and r.registerOptions.watchers
        local compiled = {}
        for _, w in ipairs(type(ws) == "table" and ws or {}) do
          local pattern = type(w) == "table" and w.globPattern
          local base
          if type(pattern) == "table" then -- a RelativePattern
            base = type(pattern.baseUri) == "string" and pattern.baseUri
              or (type(pattern.baseUri) == "table" and pattern.baseUri.uri) or nil
            pattern = pattern.pattern
          end
          local m = type(pattern) == "string" and glob.compile(pattern)
          if m then
            compiled[#compiled + 1] = { match = m, base = base, kind = type(w.kind) == "number" and w.kind or 7 }
          end
        end
        if not self._watchers[r.id] then self._nwatchers = self._nwatchers + 1 end
        self._watchers[r.id] = compiled
      end
    end
  end
end

--- Whether the server registered for watched files at all.
function State:watching()
  return self._nwatchers > 0
end

--- Whether a change (type 1 created, 2 changed, 3 deleted) at path (relative
--- to the root whose URI is root_uri) is one a registration asked for; while
--- the server registered none, whether it matches a fallback pattern.
function State:wants(rel, uri, root_uri, change)
  if self._nwatchers == 0 then
    for _, m in ipairs(self._fallback) do
      if m(rel) then return true end
    end
    return false
  end
  local bit_of = change == 1 and 1 or change == 2 and 2 or 4
  for _, list in pairs(self._watchers) do
    for _, w in ipairs(list) do
      if w.kind % (bit_of * 2) >= bit_of then
        local subject = rel
        if w.base then
          local b = w.base:gsub("/+$", "") .. "/"
          subject = uri:sub(1, #b) == b and uri:sub(#b + 1) or nil
        elseif root_uri and uri:sub(1, #root_uri + 1) ~= root_uri .. "/" then
          subject = nil
        end
        if subject and (w.match(subject) or w.match(uri)) then return true end
      end
    end
  end
  return false
end

function State:_message(params, kind)
  if type(params) ~= "table" or type(params.message) ~= "string" then return end
  local text = params.message
  if #text > M.MAX_MESSAGE_CHARS then text = text:sub(1, M.MAX_MESSAGE_CHARS) .. "…" end
  self._seq = self._seq + 1
  local list = self.messages
  list[#list + 1] = { seq = self._seq, kind = kind, type = M.MESSAGE_TYPES[params.type] or "log", text = text }
  if #list > M.MAX_MESSAGES then table.remove(list, 1) end
  if self.loading then
    for _, t in ipairs(self._ready_texts) do
      if params.message:find(t, 1, true) then
        self.loading = false
        self:_wake_idle()
        break
      end
    end
  end
end

--- Expect one of texts in a message to come (the server acknowledging
--- changes): busy until it does.
function State:expect(texts)
  if not texts or #texts == 0 then return end
  self._ready_texts, self.loading = texts, true
end

--- Messages (showMessage, logMessage) after sequence number `after`,
--- optionally only those of some types ({error=true}).
function State:messages_after(after, types)
  local out = {}
  for _, m in ipairs(self.messages) do
    if m.seq > (after or 0) and (not types or types[m.type]) then out[#out + 1] = m end
  end
  return out
end

function State:_progress_note(params)
  if type(params) ~= "table" then return end
  local token, v = params.token, params.value
  if (type(token) ~= "string" and type(token) ~= "number") or type(v) ~= "table" then return end
  token = tostring(token)
  self.last_activity = loop.now_ms()
  if v.kind == "begin" then
    if not self._progress[token] and self._nprogress < M.MAX_PROGRESS then
      self._nprogress = self._nprogress + 1
      self._progress[token] = { title = type(v.title) == "string" and v.title or "", message = v.message }
      self.began = true
    end
  elseif v.kind == "report" then
    local p = self._progress[token]
    if p and type(v.message) == "string" then p.message = v.message end
  elseif v.kind == "end" then
    if self._progress[token] then
      self._progress[token] = nil
      self._nprogress = self._nprogress - 1
      self.ended = (self.ended or 0) + 1
      if self._nprogress == 0 then self:_wake_idle() end
    end
  end
end

function State:_wake_idle()
  if self._nprogress > 0 or self.loading then return end
  local ws = self._idle_waiters
  self._idle_waiters = {}
  for _, f in ipairs(ws) do f:resolve() end
end

--- Titles of the work in progress ("loading" while a ready message is awaited).
function State:busy()
  local out = {}
  if self.loading then out[1] = "loading (no ready message yet)" end
  for _, p in pairs(self._progress) do
    out[#out + 1] = p.title .. ((type(p.message) == "string" and p.message ~= "") and (": " .. p.message) or "")
  end
  table.sort(out)
  return out
end

--- Wait until no work is in progress, at most ms: true when idle.
function State:wait_idle(ms, signal)
  if self._nprogress == 0 and not self.loading then return true end
  local f = async.future()
  self._idle_waiters[#self._idle_waiters + 1] = f
  local ok = async.timeout(ms, function(sig) return async.race_signal(f, sig) end, signal)
  return ok and self._nprogress == 0 and not self.loading or false
end

--- Release every waiter (the instance is going away).
function State:close()
  local ws = self._idle_waiters
  self._idle_waiters = {}
  for _, f in ipairs(ws) do f:resolve() end
end

--- The answer to a server request, as (handled, result, rpcerr).
function State:on_request(method, params)
  if method == "workspace/configuration" then return self:configuration(params) end
  if method == "workspace/workspaceFolders" then return self._array(self.folders) end
  if method == "client/registerCapability" then
    self:_register(params, true)
    return null
  end
  if method == "client/unregisterCapability" then
    self:_register(params, false)
    return null
  end
  if method == "window/workDoneProgress/create" or method == "window/showMessageRequest"
    or method == "workspace/diagnostic/refresh" then -- dsh pulls on every query anyway
    return null
  end
  return nil, { code = M.METHOD_NOT_FOUND, message = "method not found: " .. method }
end

--- Keep what a notification says; true when it was one of this module's.
function State:on_notification(method, params)
  if method == "window/showMessage" then
    self:_message(params, "show")
  elseif method == "window/logMessage" then
    self:_message(params, "log")
  elseif method == "$/progress" then
    self:_progress_note(params)
  else
    return false
  end
  return true
end

return M
