--- dsh.code_runtime._run: one Code Mode run on the host (reference §2.6
-- "run", "finish", "Run-ending events", "Bindings", "OutputLedger").
--
-- A run starts the runner's supervisor through the provider's
-- ctx.subprocess (a managed process group: stdin and stdout piped, stderr
-- collected), writes the boot frame, and then reads frames: logs go into the
-- one output ledger, calls are served by the bindings (each in its own task;
-- a call id is served once), and the first run-ending event settles the run.
-- Settling is final: frames and late replies after it are dropped and
-- nothing more is written. finish then terminates the group, waits for its
-- outcome and for the whole group to be gone, and only then reports.
local async = require "dsh.async"
local frame = require "dsh.frame"
local ledger = require "dsh.ledger"
local loop = require "dsh.loop"
local wire = require "dsh.code_runtime._wire"

local M = {}

M.KINDS = { exception = true, timeout = true, abort = true, ["worker-exit"] = true,
  ["invalid-output"] = true, ["output-limit"] = true }
local MAX_SAFE = 9007199254740991

local unpack = unpack -- luacheck: ignore 143
local pack = function(...) return { n = select("#", ...), ... } end

local function reason_text(reason)
  if reason == nil then return "aborted" end
  if type(reason) == "table" and reason.message then return tostring(reason.message) end
  return tostring(reason)
end

local function message_of(e)
  if type(e) == "table" and type(e.message) == "string" then return e.message end
  return tostring(e)
end

---@class dsh.code_runtime.Run
local Run = {}
Run.__index = Run
Run.__tostring = function(r)
  return "dsh.code_runtime.run(" .. r.spec.language .. (r.settled and ", settled" or "") .. ")"
end

function M.execute(svc, spec)
  local cfg = svc._cfg
  local empty = wire.array {}
  if spec.signal and spec.signal.aborted then
    return { logs = empty, error = { kind = "abort", message = reason_text(spec.signal.reason) } }
  end
  local r = setmetatable({
    svc = svc, cfg = cfg, spec = spec, label = svc._backend.label,
    logs = wire.array {}, ledger = ledger.new(cfg.maxOutputBytes), served = {}, by_global = {},
    gate = async.future(), final = async.future(), pump_done = async.future(), wq = {},
  }, Run)
  for _, b in ipairs(spec.bindings) do r.by_global[b.global] = b end
  svc._live[r] = true
  if spec.signal then
    r.off_abort = spec.signal:on_abort(function(reason)
      r:settle { kind = "abort", message = reason_text(reason) }
    end)
  end
  r:_task(Run._main)
  return r:wait()
end

--- The result, once the run's group is gone.
function Run:wait()
  return self.final:await()
end

-- Runs fn(self) as a task of the run. A raise in it is a bug (a backend
-- raised, so the handle's done was rejected): the run's caller gets it, as
-- dsh.async's rule says, rather than a run that never settles.
function Run:_task(fn)
  async.run(fn, self):on_settle(function(t)
    local ok, e = t:result()
    if ok or self.final:done() then return end
    self.settled = true
    if self.timer then self.timer:close() self.timer = nil end
    if self.off_abort then self.off_abort() self.off_abort = nil end
    if self.h then self.h:terminate() end
    self.svc._live[self] = nil
    self.final:reject(e)
  end)
end

function Run:settle_abort(message)
  self:settle { kind = "abort", message = message }
end

-- The first run-ending event wins. e: an error {kind, message}, or a result.
function Run:settle(e, value, has_value)
  if self.settled then return end
  self.settled = true
  self.outcome = { error = e, value = value, has_value = has_value }
  if self.timer then self.timer:close() self.timer = nil end
  if self.off_abort then self.off_abort() self.off_abort = nil end
  self.gate:resolve()
  self:_task(Run._finish)
end

function Run:_fail(kind, message)
  self:settle { kind = kind, message = message }
end

function Run:_main()
  local svc, cfg = self.svc, self.cfg
  local i, prep, perr = async.race { svc._ready, self.gate }
  if i == 2 or self.settled then return end
  if svc._disposing then return self:settle_abort("runtime disposed") end
  if not prep then
    return self:_fail("worker-exit", self.label .. " setup failed: " .. message_of(perr))
  end
  local ok, h, err = pcall(svc._backend.subprocess.spawn, svc._backend.subprocess, {
    argv = { prep.luajit, prep.root .. "/code-runtime-supervisor.lua", tostring(cfg.maxFrameBytes), prep.luajit,
      prep.node or "-" },
    cwd = svc._backend.cwd, env = {}, graceMs = cfg.killGraceMs,
    stdio = { stdin = "pipe", stdout = "pipe", stderr = { maxBytes = cfg.maxOutputBytes } },
  })
  if not ok or not h then
    local m = ok and message_of(err) or message_of(h)
    if svc._disposing then return self:settle_abort("runtime disposed") end
    if self.spec.signal and self.spec.signal.aborted then
      return self:settle_abort(reason_text(self.spec.signal.reason))
    end
    return self:_fail("worker-exit", self.label .. " spawn failed: " .. m)
  end
  self.h = h
  if self.settled then return end
  if not h.stdin or not h.stdout then
    return self:_fail("worker-exit", self.label .. " subprocess dropped a piped runtime stream")
  end
  self.decoder = assert(frame.decoder(cfg.maxFrameBytes))
  self.pumping = true
  self:_task(Run._pump)
  local boot = wire.encode_json {
    type = "boot", language = self.spec.language, code = self.spec.program,
    namespaces = wire.array(self.spec.namespaces), computeMs = cfg.computeMs,
    maxOutputBytes = cfg.maxOutputBytes, maxOldGenerationSizeMb = cfg.maxOldGenerationSizeMb,
    maxMemoryMb = cfg.maxMemoryMb, libraries = wire.array(cfg.luaLibraries),
  }
  self.timer = loop.timer(function()
    self:_fail("timeout", "wall-clock ceiling reached (" .. cfg.maxWallMs .. "ms)")
  end)
  self.timer:start(cfg.maxWallMs)
  self:_send(boot)
end

-- Frames out, one at a time and never after settling.
function Run:_send(json)
  local f, ferr = frame.encode(json, self.cfg.maxFrameBytes)
  if not f then return self:_fail("worker-exit", self.label .. " bridge failed: " .. ferr.message) end
  self.wq[#self.wq + 1] = f
  if self.writing then return end
  self.writing = true
  async.run(function()
    while #self.wq > 0 and not self.settled do
      local s = table.remove(self.wq, 1)
      local ok, err = self.h.stdin:write(s)
      if not ok and not self.settled then
        -- a start that failed shows first here (the group never got a pid)
        local what = self.h.pid < 0 and " spawn failed: " or " bridge write failed: "
        self:_fail("worker-exit", self.label .. what .. message_of(err))
      end
    end
    self.writing = false
  end)
end

function Run:_pump()
  local h = self.h
  while true do
    local chunk, err = h.stdout:read()
    if not chunk then
      if err and h.pid < 0 then -- the group never started (its pid stays -1)
        self:_fail("worker-exit", self.label .. " spawn failed: " .. message_of(err))
      elseif err then
        self:_fail("worker-exit", self.label .. " stdout failed: " .. message_of(err))
      elseif not self.settled then
        self:_exited()
      end
      break
    end
    if not self.settled then
      local texts, derr, before = self.decoder:push(chunk)
      for _, t in ipairs(texts or before) do
        if self.settled then break end
        self:_message(t)
      end
      if not texts then
        self.decoder_failed = true
        self:_fail("worker-exit", self.label .. " bridge failed: " .. derr.message)
      end
    end
  end
  self.pump_done:resolve()
end

-- stdout ended before a terminal frame.
function Run:_exited()
  local _, err = self.h.done:await()
  if self.settled then return end
  if err then return self:_fail("worker-exit", self.label .. " spawn failed: " .. message_of(err)) end
  local diag = self.h.stderr and self.h.stderr:readFrom(0).text or ""
  diag = diag:gsub("^%s+", ""):gsub("%s+$", "")
  self:_fail("worker-exit", self.label .. " exited before completing" .. (diag ~= "" and (": " .. diag) or ""))
end

local function safe_id(v)
  return type(v) == "number" and v >= 1 and v <= MAX_SAFE and v == math.floor(v)
end

-- Logs ------------------------------------------------------------------------------

function Run:_limit()
  self:_fail("output-limit", self.ledger:limit_message())
end

-- A whole log; false once the ledger is full (the run then settled).
function Run:_log(text)
  local fits, prefix = self.ledger:add_log(text)
  if fits then
    self.logs[#self.logs + 1] = text
    return true
  end
  if prefix ~= "" then self.logs[#self.logs + 1] = prefix end
  self:_limit()
  return false
end

function Run:_log_piece(text, more)
  local pending = self.pending and (self.pending .. text) or text
  if more and #pending <= self.cfg.maxOutputBytes then
    self.pending = pending
    return
  end
  self.pending = nil
  self:_log(pending) -- a log already longer than the ledger's bound cannot fit: limit now
end

-- Frames in ---------------------------------------------------------------------------

function Run:_message(text)
  local m = wire.decode_json(text, true) -- the frame decoder validated it
  if type(m) ~= "table" or getmetatable(m) == wire.array_mt then return end
  local t = m.type
  if t == "log" then
    if type(m.text) == "string" then self:_log_piece(m.text, m.more == true) end
  elseif t == "call" then
    if safe_id(m.id) and type(m.global) == "string" and type(m.name) == "string"
      and getmetatable(m.args) == wire.array_mt and not self.served[m.id] then
      self.served[m.id] = true
      async.run(Run._serve, self, m)
    end
  elseif t == "output-limit" then
    if self.pending then self:_log_piece("", false) end
    if not self.settled then self:_limit() end
  elseif t == "done" then
    self:_done(m)
  end
end

function Run:_done(m)
  local e = m.error
  if e ~= nil and (type(e) ~= "table" or not M.KINDS[e.kind] or type(e.message) ~= "string") then return end
  if self.pending then
    self:_log_piece("", false)
    if self.settled then return end
  end
  if e ~= nil then
    if not self.ledger:add_value(ledger.string_cost(e.message)) then return self:_limit() end
    return self:_fail(e.kind, e.message)
  end
  if m.value == nil then return self:settle(nil) end
  local v
  if getmetatable(m.value) == wire.array_mt then v = wire.from_tokens(m.value) end
  if v == nil then
    return self:_fail("invalid-output", "program completion must be lossless JSON")
  end
  if not self.ledger:add_value(wire.json_cost(v, ledger.string_cost)) then return self:_limit() end
  self:settle(nil, v, true)
end

-- Bindings ------------------------------------------------------------------------------

function Run:_reply_error(id, message)
  if self.settled then return end
  self:_send('{"type":"reply","id":' .. wire.number(id) .. ',"ok":false,"message":' .. wire.quote(message) .. "}")
end

function Run:_serve(m)
  local b = self.by_global[m.global]
  local fn = b and rawget(b.functions, m.name)
  if not fn then return self:_reply_error(m.id, string.format('unknown binding "%s.%s"', m.global, m.name)) end
  local args = wire.from_tokens(m.args)
  if type(args) ~= "table" or getmetatable(args) ~= wire.array_mt then
    return self:_reply_error(m.id, "binding arguments must be lossless JSON")
  end
  local res = pack(pcall(fn, unpack(args, 1, #args)))
  if self.settled then return end
  if not res[1] then return self:_reply_error(m.id, message_of(res[2])) end
  if res[2] == nil and res[3] ~= nil then return self:_reply_error(m.id, message_of(res[3])) end
  local w = wire.encode(res[2])
  if not w then return self:_reply_error(m.id, "binding resolution must be lossless JSON") end
  self:_send('{"type":"reply","id":' .. wire.number(m.id) .. ',"ok":true,"value":' .. w .. "}")
end

-- Finishing -------------------------------------------------------------------------------

function Run:_finish()
  async.yield() -- the next turn: whatever settled us has returned
  local out = self.outcome
  local h = self.h
  if h then
    h:terminate()
    h.done:await()
    local gone, werr = h:waitForExit()
    if self.pumping then self.pump_done:await() end
    local failure
    if gone ~= true then
      failure = self.label .. " cleanup failed: " .. (werr and message_of(werr) or "the group did not exit")
    elseif self.decoder then
      -- a partial frame left at the end (a failure already reported is not repeated)
      local ok, ferr = self.decoder:finish()
      if not ok and not self.decoder_failed then failure = ferr.message end
      self.decoder:close()
    end
    if failure then out = { error = { kind = "worker-exit", message = failure } } end
  end
  self.svc._live[self] = nil
  local result = { logs = self.logs }
  if out.error then
    result.error = { kind = out.error.kind, message = out.error.message }
  elseif out.has_value then
    result.value = out.value
  end
  self.final:resolve(result)
end

return M
