--- dsh.envd._errors: what a failed envd call means, in envd's words (private).
--
-- Owns: the Connect codes of HTTP answers that carry no Connect error body,
-- the error an answer stands for, and the error a transport failure of
-- dsh.core.http stands for. Never makes a request and knows no client: the
-- client (dsh.envd), its streams (dsh.envd._stream) and file transfers
-- (dsh.envd.files) all speak through here.
local errors = require "dsh.errors"
local json = require "dsh.json"

local M = {}

-- Connect codes by HTTP status, for answers that carry no Connect error body.
local status_codes = {
  [400] = "invalid_argument", [401] = "unauthenticated", [403] = "permission_denied",
  [404] = "not_found", [409] = "already_exists", [429] = "resource_exhausted",
  [499] = "canceled", [501] = "unimplemented", [502] = "unavailable", [503] = "unavailable",
  [504] = "deadline_exceeded", [507] = "resource_exhausted",
}

--- The envd error of a dsh.core.http failure: the host's own deadline
--- (SANDBOX_UNRESPONSIVE, from dsh.envd._watch) as it was made, a timeout
--- deadline_exceeded, an abort canceled, anything else unavailable.
function M.transport_error(err)
  if err.code == "SANDBOX_UNRESPONSIVE" then
    return err
  elseif err.code == "HTTP_TIMEOUT" then
    return errors.new("deadline_exceeded", err.message)
  elseif err.code == "HTTP_STALLED" then
    return errors.new("unavailable", "envd unreachable: " .. tostring(err.message), { stall_ms = err.stall_ms })
  elseif err.code == "ABORTED" then
    return errors.new("canceled", err.message, { reason = err.reason })
  end
  return errors.new("unavailable", "envd unreachable: " .. tostring(err.message))
end

--- The error an HTTP answer stands for. rpc: a Connect path (a plain 404 there
-- means the method does not exist: "unimplemented").
function M.answer_error(status, body, rpc)
  local decoded = json.decode(body or "")
  if type(decoded) == "table" then
    local code, message = decoded.code, decoded.message
    if type(code) == "string" and code ~= "" then
      return errors.new(code, type(message) == "string" and message or code, { http_status = status })
    end
    if type(message) == "string" then
      return errors.new(status_codes[status] or "unknown", message, { http_status = status })
    end
  end
  local code = status_codes[status] or "unknown"
  if rpc and status == 404 then code = "unimplemented" end
  local text = (body and #body > 0 and #body < 512) and body:gsub("%s+$", "") or ("HTTP " .. status)
  return errors.new(code, text, { http_status = status })
end

return M
