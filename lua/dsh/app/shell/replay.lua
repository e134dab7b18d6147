--- dsh.app.shell.replay: what `dsh shell` does so that replayed output stays
-- output. When it re-attaches, it prints what the sandbox's shell printed
-- before; a program in it may have asked the terminal something then (vi and
-- readline ask for the cursor position and the device attributes), and a
-- local terminal that saw those queries again would answer them now, into
-- the shell's input, as if typed (`echo $MARK` became `2RRecho`).
--
-- Two guards: strip() removes every query from the replayed bytes before they
-- are printed; a fence() then asks the local terminal one question of its own
-- (device attributes, which every terminal answers) and drops the reports the
-- terminal sends from the keyboard side until that answer, for any query the
-- first guard did not know. Keys typed meanwhile go through.
local M = {}

M.FENCE_QUERY = "\27[c" -- DA1: what device are you? (answered CSI ? ... c)
M.FENCE_MS = 1000 -- a terminal that never answers: stop filtering after this
M.MAX_HELD = 256 -- a sequence longer than this is not a report; let it through

-- CSI queries (what the terminal answers): DSR and CPR (n), DA1-3 (c),
-- DECREQTPARM (x), DECRQM ($p), window reports (t with 11, 13-16, 18-21),
-- XTVERSION (>q) and the kitty keyboard query (?u).
local WINDOW_REPORTS = { ["11"] = true, ["13"] = true, ["14"] = true, ["15"] = true, ["16"] = true,
  ["18"] = true, ["19"] = true, ["20"] = true, ["21"] = true }

local function csi_query(params, inter, final)
  if final == "p" then return inter == "$" end
  if final == "t" then return WINDOW_REPORTS[params:match("^%d*")] == true end
  if final == "q" then return params:sub(1, 1) == ">" end -- CSI q alone is DECLL
  if final == "u" then return params:sub(1, 1) == "?" end
  if final == "c" then return inter == "" and params:match("^[>=]?%d*$") ~= nil end -- CSI ? ... c answers
  if final == "n" or final == "x" then return inter == "" end
  return false
end

-- The end (index of the last byte) of the escape sequence at s[i] (an ESC),
-- its kind and parts; nil when s ends before the sequence does.
local function sequence(s, i)
  local k = s:byte(i + 1)
  if not k then return nil end
  if k == 0x5B then -- CSI
    local p, q = s:find("^[\48-\63]*", i + 2)
    local params = s:sub(p, q)
    local ip, iq = s:find("^[\32-\47]*", q + 1)
    local inter = s:sub(ip, iq)
    local final = s:sub(iq + 1, iq + 1)
    if final == "" then return nil end
    return iq + 1, "csi", params, inter, final
  elseif k == 0x5D or k == 0x50 or k == 0x5F or k == 0x5E then -- OSC, DCS, APC, PM: up to BEL or ST
    local j = i + 2
    while j <= #s do
      local b = s:byte(j)
      if b == 7 and k == 0x5D then return j, "string", s:sub(i + 2, j - 1), string.char(k) end
      if b == 27 then
        if j == #s then return nil end
        if s:byte(j + 1) == 0x5C then return j + 1, "string", s:sub(i + 2, j - 1), string.char(k) end
      end
      j = j + 1
    end
    return nil
  end
  return i + 1, "esc"
end

-- Is this string sequence (OSC/DCS) a query? OSC with a "?" parameter (colour,
-- clipboard queries); DCS $q (DECRQSS) and +q (XTGETTCAP).
local function string_query(body, kind)
  if kind == "]" then return (";" .. body .. ";"):find(";%?;") ~= nil end
  if kind == "P" then return body:sub(1, 2) == "$q" or body:sub(1, 2) == "+q" end
  return false
end

--- s without the queries a terminal would answer (and ENQ, which asks for
--- the answerback). A sequence cut at the end of s is kept as it is.
---@param s string
---@return string
function M.strip(s)
  if not s:find("[\27\5]") then return s end
  local out, i, n = {}, 1, #s
  while i <= n do
    local j = s:find("[\27\5]", i)
    if not j then
      out[#out + 1] = s:sub(i)
      break
    end
    out[#out + 1] = s:sub(i, j - 1)
    if s:byte(j) == 5 then
      i = j + 1
    else
      local e, kind, a, b, c = sequence(s, j)
      if not e then
        out[#out + 1] = s:sub(j)
        break
      end
      local query = (kind == "csi" and csi_query(a, b, c)) or (kind == "string" and string_query(a, b))
      if not query then out[#out + 1] = s:sub(j, e) end
      i = e + 1
    end
  end
  return table.concat(out)
end

-- Reports a terminal sends on its keyboard side: CSI ... R (cursor position),
-- c (device attributes), n (status), t (window), $y (mode), ?u (keyboard
-- flags), and every OSC, DCS or APC string (colours, settings, versions).
local function report(kind, params, inter, final)
  if kind == "string" then return true end
  if kind ~= "csi" then return false end
  if inter == "$" and final == "y" then return true end
  return final == "R" or final == "c" or final == "n" or final == "t" or (final == "u" and params:sub(1, 1) == "?")
end

---@class dsh.app.shell.Fence
local Fence = {}
Fence.__index = Fence

--- A filter of the local terminal's input that drops reports until the
--- answer to FENCE_QUERY arrives (the caller writes FENCE_QUERY to the
--- terminal after the replay, and calls fence:expire() after FENCE_MS).
function M.fence()
  return setmetatable({ open = true, _held = "" }, Fence)
end

--- The bytes of data to forward to the shell.
---@param data string
---@return string
function Fence:filter(data)
  if not self.open then return data end
  local s = self._held .. data
  self._held = ""
  local out, i, n = {}, 1, #s
  while i <= n do
    if not self.open then
      out[#out + 1] = s:sub(i)
      break
    end
    local j = s:find("\27", i, true)
    if not j then
      out[#out + 1] = s:sub(i)
      break
    end
    out[#out + 1] = s:sub(i, j - 1)
    local e, kind, a, b, c = sequence(s, j)
    if not e then
      if n - j + 1 > M.MAX_HELD then
        out[#out + 1] = s:sub(j)
      else
        self._held = s:sub(j)
      end
      break
    end
    if report(kind, a, b, c) then
      if kind == "csi" and c == "c" and a:sub(1, 1) == "?" then self.open = false end -- the fence's answer
    else
      out[#out + 1] = s:sub(j, e)
    end
    i = e + 1
  end
  return table.concat(out)
end

--- Stop filtering (the terminal did not answer in time): what was held back
--- is returned, to be forwarded.
function Fence:expire()
  self.open = false
  local held = self._held
  self._held = ""
  return held
end

return M
