--- dsh.json: the one JSON codec of the host — one configured lua-cjson
-- instance for every layer (the envd client, the LSP engine, E2B frames, the
-- control plane, the host's records).
--
-- Owns: the cjson configuration, the JSON null (M.null), the mark that keeps
-- an empty table an array (M.array), and decode's failure shape. Never does
-- I/O and never raises on bad text: decode returns the value, or nil and an
-- error (code JSON, the parser's message). Integers are exact up to 10^14
-- (lua-cjson's precision limit), which covers every protocol field dsh writes
-- (pids, offsets, sizes). Code Mode's lossless JSON, which runs in the
-- sandbox too, is dsh.code_runtime's own (its wire, not a host codec).
local cjson = require "cjson"
local errors = require "dsh.errors"

local M = {}

local codec = cjson.new()
codec.encode_sparse_array(true) -- {[3]=x} becomes an array padded with nulls, never an error
codec.encode_number_precision(14)
codec.decode_max_depth(1000)

M.null = codec.null

-- lua-cjson (2.1.0) has no empty-array value: a table marked with M.array
-- encodes as [] even when empty (an unmarked empty table is {}).
local ARRAY_MT = { __name = "json array" }
local EMPTY = "\0dsh-empty-array\0"
local EMPTY_PATTERN = ('"\\u0000dsh-empty-array\\u0000"'):gsub("%p", "%%%0") -- its JSON text, as a pattern

--- Mark t as a JSON array (so an empty one encodes as []). Returns t.
function M.array(t)
  return setmetatable(t or {}, ARRAY_MT)
end

local function mark_empty(v, depth)
  if type(v) ~= "table" or depth > 64 then return v, false end
  if getmetatable(v) == ARRAY_MT and next(v) == nil then return EMPTY, true end
  local changed, out = false, nil
  for k, x in pairs(v) do
    local y, c = mark_empty(x, depth + 1)
    if c then
      out = out or {}
      out[k] = y
      changed = true
    end
  end
  if not changed then return v, false end
  local copy = {}
  for k, x in pairs(v) do copy[k] = out[k] == nil and x or out[k] end
  return copy, true
end

--- Encode a Lua value (tables marked with M.array stay arrays); raises on
-- values JSON cannot express (functions, NaN).
function M.encode(v)
  local marked, changed = mark_empty(v, 0)
  local s = codec.encode(marked)
  if changed then s = s:gsub(EMPTY_PATTERN, "[]") end
  return s
end

--- Decode text; returns the value, or nil, err (code JSON, the parser's message).
---@param s string
---@return any|nil, dsh.Error?
function M.decode(s)
  if type(s) ~= "string" then return nil, errors.new("JSON", "expected a JSON string, got " .. type(s)) end
  local ok, v = pcall(codec.decode, s)
  if ok then return v end
  return nil, errors.new("JSON", tostring(v))
end

return M
