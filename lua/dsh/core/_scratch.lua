--- dsh.core._scratch: the output buffers of the codec bindings, reused.
--
-- A codec writes its result into a buffer and copies it out (ffi.string)
-- before it returns, so one buffer per codec serves every call; a result
-- larger than KEEP gets a buffer of its own, freed with it, so that one
-- large call does not pin its size for the life of the process.
local F = require "dsh.core._ffi"
local ffi = F.ffi

local M = {}

M.KEEP = 1024 * 1024

--- A buffer source: buffer(n) → a uint8_t[?] of at least n bytes (the
--- reused one, grown to at least min_size, or a fresh one over KEEP).
---@param min_size integer
---@return fun(n:integer):ffi.cdata*
function M.new(min_size)
  local scratch, scratch_len = nil, 0
  return function(n)
    if n > M.KEEP then return ffi.new("uint8_t[?]", n) end
    if n > scratch_len then
      scratch_len = math.max(n, min_size)
      scratch = ffi.new("uint8_t[?]", scratch_len)
    end
    return scratch
  end
end

return M
