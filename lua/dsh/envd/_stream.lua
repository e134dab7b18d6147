--- dsh.envd._stream: a server stream of dsh.envd (private).
--
-- Owns: one Connect server stream on an open dsh.core.http response, and the one
-- decoding of a process's data events. Bytes go from the response's buffer
-- into the core's event reader (dsh.core.envd_events) without a Lua string, and
-- come out as decoded JSON messages or data events: a data event the core
-- recognised arrives decoded, one written in another form (an escape in its
-- base64, an unknown member) is decoded here from its JSON, and both come
-- out alike: {__data=true, stream=, data=, offset=}. Created by dsh.envd's Client:stream through
-- M.open; it is a call of the client's watch (dsh.envd._watch) until it ends
-- or is closed: prompt until its first message, standing after, ending once
-- expect_end() says the caller waits. While open it counts as activity (the
-- client's stream_hooks: hold at the open, release at the end). Never
-- makes a request of its own and requires nothing of its client.
local base64 = require "dsh.core.base64"
local errors = require "dsh.errors"
local json = require "dsh.json"
local wire = require "dsh.envd._errors"

local M = {}
local transport_error = wire.transport_error

-- A data event: {__data = true, stream = "stdout"|"stderr"|"pty", data = bytes,
-- offset = the stream's byte offset, or nil when the event carried none}.
local function data_event(stream, bytes, offset)
  return { __data = true, stream = stream, data = bytes, offset = offset }
end

local STREAMS = { "stdout", "stderr", "pty" }

-- A data event the core did not recognise, from its JSON (d: event.data):
-- the event, or nil and why it is malformed.
local function data_from_json(d)
  local offset = tonumber(d.offset)
  for _, name in ipairs(STREAMS) do
    local b64 = d[name]
    if b64 ~= nil then
      if type(b64) ~= "string" then return nil, "data event with a non-string " .. name end
      local bytes, err = base64.decode_loose(b64)
      if not bytes then return nil, "data event with invalid base64: " .. tostring(err.message) end
      return data_event(name, bytes, offset)
    end
  end
  return data_event("stdout", "", offset)
end

---@class dsh.EnvdStream
---@field path string
local Stream = {}
Stream.__index = Stream
Stream.__tostring = function(s)
  return "dsh.envd.stream(" .. s.path .. (s._closed and ", closed" or "") .. ")"
end

--- A stream reading res (a 200 answer of content type
-- application/connect+json) through reader (a dsh.core.envd_events reader, which
-- it keeps). activity: the client's stream_hooks ({hold=fn, release=fn}) or nil.
---@return dsh.EnvdStream
function M.open(path, res, reader, watch, call, activity)
  if activity then activity.hold() end
  return setmetatable({ path = path, _res = res, _reader = reader, _watch = watch, _call = call,
    _activity = activity }, Stream)
end

-- The stream ended (cleanly or not) or was closed: the call is over.
function Stream:_over()
  self._watch:close(self._call)
  local activity = self._activity
  if activity then
    self._activity = nil
    activity.release()
  end
end

--- The caller waits for the stream to end, within_ms at most: the daemon
-- must end it by then (and dsh.envd.DEADLINE_GRACE_MS more), else the host
-- does, with SANDBOX_UNRESPONSIVE; meanwhile the daemon is probed.
---@param within_ms number
function Stream:expect_end(within_ms)
  if self._done or self._failed or self._closed then return end
  self._watch:ending(self._call, within_ms)
end

--- The next message: a decoded JSON table, or for a process's data event
-- {__data=true, stream=, data=, offset=} (decoded in C, see
-- core/include/dsh/envd_events.h, or from its JSON here; a large event comes
-- in several pieces).
-- nil when the stream ended cleanly, or nil, err (the stream's own error
-- from its end message, or a transport or protocol failure).
function Stream:next()
  local reader = self._reader
  while true do
    if self._failed then
      self:_over()
      return nil, self._failed
    end
    if self._done then
      self:_over()
      return nil
    end
    local kind, a, b, c = reader:next()
    if kind == "data" then
      local w = self._watch
      w.moved = w.moved + #b
      if self._call.mode == "prompt" then w:answered(self._call) end
      return data_event(a, b, c)
    elseif kind == "message" then
      local w = self._watch
      w.moved = w.moved + #a
      local msg = json.decode(a)
      local ev = type(msg) == "table" and msg.event
      if type(msg) ~= "table" then
        self._failed = errors.new("internal", "envd stream message is not a JSON object")
      elseif type(ev) == "table" and type(ev.data) == "table" then
        local d, derr = data_from_json(ev.data)
        if d then
          if self._call.mode == "prompt" then w:answered(self._call) end
          return d
        end
        self._failed = errors.new("internal", derr)
      else
        if self._call.mode == "prompt" then w:answered(self._call) end
        return msg
      end
    elseif kind == "end" then
      self:_finish_with(a)
      self:_read_to_eof()
    elseif a then
      self._failed = errors.new("internal", "envd stream protocol error: " .. a.message)
    else
      local got, err = self._res:read_with(reader.sink)
      if not got then
        if err then
          self._failed = transport_error(err)
        elseif not reader:finish() then
          self._failed = errors.new("invalid_argument", "protocol error: incomplete envelope")
        else
          self._failed = errors.new("unknown", "missing EndStreamResponse")
        end
      end
    end
  end
end

local function discard() end

-- The end message is the last one: the server ends the body right after it.
-- Read to that end so the transfer completes and its connection goes back to
-- the client's cache (closing a response mid-body makes libcurl drop the
-- connection, and every later stream would pay for a new one). Bytes after
-- the end message are ignored, and a body that does not end right after it
-- is given up on (the watch's grace).
function Stream:_read_to_eof()
  local res = self._res
  if not res:info().done then self._watch:ending(self._call, 0) end
  while res:read_with(discard) do end
end

function Stream:_finish_with(payload)
  local endmsg = json.decode(payload)
  if type(endmsg) ~= "table" then
    self._failed = errors.new("internal", "envd stream ended with a malformed end message")
  elseif type(endmsg.error) == "table" then
    local e = endmsg.error
    self._failed = errors.new(type(e.code) == "string" and e.code or "unknown",
      type(e.message) == "string" and e.message or "stream failed")
  elseif endmsg.error ~= nil and endmsg.error ~= json.null then
    self._failed = errors.new("internal", "envd stream ended with a malformed error")
  else
    self._done = true
  end
end

--- Stop reading and drop the connection (the server sees the client go away).
function Stream:close()
  if self._closed then return end
  self._closed = true
  self:_over()
  self._res:close() -- the reader goes with the stream (ffi.gc): events it holds stay readable
end

M.Stream = Stream
return M
