--- dsh.core.lspframe: LSP base-protocol framing, "Content-Length: N\r\n\r\n" + body
-- (harness-behaviour.md §2.5). Bodies are returned as strings; parsing the
-- JSON is the caller's business. Failures are `nil, err` with err.code
-- "LSP_FRAME", err.message the core's text (e.g. "LSP message has a missing or
-- invalid Content-Length") and err.status the core status name.
local F = require "dsh.core._ffi"
local errors = require "dsh.errors"
local ffi, C = F.ffi, F.C

local M = {}

local body_p = ffi.new("const uint8_t *[1]")
local len_p = ffi.new("size_t[1]")
local head = ffi.new("char[48]")
local head_n = ffi.new("size_t[1]")

---@class dsh.LspFrameDecoder
local Decoder = {}
Decoder.__index = Decoder

local function live(self, fn)
  if getmetatable(self) ~= Decoder then error("dsh.core.lspframe: " .. fn .. ": expected a decoder", 3) end
  if not self._d then error("dsh.core.lspframe: " .. fn .. ": decoder is closed", 3) end
  return self._d
end

local function fail(d, rc)
  local msg = C.dsh_lsp_decoder_status(d) ~= 0 and ffi.string(C.dsh_lsp_decoder_error(d))
    or select(2, F.status(rc))
  return errors.new("LSP_FRAME", msg, { status = (F.status(rc)) })
end

function Decoder:__tostring()
  if not self._d then return "dsh.core.lspframe.decoder (closed)" end
  if C.dsh_lsp_decoder_status(self._d) ~= 0 then
    return "dsh.core.lspframe.decoder (failed: " .. ffi.string(C.dsh_lsp_decoder_error(self._d)) .. ")"
  end
  return "dsh.core.lspframe.decoder (max " .. self.max .. " bytes)"
end

--- A decoder whose message bodies are at most max bytes.
---@param max integer >= 0
---@return dsh.LspFrameDecoder
function M.decoder(max)
  if type(max) ~= "number" or max < 0 or max ~= math.floor(max) then
    error("dsh.core.lspframe: decoder: max must be a non-negative integer, got " .. tostring(max), 2)
  end
  local out = ffi.new("dsh_lsp_decoder_t *[1]")
  if C.dsh_lsp_decoder_new(max, out) ~= 0 then error("dsh.core.lspframe: decoder: out of memory", 2) end
  return setmetatable({ _d = ffi.gc(out[0], C.dsh_lsp_decoder_free), max = max }, Decoder)
end

--- Pushes a chunk; returns the bodies it completed. On failure returns nil,
--- err, and the bodies completed before it.
---@param s string
---@return string[]|nil bodies
---@return dsh.Error? err
---@return string[]? before
function Decoder:push(s)
  local d = live(self, "push")
  if type(s) ~= "string" then error("dsh.core.lspframe: push: expected string, got " .. type(s), 2) end
  local rc = C.dsh_lsp_decoder_push(d, s, #s)
  if rc ~= 0 then return nil, fail(d, rc), {} end
  local out = {}
  while true do
    rc = C.dsh_lsp_decoder_next(d, body_p, len_p)
    if rc == 0 then return out end
    if rc < 0 then return nil, fail(d, rc), out end
    out[#out + 1] = ffi.string(body_p[0], len_p[0])
  end
end

--- End of stream: true, or nil, err if it ended mid-message.
---@return true|nil
---@return dsh.Error? err
function Decoder:finish()
  local d = live(self, "finish")
  local rc = C.dsh_lsp_decoder_finish(d)
  if rc ~= 0 then return nil, fail(d, rc) end
  return true
end

--- Frees the decoder now (idempotent).
function Decoder:close()
  if self._d then
    C.dsh_lsp_decoder_free(ffi.gc(self._d, nil))
    self._d = nil
  end
end

--- One message: "Content-Length: N\r\n\r\n" .. body.
---@param body string
---@return string
function M.encode(body)
  if type(body) ~= "string" then error("dsh.core.lspframe: encode: expected string, got " .. type(body), 2) end
  C.dsh_lsp_encode_header(#body, head, 48, head_n)
  return ffi.string(head, head_n[0]) .. body
end

return M
