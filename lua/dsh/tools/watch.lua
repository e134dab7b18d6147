--- dsh.tools.watch: the model-facing file watch over ctx.fs (fs:watch).
--
-- The model waits for files to change instead of polling with bash: a build
-- or a server started in the background writes its output, a test run drops
-- its report. The call returns at the first change (plus settle_ms for the
-- changes that come with it) or after timeout_ms, listing what changed,
-- relative to the watched directory. Changes from before the call are not
-- reported.
--
-- Input: path (default the workspace), recursive (default true), timeout_ms
-- (default 30000, at most 600000), settle_ms (default 200). Output: a
-- line per change, "<create|write|remove|rename|chmod> <name>", repeats of
-- one change to one name folded ("write out.log (x12)"), at most
-- MAX_LINES lines; or "no change ... within N ms".
local async = require "dsh.async"
local errors = require "dsh.errors"
local input = require "dsh.tools._input"

local M = {
  name = "watch",
  description = "Wait until files change in a directory of the workspace (created, written, removed, renamed, "
    .. "permissions changed), and list the changes. Use it to wait for a background command's output file, a "
    .. "build result or a report instead of polling. Returns at the first change (and those right after it) "
    .. "or after timeout_ms; changes from before the call are not reported.",
}

M.DEFAULT_TIMEOUT_MS = 30000
M.MAX_TIMEOUT_MS = 600000
M.DEFAULT_SETTLE_MS = 200
M.MAX_LINES = 100
M.MAX_EVENTS = 10000

M.parameters = input.schema({
  path = { type = "string", description = "The directory, absolute or relative to the workspace (default: the "
    .. "workspace)." },
  recursive = { type = "boolean", description = "Also watch every directory below it (default true)." },
  timeout_ms = { type = "integer", minimum = 1, maximum = M.MAX_TIMEOUT_MS,
    description = "Longest wait in milliseconds for a first change (default 30000)." },
  settle_ms = { type = "integer", minimum = 0, maximum = 10000,
    description = "After the first change, how long to collect the changes that follow (default 200)." },
}, { "path", "recursive", "timeout_ms", "settle_ms" })

-- The next event within ms (nil when none came), or nil, err; the caller's
-- signal aborts too (nil, ABORTED).
local function next_within(w, ms, signal)
  local ev, err = async.timeout(ms, function(sig) return w:next(sig) end, signal)
  if ev then return ev end
  if signal and signal.aborted then return nil, errors.new("ABORTED", "watch: aborted") end
  if err and (err.code == "TIMEOUT" or err.code == "FS_ABORTED") then return nil end
  return nil, err
end

---@param ctx table   a context with ctx.fs
---@param args table  {path=, recursive=, timeout_ms=, settle_ms=}
---@param opts {signal: dsh.AbortSignal|nil}|nil
---@return string|nil, dsh.Error|nil, table|nil
function M.run(ctx, args, opts)
  local fs = ctx.fs
  if not fs then return nil, errors.new("TOOL_UNAVAILABLE", "watch: ctx.fs is not configured") end
  local o, ierr = input.object(M.name, args or {}, M.parameters)
  if not o then return nil, ierr end
  local signal = opts and opts.signal
  local path = o.path or fs.cwd
  if type(path) ~= "string" or not path:find("%S") then return input.invalid("watch: path must not be blank") end
  local timeout = o.timeout_ms or M.DEFAULT_TIMEOUT_MS
  local settle = o.settle_ms or M.DEFAULT_SETTLE_MS
  local w, err = fs:watch(path, { recursive = o.recursive ~= false, signal = signal })
  if not w then return nil, err end
  local events = {}
  local ev, nerr = next_within(w, timeout, signal)
  if ev then
    events[1] = ev
    if settle > 0 then
      local ok, cerr = pcall(async.timeout, settle, function(sig)
        while #events < M.MAX_EVENTS do
          local more = w:next(sig)
          if not more then return end
          events[#events + 1] = more
        end
      end, signal)
      if not ok then
        w:close()
        error(cerr, 0)
      end
    end
  end
  w:close()
  if not ev then
    if nerr then return nil, nerr end
    return string.format("no change under %s within %d ms", w.path, timeout), nil, { path = w.path, events = {} }
  end
  -- one line per change and name, in order of first appearance, repeats counted
  local lines, index = {}, {}
  for _, e in ipairs(events) do
    local key = e.type .. " " .. e.name
    local i = index[key]
    if i then
      lines[i].n = lines[i].n + 1
    else
      lines[#lines + 1] = { text = key, n = 1 }
      index[key] = #lines
    end
  end
  local out = { string.format("changes under %s:", w.path) }
  for i, l in ipairs(lines) do
    if i > M.MAX_LINES then
      out[#out + 1] = string.format("[%d more changes not shown]", #lines - M.MAX_LINES)
      break
    end
    out[#out + 1] = l.n > 1 and string.format("%s (x%d)", l.text, l.n) or l.text
  end
  return table.concat(out, "\n"), nil, { path = w.path, events = events }
end

return M
