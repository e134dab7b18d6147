--- dsh.lsp._reader: the host side of the source reader (remote/lsp/source-reader.lua).
--
-- The reader is one resident LuaJIT process per provider, started through
-- the provider's ctx.subprocess (so it runs where the language servers run:
-- in the sandbox for lsp-e2b, on the host for lsp-local) on first use and
-- again after it died. Requests carry ids, so queries on different
-- workspaces share it concurrently. Every response is checked here again:
-- its shape ("reader returned an invalid response"), the byte count
-- ("reader returned invalid bounded bytes"); UTF-8 is the caller's check.
-- Failures are LSP_READER_FAILED with a message the caller prefixes with
-- `source "<f>" `.
-- Tokens name content the reader sent before; they are scoped to one reader
-- process (a generation), so a restarted reader never answers "same" for
-- content it did not send.
local async = require "dsh.async"
local errors = require "dsh.errors"
local lspframe = require "dsh.core.lspframe"

local M = {}

local HEADER_BYTES = 4096
local STDERR_BYTES = 65536

local function program_text(file)
  local src = debug.getinfo(1, "S").source:match("^@(.*)$") or ""
  local dir = src:match("^(.*)/[^/]*$") or "."
  -- installed beside this module; in a source tree under remote/lsp
  for _, p in ipairs { dir .. "/" .. file, dir .. "/../../../remote/lsp/" .. file } do
    local f = io.open(p, "rb")
    if f then
      local text = f:read("*a")
      f:close()
      return text
    end
  end
  return nil
end

local PROGRAMS = {}

--- The text of a program of remote/lsp (default the source reader's;
--- raises if it is missing from the installation).
function M.program(file)
  file = file or "source-reader.lua"
  PROGRAMS[file] = PROGRAMS[file] or program_text(file)
  if not PROGRAMS[file] then error("dsh.lsp: the program " .. file .. " is not installed", 2) end
  return PROGRAMS[file]
end

---@class dsh.lsp.Reader
local Reader = {}
Reader.__index = Reader
Reader.__tostring = function(r)
  return string.format("dsh.lsp.reader(%s, generation %d%s)", r._name, r._gen, r._closed and ", closed" or "")
end

---@class dsh.lsp.ReaderOpts
---@field name string               message prefix (the provider's name)
---@field subprocess table          ctx.subprocess of the provider
---@field luajit string             the interpreter, as the subprocess world names it
---@field cwd string|nil
---@field maxBytes integer          the largest document any request will ask for
---@field graceMs integer
---@field program string|nil        the program's text (default: M.program(); specs use others)

---@param o dsh.lsp.ReaderOpts
---@return dsh.lsp.Reader
function M.new(o)
  return setmetatable({ _name = o.name, _o = o, _gen = 0, _next = 1 }, Reader)
end

-- Failures read as the end of a sentence about a source: callers prefix
-- `source "<f>" ` (the reference's wording).
local function invalid(_, what)
  return errors.new("LSP_READER_FAILED", "reader " .. what)
end

-- The running reader process, started if needed.
function Reader:_proc()
  local p = self._p
  if p and not p.failed then return p end
  if self._closed then return nil, errors.new("LSP_DISPOSED", self._name .. " provider is disposed") end
  local h, err = self._o.subprocess:spawn {
    argv = { self._o.luajit, "-e", self._o.program or M.program() }, cwd = self._o.cwd, graceMs = self._o.graceMs,
    stdio = { stdin = "pipe", stdout = "pipe", stderr = { maxBytes = STDERR_BYTES } },
  }
  if not h then return nil, err end
  self._gen = self._gen + 1
  p = { h = h, gen = self._gen, pending = {}, decoder = lspframe.decoder(self._o.maxBytes + HEADER_BYTES) }
  self._p = p
  p.pump = async.run(Reader._pump, self, p)
  return p
end

function Reader._fail(_, p, err)
  if p.failed then return end
  p.failed = err
  for _, f in pairs(p.pending) do
    if f then f:resolve(nil, err) end
  end
  p.pending = {}
  p.decoder:close()
  p.h:terminate()
  p.h.stdout:close() -- nobody reads on: never hold the process's end back
end

-- Wait until the process ended (done resolves nil, err when its start
-- failed or it was lost: ended all the same).
local function ended(h)
  h.done:await()
end

local function stderr_tail(h)
  local t = h.stderr and h.stderr:readFrom(0).text or ""
  t = t:gsub("%s+$", "")
  return t ~= "" and (": " .. t:sub(-500)) or ""
end

function Reader:_pump(p)
  while not p.failed do
    local chunk, rerr = p.h.stdout:read()
    if p.failed then return end
    if not chunk then
      if rerr then return self:_fail(p, invalid(self, "failed: " .. tostring(rerr.message or rerr))) end
      ended(p.h)
      return self:_fail(p, invalid(self, "exited" .. stderr_tail(p.h)))
    end
    local bodies, ferr, before = p.decoder:push(chunk)
    for _, body in ipairs(bodies or before) do
      local id, rest = body:match("^(%d+) (.*)$")
      local f = id and p.pending[tonumber(id)]
      if f == nil then return self:_fail(p, invalid(self, "returned an invalid response")) end
      p.pending[tonumber(id)] = nil
      if f then f:resolve(rest) end -- false: its caller gave up waiting
    end
    if not bodies then
      return self:_fail(p, invalid(self, "returned an invalid response (" .. ferr.message .. ")"))
    end
  end
end

-- Round trips written at once (one write: one transfer to the reader):
-- reqs = {{op, args, payload}, ...} → the response bodies after "<id> " in
-- order, and the reader's generation; or nil, err. A reader that died before
-- answering is restarted once.
function Reader:_calls(reqs, signal)
  for attempt = 1, 2 do
    if signal and signal.aborted then return nil, async.abort_error(signal.reason) end
    local p, err = self:_proc()
    if not p then return nil, err end
    local frames, ids, futures = {}, {}, {}
    for i, r in ipairs(reqs) do
      local id = self._next
      self._next = id + 1
      ids[i], futures[i] = id, async.future()
      p.pending[id] = futures[i]
      frames[i] = lspframe.encode(r[1] .. " " .. id .. r[2] .. "\n" .. r[3])
    end
    local ok, werr = p.h.stdin:write(table.concat(frames))
    if not ok then self:_fail(p, invalid(self, "input failed: " .. tostring(werr and werr.message))) end
    local out, rerr = {}, nil
    for i, f in ipairs(futures) do
      local res, e
      if signal then
        res, e = async.race_signal(f, signal)
        if not f:done() then
          for j = i, #ids do
            if p.pending[ids[j]] then p.pending[ids[j]] = false end
          end
          return nil, e
        end
      else
        res, e = f:await()
      end
      if not res then
        rerr = e
        break
      end
      out[i] = res
    end
    if not rerr then return out, p.gen end
    if attempt == 2 or rerr.code ~= "LSP_READER_FAILED" or not p.failed then return nil, rerr end
  end
end

---@class dsh.lsp.Resolved
---@field kind "dir"|"file"|"other"|"error"
---@field path string|nil     canonical path
---@field message string|nil  why it did not resolve

local function resolve_request(paths)
  return { "resolve", "", table.concat(paths, "\0") .. "\0" }
end

function Reader:_resolved(res, n)
  local body = res:match("^resolved\n(.*)$")
  if not body then return nil, invalid(self, "returned an invalid response") end
  local out = {}
  for kind, value in body:gmatch("([^%z]*)%z([^%z]*)%z") do
    if kind == "error" then
      out[#out + 1] = { kind = kind, message = value }
    elseif (kind == "dir" or kind == "file" or kind == "other") and value:sub(1, 1) == "/" then
      out[#out + 1] = { kind = kind, path = value }
    else
      return nil, invalid(self, "returned an invalid response")
    end
  end
  if #out ~= n then return nil, invalid(self, "returned an invalid response") end
  return out
end

--- realpath(3) of each path (all must exist), with the type found there.
---@param paths string[]
---@param signal dsh.AbortSignal|nil
---@return dsh.lsp.Resolved[]|nil, dsh.Error|nil
function Reader:resolve(paths, signal)
  local res, err = self:_calls({ resolve_request(paths) }, signal)
  if not res then return nil, err end
  return self:_resolved(res[1], #paths)
end

---@class dsh.lsp.Read
---@field kind "ok"|"same"|"not-file"|"oversize"|"grew"|"open-error"
---@field text string|nil     ok: the bytes (not yet checked for UTF-8)
---@field token string|nil    ok, same: names this content for a later `have`
---@field size integer|nil    oversize
---@field message string|nil  open-error

function Reader:_want(have)
  if have then
    local g, t = have:match("^(%d+):(%d+)$")
    if self._p and tonumber(g) == self._p.gen and not self._p.failed then return t end
  end
  return "-"
end

--- Read path (canonical) of at most max bytes; have: a token from an earlier
--- read of the same path, answered "same" if the content still equals it.
---@param path string
---@param max integer
---@param have string|nil
---@param signal dsh.AbortSignal|nil
---@return dsh.lsp.Read|nil, dsh.Error|nil
function Reader:read(path, max, have, signal)
  local want = self:_want(have)
  local res, gen = self:_calls({ { "read", " " .. max .. " " .. want, path } }, signal)
  if not res then return nil, gen end
  return self:_read_result(res[1], gen, max, want)
end

--- Several reads in one round trip: list = {{path, max, have}, ...} → a
--- dsh.lsp.Read (or an error table {err=}) per entry, or nil, err when the
--- reader itself failed.
function Reader:read_many(list, signal)
  if #list == 0 then return {} end
  local reqs, wants = {}, {}
  for i, r in ipairs(list) do
    wants[i] = self:_want(r[3])
    reqs[i] = { "read", " " .. r[2] .. " " .. wants[i], r[1] }
  end
  local res, gen = self:_calls(reqs, signal)
  if not res then return nil, gen end
  local out = {}
  for i, body in ipairs(res) do
    local rd, err = self:_read_result(body, gen, list[i][2], wants[i])
    if not rd then return nil, err end
    out[i] = rd
  end
  return out
end

--- The nearest directory from start up to stop (canonical paths, start
--- inside stop) holding an entry named one of names, or false; nil, err.
function Reader:find(stop, start, names, signal)
  local payload = stop .. "\0" .. start .. "\0" .. table.concat(names, "\0") .. "\0"
  local res, err = self:_calls({ { "find", "", payload } }, signal)
  if not res then return nil, err end
  if res[1] == "none\n" then return false end
  local dir = res[1]:match("^found\n(/.*)$")
  if not dir then return nil, invalid(self, "returned an invalid response") end
  return dir
end

--- resolve(paths) and reads (as read_many takes them) in one round trip:
--- the resolution and the list of reads, or nil, err. The reads do not
--- depend on the resolution (the caller compares them).
function Reader:check(paths, list, signal)
  local reqs, wants = { resolve_request(paths) }, {}
  for i, r in ipairs(list) do
    wants[i] = self:_want(r[3])
    reqs[i + 1] = { "read", " " .. r[2] .. " " .. wants[i], r[1] }
  end
  local res, gen = self:_calls(reqs, signal)
  if not res then return nil, gen end
  local resolved, err = self:_resolved(res[1], #paths)
  if not resolved then return nil, err end
  local out = {}
  for i = 1, #list do
    local rd, rerr = self:_read_result(res[i + 1], gen, list[i][2], wants[i])
    if not rd then return nil, rerr end
    out[i] = rd
  end
  return resolved, out
end

function Reader:_read_result(res, gen, max, want)
  local function tok(t) return gen .. ":" .. t end
  local t, size, data = res:match("^ok (%d+) (%d+)\n(.*)$")
  if t then
    if #data ~= tonumber(size) or #data > max then return nil, invalid(self, "returned invalid bounded bytes") end
    return { kind = "ok", text = data, token = tok(t) }
  end
  t = res:match("^same (%d+)\n$")
  if t then
    if t ~= want then return nil, invalid(self, "returned an invalid response") end
    return { kind = "same", token = tok(t) }
  end
  if res == "not-file\n" then return { kind = "not-file" } end
  if res == "grew\n" then return { kind = "grew" } end
  size = res:match("^oversize (%d+)\n$")
  if size then return { kind = "oversize", size = tonumber(size) } end
  local msg = res:match("^open%-error\n(.*)$")
  if msg then return { kind = "open-error", message = msg } end
  return nil, invalid(self, "returned an invalid response")
end

--- Stop the reader process and wait until it is gone (idempotent).
function Reader:close()
  self._closed = true
  local p = self._p
  if not p then return true end
  self:_fail(p, errors.new("LSP_DISPOSED", self._name .. " provider is disposed"))
  p.h.stdin:close()
  ended(p.h)
  p.h:waitForExit()
  return true
end

return M
