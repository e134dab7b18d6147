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
--
-- Frames go through the C bridge both ways (dsh.code_runtime._frames): the
-- host never checks or converts a payload byte in Lua, and a run's work
-- gives the loop a turn every PACE_BYTES, so one run's traffic never holds
-- up the others. Memory is bounded by design: a frame is at most
-- maxFrameBytes (refused as its bytes arrive, before they are decoded), and
-- while the calls being served hold more than maxFrameBytes of arguments
-- and replies, no further frame is read: the runner waits (its pipe fills)
-- until replies went out.
local async = require "dsh.async"
local frames = require "dsh.code_runtime._frames"
local ledger = require "dsh.core.ledger"
local loop = require "dsh.core.loop"
local json = require "dsh.code_runtime._json"
local wire = require "dsh.code_runtime._wire"

local M = {}

M.KINDS = { exception = true, timeout = true, abort = true, ["worker-exit"] = true,
  ["invalid-output"] = true, ["output-limit"] = true }
local MAX_SAFE = 9007199254740991
local OPEN, ANSWERED = 1, 2 -- a served call id's state (a duplicate id is ignored either way)
local CALL_COST = 1024 -- in-flight bytes a call counts beyond its arguments: bounds how many run at once

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

-- "source.lua:12: " that error() puts before a message (also several, as a
-- message raised again with a level gathers them): the host's source is not
-- the model's business.
local function strip_position(s)
  for _ = 1, 16 do
    local rest = s:match("^[^%s:]+%.lua:%d+: (.*)$") or s:match('^%[string ".-"%]:%d+: (.*)$')
    if not rest then break end
    s = rest
  end
  return s
end

-- The text of a binding's failure, as the model sees it: an error table's
-- message, a string without the position error() put before it, anything
-- else through tostring; a __tostring that raises (or returns no string)
-- gives a fixed text instead, so the call is always answered.
local function failure_text(e)
  if type(e) == "table" then
    local ok, m = pcall(function() return e.message end)
    if ok and type(m) == "string" then return m end
  end
  if type(e) == "string" then return strip_position(e) end
  local ok, s = pcall(tostring, e)
  if ok and type(s) == "string" then return strip_position(s) end
  return "binding failed with an error that cannot be shown"
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
    gate = async.future(), final = async.future(), pump_done = async.future(), wq = {}, wq_head = 1, wq_tail = 0,
    inflight = 0, paced = 0,
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
  self.reader = frames.reader(cfg.maxFrameBytes)
  self.pumping = true
  self:_task(Run._pump)
  self.timer = loop.timer(function()
    self:_fail("timeout", "wall-clock ceiling reached (" .. cfg.maxWallMs .. "ms)")
  end)
  self.timer:start(cfg.maxWallMs)
  local w = self:_writer()
  local bok, berr = json.encode_json_into({
    type = "boot", language = self.spec.language, code = self.spec.program,
    namespaces = wire.array(self.spec.namespaces), computeMs = cfg.computeMs,
    maxOutputBytes = cfg.maxOutputBytes, maxOldGenerationSizeMb = cfg.maxOldGenerationSizeMb,
    maxMemoryMb = cfg.maxMemoryMb, libraries = wire.array(cfg.luaLibraries),
  }, w)
  if not bok then
    w:close()
    if type(berr) == "table" then return self:_bridge_failed(berr) end
    return self:_fail("worker-exit", self.label .. " bridge failed: the program is not valid UTF-8")
  end
  self:_send(w)
end

-- Lets the loop run once this run has worked PACE_BYTES since it last did.
function Run:_pace(bytes)
  self.paced = self.paced + bytes
  if self.paced >= frames.PACE_BYTES then
    self.paced = 0
    async.sleep(0)
  end
end

function Run:_writer()
  return frames.writer(self.cfg.maxFrameBytes, function(n) self:_pace(n) end)
end

function Run:_bridge_failed(err)
  self:_fail("worker-exit", self.label .. " bridge failed: " .. message_of(err))
end

-- In-flight bytes: calls being served and replies not yet written.
function Run:_hold(n) self.inflight = self.inflight + n end
function Run:_release(n)
  self.inflight = self.inflight - n
  if self.space and self.inflight <= self.cfg.maxFrameBytes then
    local f = self.space
    self.space = nil
    f:resolve()
  end
end

-- Frames out, one at a time, in pieces, and never after settling. held:
-- in-flight bytes to release once the frame is out (or dropped).
function Run:_send(w, held)
  self:_hold(w:len())
  self.wq_tail = self.wq_tail + 1
  self.wq[self.wq_tail] = { w = w, held = (held or 0) + w:len() }
  if self.writing then return end
  self.writing = true
  async.run(function()
    while self.wq_head <= self.wq_tail do
      local item = self.wq[self.wq_head]
      self.wq[self.wq_head] = nil
      self.wq_head = self.wq_head + 1
      local more = not self.settled
      while more and not self.settled do
        local piece
        piece, more = item.w:emit()
        local ok, err = self.h.stdin:write(piece)
        if not ok and not self.settled then
          -- a start that failed shows first here (the group never got a pid)
          local what = self.h.pid < 0 and " spawn failed: " or " bridge write failed: "
          self:_fail("worker-exit", self.label .. what .. message_of(err))
        end
      end
      item.w:close()
      self:_release(item.held)
    end
    self.wq, self.wq_head, self.wq_tail = {}, 1, 0
    self.writing = false
  end)
end

function Run:_pump()
  local h, reader = self.h, self.reader
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
      local ok, derr = reader:push(chunk)
      while ok and not self.settled do
        local m
        m, derr = reader:next()
        if m == nil then break end
        if m then self:_message(m) end
        self:_pace(reader.work)
        reader.work = 0
        -- bound what the calls being served hold: read on once replies went out
        while self.inflight > self.cfg.maxFrameBytes and not self.settled do
          self.space = self.space or async.future()
          async.race { self.space, self.gate }
        end
      end
      if derr and not self.settled then
        self.decoder_failed = true
        self:_bridge_failed(derr)
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

-- A log in pieces: the pieces are kept and joined once the last arrives (or
-- once they are longer than the ledger's bound, which they can never fit).
function Run:_log_piece(text, more)
  local p = self.pending
  if not p then
    if not more then return self:_log(text) end
    p = { n = 0, bytes = 0 }
    self.pending = p
  end
  p.n, p.bytes = p.n + 1, p.bytes + #text
  p[p.n] = text
  if more and p.bytes <= self.cfg.maxOutputBytes then return end
  self.pending = nil
  self:_pace(p.bytes)
  self:_log(table.concat(p, "", 1, p.n)) -- a log already longer than the ledger's bound cannot fit: limit now
end

-- Frames in ---------------------------------------------------------------------------

function Run:_message(m)
  if m == frames.IGNORED then return end
  local t = m.type
  if t == "log" then
    if type(m.text) == "string" then self:_log_piece(m.text, m.more == true) end
  elseif t == "call" then
    if safe_id(m.id) and type(m.global) == "string" and type(m.name) == "string"
      and m.args ~= nil and m.args ~= frames.NOT_ARRAY and not self.served[m.id] then
      self.served[m.id] = OPEN
      m.bytes = m.bytes + CALL_COST -- a call costs its task and records, however small
      self:_hold(m.bytes)
      async.run(Run._serve_guarded, self, m)
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
  local v = m.value
  if v == frames.NOT_ARRAY or v == frames.BAD then
    return self:_fail("invalid-output", "program completion must be lossless JSON")
  end
  if not self.ledger:add_value(wire.json_cost(v, ledger.string_cost)) then return self:_limit() end
  self:settle(nil, v, true)
end

-- Bindings ------------------------------------------------------------------------------

-- A reply frame: {"type":"reply","id":<id>,"ok":false,"message":<message>}.
function Run:_reply_error(id, message, held)
  self.served[id] = ANSWERED
  if self.settled then return self:_release(held) end
  local w = self:_writer()
  local ok, err = w:raw('{"type":"reply","id":' .. json.number(id) .. ',"ok":false,"message":')
  if ok then ok, err = w:text(message) end
  if ok then ok, err = w:raw("}") end
  if not ok then
    w:close()
    self:_release(held)
    return self:_bridge_failed(err)
  end
  self:_send(w, held)
end

-- fn(args...), the arguments then the binding's alone (not kept for the reply).
local function call_with(fn, m)
  local args = m.args
  m.args = nil
  return pack(pcall(fn, unpack(args, 1, #args)))
end

-- A call is always answered: should serving it raise (a bug), the program
-- gets that as the call's failure rather than waiting until maxWallMs.
function Run:_serve_guarded(m)
  local ok, err = pcall(Run._serve, self, m)
  if not ok and self.served[m.id] == OPEN then
    self:_reply_error(m.id, "the host failed to serve the call: " .. failure_text(err), m.bytes)
  end
end

function Run:_serve(m)
  local held = m.bytes
  local b = self.by_global[m.global]
  local fn = b and rawget(b.functions, m.name)
  if not fn then
    return self:_reply_error(m.id, string.format('unknown binding "%s.%s"', m.global, m.name), held)
  end
  if type(m.args) ~= "table" or getmetatable(m.args) ~= wire.array_mt then
    return self:_reply_error(m.id, "binding arguments must be lossless JSON", held)
  end
  local res = call_with(fn, m)
  if self.settled then return self:_release(held) end
  if not res[1] then return self:_reply_error(m.id, failure_text(res[2]), held) end
  if res[2] == nil and res[3] ~= nil then return self:_reply_error(m.id, failure_text(res[3]), held) end
  local w = self:_writer()
  local ok, err = w:raw('{"type":"reply","id":' .. json.number(m.id) .. ',"ok":true,"value":')
  if ok then ok, err = wire.encode_into(res[2], w) end
  if ok then ok, err = w:raw("}") end
  if not ok then
    w:close()
    if type(err) == "table" then -- the frame bound
      self:_release(held)
      return self:_bridge_failed(err)
    end
    return self:_reply_error(m.id, "binding resolution must be lossless JSON", held)
  end
  self.served[m.id] = ANSWERED
  if self.settled then
    w:close()
    return self:_release(held)
  end
  self:_send(w, held)
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
    elseif self.reader then
      -- a partial frame left at the end (a failure already reported is not repeated)
      local ok, ferr = self.reader:finish()
      if not ok and not self.decoder_failed then failure = ferr.message end
      self.reader:close()
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
