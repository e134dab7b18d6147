--- E2B's REST control plane, as the cloud backend of ctx.e2b speaks it.
--
-- One call is one request with X-API-KEY, answered by a status the contract
-- lists (spec/fixtures/e2b-api/contract.mjs holds the contract as the
-- stand-in enforces it). What this module does with the statuses every call
-- shares:
--   429, 502, 503, 504  retried, at most RETRY.attempts times in all, after a
--                       full-jitter exponential backoff (RETRY.base_ms doubling,
--                       at most RETRY.max_ms), or after the Retry-After E2B
--                       sent (at most RETRY.max_retry_after_ms; a longer one
--                       ends the retries); then an error naming the status
--   401, 403            an error saying the API key was refused
-- Everything else is the caller's: call() returns {status=, data=, headers=}
-- for it. A transport failure (no answer) is not retried: the request may
-- have been served. Errors use the envd vocabulary the backends share:
-- unauthenticated, permission_denied, resource_exhausted, unavailable,
-- invalid_argument, not_found, failed_precondition, internal.
local async = require "dsh.async"
local errors = require "dsh.errors"
local http = require "dsh.core.http"
local json = require "dsh.json"
local loop = require "dsh.core.loop"
local sys = require "dsh.core.sysutil"

local M = {}

M.TIMEOUT_MS = 60000
M.RETRY = { attempts = 5, base_ms = 250, max_ms = 4000, max_retry_after_ms = 10000 }
M.RETRIED = { [429] = true, [502] = true, [503] = true, [504] = true }

-- The largest timeout the contract's int32 seconds can carry.
M.MAX_TIMEOUT_S = 2 ^ 31 - 1

local REASON = { [400] = "Bad Request", [401] = "Unauthorized", [403] = "Forbidden", [404] = "Not Found",
  [409] = "Conflict", [429] = "Too Many Requests", [500] = "Internal Server Error", [502] = "Bad Gateway",
  [503] = "Service Unavailable", [504] = "Gateway Timeout" }

local Api = {}
Api.__index = Api
Api.__tostring = function(a) return "dsh.e2b.cloud_api(" .. a.base .. (a._closed and ", closed" or "") .. ")" end

--- A client of the control plane of cfg (apiKey, apiUrl or domain).
function M.new(cfg)
  return setmetatable({
    base = (cfg.apiUrl or ("https://api." .. cfg.domain)):gsub("/+$", ""),
    _key = cfg.apiKey,
    _http = http.client(),
  }, Api)
end

--- Whole seconds for a timeout in ms, as the SDK rounds (up, at least 1).
function M.seconds(ms)
  return math.max(1, math.floor((ms + 999) / 1000))
end

--- "503 Service Unavailable".
function M.status_text(status)
  return tostring(status) .. (REASON[status] and (" " .. REASON[status]) or "")
end

-- E2B's error body says {code, message}; anything else is shown as it came.
local function message_of(res)
  local decoded = json.decode(res.body or "")
  if type(decoded) == "table" and type(decoded.message) == "string" then return decoded.message end
  local text = res.body or ""
  if #text > 200 then text = text:sub(1, 200) .. "..." end
  return text
end
M.message_of = message_of

--- The error an answer of `what` stands for (a status call() did not handle).
function M.error(what, res, extra)
  local code = ({ [400] = "invalid_argument", [401] = "unauthenticated", [403] = "permission_denied",
    [404] = "not_found", [409] = "failed_precondition", [429] = "resource_exhausted",
    [502] = "unavailable", [503] = "unavailable", [504] = "unavailable" })[res.status] or "internal"
  return errors.new(code, string.format("E2B API %s failed (%s): %s", what, M.status_text(res.status),
    message_of(res)), extra)
end

-- A random number in [0, n): the kernel's, so that many hosts retrying at
-- once do not all wait alike.
local function jitter(n)
  if n < 1 then return 0 end
  local b = sys.random_bytes(4)
  local v = ((b:byte(1) * 256 + b:byte(2)) * 256 + b:byte(3)) * 256 + b:byte(4)
  return v % n
end

--- The wait before attempt n+1: full jitter over base_ms * 2^(n-1), at most max_ms.
function M.backoff_ms(n)
  return jitter(math.floor(math.min(M.RETRY.max_ms, M.RETRY.base_ms * 2 ^ (n - 1))) + 1)
end

-- How long to wait before attempt n+1 after answer res; nil: do not retry.
local function backoff(res, n)
  local ra = res.headers and res.headers["retry-after"]
  if ra and ra:match("^%s*%d+%s*$") then
    local ms = tonumber(ra) * 1000
    if ms > M.RETRY.max_retry_after_ms then return nil, ms end
    return ms
  end
  return M.backoff_ms(n)
end

--- One call: {status=, data=<decoded JSON or nil>, headers=, attempts=} or
-- nil, err. what names the operation in messages ("create", "connect", ...).
-- opts: query (a string), signal.
function Api:call(what, method, path, body, opts)
  if self._closed then error("dsh.providers.e2b: " .. what .. ": the E2B API client is closed", 2) end
  opts = opts or {}
  local url = self.base .. path .. (opts.query and opts.query ~= "" and ("?" .. opts.query) or "")
  local tries = {}
  local res
  for n = 1, M.RETRY.attempts do
    local err
    res, err = self._http:fetch {
      method = method, url = url, timeout_ms = M.TIMEOUT_MS, signal = opts.signal,
      headers = { ["X-API-KEY"] = self._key, ["Content-Type"] = body and "application/json" or nil,
        ["Accept"] = "application/json", ["User-Agent"] = "dsh/0.1" },
      body = body and json.encode(body) or nil,
    }
    if not res then
      if err.code == "ABORTED" then return nil, err end
      return nil, errors.new("unavailable", string.format("E2B API %s: %s unreachable: %s", what, self.base,
        tostring(err.message)), { attempts = tries })
    end
    tries[#tries + 1] = { status = res.status }
    if not M.RETRIED[res.status] or n == M.RETRY.attempts then break end
    local wait, asked = backoff(res, n)
    if not wait then
      tries[#tries].retry_after_ms = asked
      break
    end
    tries[#tries].waited_ms = wait
    local started = loop.now_ms()
    local ok, serr = async.sleep(wait, opts.signal)
    if not ok then return nil, serr end
    tries[#tries].waited_ms = math.max(wait, loop.now_ms() - started)
  end
  local status = res.status
  if M.RETRIED[status] then
    local last = tries[#tries]
    local why = last.retry_after_ms
      and string.format("E2B asked to retry after %d s, longer than dsh waits", last.retry_after_ms / 1000)
      or string.format("gave up after %d attempts", #tries)
    local err = M.error(what, res, { attempts = tries, status = status })
    err.message = err.message .. " (" .. why .. ")"
    return nil, err
  end
  if status == 401 or status == 403 then
    return nil, errors.new(status == 401 and "unauthenticated" or "permission_denied", string.format(
      "E2B API %s failed (%s): the API key was refused (check apiKey or E2B_API_KEY): %s", what,
      M.status_text(status), message_of(res)), { attempts = tries, status = status })
  end
  local data
  if res.body and res.body ~= "" then data = json.decode(res.body) end
  return { status = status, data = data, headers = res.headers, body = res.body, attempts = tries }
end

function Api:close()
  if self._closed then return end
  self._closed = true
  self._http:close()
end

return M
