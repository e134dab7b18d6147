--- dsh.envd.files: GET and POST /files of the envd client.
--
-- Downloads are streamed (open_file yields chunks as they arrive); uploads of
-- readers, and of strings above STREAM_THRESHOLD bytes, are sent as a
-- streamed body in slices, so no whole-file copy is made on the way out.
-- Transfers have no deadline (a file may be large) but a stall limit: the
-- client's files_stall_timeout_ms, or opts.stall_timeout_ms (0 = none); and
-- while one runs the daemon is probed now and then, so a daemon that stops
-- answering (or answers a byte a second) ends it with SANDBOX_UNRESPONSIVE
-- (dsh.envd._watch's "transfer" calls).
local errors = require "dsh.errors"
local json = require "dsh.json"
local wire = require "dsh.envd._errors"

local M = {}

M.STREAM_THRESHOLD = 4 * 1024 * 1024
M.SLICE = 1024 * 1024

local function urlencode(s)
  return (s:gsub("[^%w%-%._~/]", function(c) return string.format("%%%02X", c:byte()) end))
end
M.urlencode = urlencode

local function query(self, path, opts)
  local q = "?path=" .. urlencode(path)
  local user = opts and opts.user or self.user
  if user then q = q .. "&username=" .. urlencode(user) end
  return q
end

local function files_error(res, body)
  return wire.answer_error(res.status, body or res:body())
end

---@class dsh.EnvdFileReader
local Reader = {}
Reader.__index = Reader
Reader.__tostring = function(r) return "dsh.envd.file_reader(" .. r.path .. ")" end

--- Next chunk of the file, nil at the end, nil, err on failure.
function Reader:read()
  local chunk, err = self._res:read()
  if chunk then
    self._watch.moved = self._watch.moved + #chunk
    return chunk
  end
  self._watch:close(self._call)
  if err then return nil, wire.transport_error(err) end
  return nil
end

function Reader:close()
  self._watch:close(self._call)
  self._res:close()
end

local function slices(data)
  local pos = 1
  return function()
    if pos > #data then return nil end
    local s = data:sub(pos, pos + M.SLICE - 1)
    pos = pos + M.SLICE
    return s
  end
end

--- A chunk source from a string, a function or an object with :read().
local function source_of(data)
  if type(data) == "string" then return slices(data) end
  if type(data) == "function" then return data end
  if type(data) == "table" and type(data.read) == "function" then
    return function() return data:read() end
  end
  errors.misuse("dsh.envd", "write_file: data must be a string, a function or a reader, got %s", type(data))
end

function M.mixin(Client)
  --- Open a file for streamed reading: a reader with :read() and .size (from
  -- Content-Length), or nil, err (not_found, invalid_argument for a directory, ...).
  function Client:open_file(path, opts)
    self:_check_open("open_file")
    errors.check("dsh.envd", "open_file: path", path, "string")
    local target = "/files" .. query(self, path, opts)
    local w = self._watch
    local ok, aerr = w:admit("GET " .. target)
    if not ok then return nil, aerr end
    local ro = self:_request_opts("GET", target, nil, nil, opts)
    ro.timeout_ms = 0
    ro.stall_timeout_ms = opts and opts.stall_timeout_ms or self.files_stall_timeout_ms
    local c = w:open(ro, "transfer", "GET " .. target)
    local pok, res, err = pcall(self._http.request, self._http, ro)
    if not pok or not res then
      w:close(c)
      if not pok then error(res, 0) end
      return nil, wire.transport_error(err)
    end
    if res.status ~= 200 then
      local e = files_error(res)
      res:close()
      w:close(c)
      return nil, e
    end
    return setmetatable({ path = path, size = tonumber(res.headers["content-length"]), _res = res, _watch = w,
      _call = c }, Reader)
  end

  --- The whole file as a string, or nil, err.
  function Client:read_file(path, opts)
    local r, err = self:open_file(path, opts)
    if not r then return nil, err end
    local parts = {}
    while true do
      local chunk, rerr = r:read()
      if not chunk then
        r:close()
        if rerr then return nil, rerr end
        break
      end
      parts[#parts + 1] = chunk
    end
    return table.concat(parts)
  end

  --- Write one file (application/octet-stream). data: a string, a function
  -- returning chunks then nil, or an object with :read(). opts: user,
  -- metadata (map -> X-Metadata-*), signal. Returns {path=, name=, type=}.
  -- The upload of write_file on request options ro: status and body, or nil, err.
  local function upload(self, ro, data)
    local res, err
    if type(data) == "string" and #data <= M.STREAM_THRESHOLD then
      ro.body = data
      res, err = self._http:request(ro)
    else
      local next_chunk = source_of(data)
      ro.body_stream = true
      res, err = self._http:request(ro)
      if res then
        while true do
          local chunk, cerr = next_chunk()
          if chunk == nil then
            if cerr then res:close() return nil, errors.new("canceled", "upload source failed: " .. tostring(cerr)) end
            break
          end
          local ok, werr = res:write(chunk)
          if not ok then res:close() return nil, wire.transport_error(werr) end
        end
        local ok, ferr = res:finish()
        if not ok then res:close() return nil, wire.transport_error(ferr) end
      end
    end
    if not res then return nil, wire.transport_error(err) end
    local body, berr = res:body()
    local status = res.status
    res:close()
    if not body then return nil, wire.transport_error(berr) end
    return status, body
  end

  function Client:write_file(path, data, opts)
    self:_check_open("write_file")
    errors.check("dsh.envd", "write_file: path", path, "string")
    local target = "/files" .. query(self, path, opts)
    local w = self._watch
    local ok, aerr = w:admit("POST " .. target)
    if not ok then return nil, aerr end
    local ro = self:_request_opts("POST", target, "application/octet-stream", nil, opts)
    ro.headers["Authorization"] = nil
    ro.timeout_ms = 0
    ro.stall_timeout_ms = opts and opts.stall_timeout_ms or self.files_stall_timeout_ms
    for k, v in pairs(opts and opts.metadata or {}) do ro.headers["X-Metadata-" .. k] = v end
    local c = w:open(ro, "transfer", "POST " .. target)
    local pok, status, body = pcall(upload, self, ro, data)
    w:close(c)
    if not pok then error(status, 0) end
    if not status then return nil, body end
    if status ~= 200 then return nil, wire.answer_error(status, body) end
    local list = json.decode(body)
    if type(list) ~= "table" or type(list[1]) ~= "table" then
      return nil, errors.new("internal", "Expected to receive information about written file")
    end
    return list[1]
  end

  --- Write several files in one multipart request: files = {{path=, data=}, ...}
  -- (data strings). Returns the list of written entries in order.
  function Client:write_files(files, opts)
    self:_check_open("write_files")
    errors.check("dsh.envd", "write_files", files, "table")
    local boundary = "----dsh-" .. string.format("%08x%08x", math.random(0, 0x7fffffff), os.time())
    local parts = {}
    for i, f in ipairs(files) do
      errors.check("dsh.envd", "write_files: path #" .. i, f.path, "string")
      errors.check("dsh.envd", "write_files: data #" .. i, f.data, "string")
      local name = f.path:gsub('"', "%%22"):gsub("\r", "%%0D"):gsub("\n", "%%0A")
      parts[#parts + 1] = "--" .. boundary .. "\r\nContent-Disposition: form-data; name=\"file\"; filename=\""
        .. name .. "\"\r\nContent-Type: application/octet-stream\r\n\r\n" .. f.data .. "\r\n"
    end
    parts[#parts + 1] = "--" .. boundary .. "--\r\n"
    local q = ""
    local user = opts and opts.user or self.user
    if user then q = "?username=" .. urlencode(user) end
    local w = self._watch
    local ok, aerr = w:admit("POST /files" .. q)
    if not ok then return nil, aerr end
    local ro = self:_request_opts("POST", "/files" .. q, "multipart/form-data; boundary=" .. boundary,
      table.concat(parts), opts)
    ro.headers["Authorization"] = nil
    ro.timeout_ms = 0
    ro.stall_timeout_ms = opts and opts.stall_timeout_ms or self.files_stall_timeout_ms
    local c = w:open(ro, "transfer", "POST /files" .. q)
    local pok, res, err = pcall(self._http.fetch, self._http, ro)
    w:close(c)
    if not pok then error(res, 0) end
    if not res then return nil, wire.transport_error(err) end
    if res.status ~= 200 then return nil, wire.answer_error(res.status, res.body) end
    local list = json.decode(res.body)
    if type(list) ~= "table" then
      return nil, errors.new("internal", "Expected to receive information about written files")
    end
    return list
  end
end

return M
