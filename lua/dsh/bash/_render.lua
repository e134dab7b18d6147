--- dsh.bash._render: the text a model sees of a Bash result or of a
-- background process's new output. Pure functions over strings.
--
-- A result (render):
--   1. stdout's retained text, then stderr's. A stream whose first bytes were
--      cut is preceded by the line
--        [... N bytes of output truncated; full output in <spillPath>]
--      ("; full output in <spillPath>" only when a complete spill was kept),
--      and its text then starts at a line boundary when one lies within the
--      kept tail, never with an empty line. Each non-empty section ends with a
--      newline (one is added if missing).
--   2. "(no output)" when both streams are empty.
--   3. One status line: "[exit code N]", "[terminated by SIGNAME]",
--      "[timed out after N ms]" (only the command's own timeout) or
--      "[aborted]" (the caller's signal), then, when the shell exited but
--      processes it started in the background still run,
--      "[still running in the background as <id>]".
--   At most maxOutputBytes of output are shown in total: when both streams do
--   not fit, stderr keeps up to half of the budget (more if stdout needs
--   less); every cut keeps the tail and starts on a code-point boundary.
--
-- A background delta (delta): the new stdout, then, when stderr has new
-- text, "[stderr]" on a line of its own followed by it (a newline is added
-- before the marker only when stdout's text lacks one). Output the process
-- wrote while nobody read it, beyond what is kept, is announced by
--   [... N bytes of output dropped; full output in <spillPath>]
local utf8 = require "dsh.core.utf8"

local M = {}

--- t cut to start at a line boundary inside it (when text follows the
-- newline), and never with an empty line.
function M.from_line(t)
  local nl = t:find("\n", 1, true)
  if nl and nl < #t then t = t:sub(nl + 1) end
  return (t:gsub("^[\r\n]+", ""))
end

local function section(out, s, shown)
  if s.total == 0 and shown == "" then return end
  if s.total > #shown then shown = M.from_line(shown) end
  local cut = s.total - #shown
  if cut > 0 then
    out[#out + 1] = string.format("[... %d bytes of output truncated%s]\n", cut,
      s.spillPath and ("; full output in " .. s.spillPath) or "")
  end
  if shown ~= "" then
    out[#out + 1] = shown
    if shown:sub(-1) ~= "\n" then out[#out + 1] = "\n" end
  end
end

--- The status line of a result.
function M.status(r)
  if r.timedOut then return string.format("[timed out after %d ms]", r.timeoutMs) end
  if r.aborted then return "[aborted]" end
  if r.signal then return "[terminated by " .. r.signal .. "]" end
  return "[exit code " .. tostring(r.exitCode) .. "]"
end

--- The text of a result r (see the header); max: the output budget in bytes.
---@param r dsh.BashResult
---@param max integer
---@return string
function M.render(r, max)
  local o, e = r.stdout.text, r.stderr.text
  if #o + #e > max then
    local e_share = math.min(#e, math.max(math.floor(max / 2), max - #o))
    e = utf8.tail(e, e_share)
    o = utf8.tail(o, max - #e)
  end
  local out = {}
  section(out, r.stdout, o)
  section(out, r.stderr, e)
  if #out == 0 then out[1] = "(no output)\n" end
  out[#out + 1] = M.status(r)
  if r.background then out[#out + 1] = "\n[still running in the background as " .. r.background .. "]" end
  return table.concat(out)
end

local function dropped(read, from)
  if not read.lossy then return "" end
  local n = read.nextOffset - #read.text - from
  return string.format("[... %d bytes of output dropped%s]\n", n,
    read.spillPath and ("; full output in " .. read.spillPath) or "")
end

--- The delta text of two collector reads (stdout, stderr) made from offsets
-- out_from and err_from; note: a line to put under [stderr] when stderr has
-- nothing new (a start failure).
function M.delta(out, out_from, err, err_from, note)
  local o = dropped(out, out_from) .. out.text
  local e = err.text ~= "" and (dropped(err, err_from) .. err.text) or (note or "")
  if e == "" then return o end
  local sep = (o ~= "" and o:sub(-1) ~= "\n") and "\n" or ""
  return o .. sep .. "[stderr]\n" .. e
end

return M
