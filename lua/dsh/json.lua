--- dsh.json: one configured lua-cjson instance for the whole project.
--
-- decode() never raises: it returns the value or nil, err. Integers are exact
-- up to 10^14 (lua-cjson's precision limit), which covers every protocol field
-- dsh writes (pids, offsets, sizes).
local cjson = require "cjson"

local M = {}

local codec = cjson.new()
codec.encode_sparse_array(true)   -- {[3]=x} becomes an array padded with nulls, never an error
codec.encode_number_precision(14)
codec.decode_max_depth(1000)

M.null = codec.null

--- Encode a Lua value; raises on values JSON cannot express (functions, NaN).
function M.encode(v)
  return codec.encode(v)
end

--- Decode text; returns the value, or nil and a message.
function M.decode(s)
  if type(s) ~= "string" then return nil, "expected a JSON string, got " .. type(s) end
  local ok, v = pcall(codec.decode, s)
  if ok then return v end
  return nil, tostring(v)
end

return M
