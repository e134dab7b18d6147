--- dsh.tools.terminal: the model-facing terminal tools over ctx.pty
-- (reference §5 "Terminal tools"): terminal_open, terminal_send,
-- terminal_read, terminal_screen, terminal_signal, terminal_close,
-- terminal_list.
--
-- Each tool is {name, description, parameters, run(ctx, input, opts)}; the
-- JSON schemas are valid for OpenAI's strict mode and for Anthropic's tool
-- use: every property is listed in `required`, optional ones also accept
-- null, and null means absent. Parameter names are snake_case, as every
-- tool's are (docs/tools.md). run returns the rendered text, or nil, err
-- with a message written for the model (render_error adds "Error: "). Every
-- tool needs the initiating agent (opts.agent, the sessions' owner).
-- Results are at most maxResultBytes (opts.maxResultBytes, default 262144,
-- at least 64) bytes, cut on UTF-8 boundaries, keeping the newest output.
local errors = require "dsh.errors"

local M = {}

M.MAX_RESULT_BYTES = 262144
M.MIN_RESULT_BYTES = 64

local function nullable(t, description, extra)
  local p = { type = { t, "null" }, description = description }
  for k, v in pairs(extra or {}) do p[k] = v end
  return p
end

-- No parameters: no `required` (lua-cjson would encode an empty list as {}).
local function schema(props, order)
  return { type = "object", properties = props, required = #order > 0 and order or nil, additionalProperties = false }
end

local SESSION = { type = "string",
  description = "The terminal session id (pty-N) from terminal_open or terminal_list." }
local MAX_WAIT_MS = 600000

local function invalid(tool, msg)
  return nil, errors.new("INVALID_ARGUMENT", tool .. ": " .. msg)
end

-- Checks input against the tool's schema: null (a JSON decoder's null, a
-- light userdata) is absent; returns a copy.
local function check(tool, input)
  if type(input) ~= "table" then return invalid(tool.name, "input must be an object") end
  local out = {}
  for k, v in pairs(input) do
    local p = tool.parameters.properties[k]
    if not p then return invalid(tool.name, "unknown parameter " .. tostring(k)) end
    if v ~= nil and type(v) ~= "userdata" then
      local want = type(p.type) == "table" and p.type[1] or p.type
      local ok = (want == "integer" and type(v) == "number" and v % 1 == 0)
        or (want ~= "integer" and type(v) == want)
      if not ok then
        return invalid(tool.name, k .. " must be " .. (want == "integer" and "an integer" or "a " .. want))
      end
      if p.minimum and v < p.minimum then return invalid(tool.name, k .. " must be at least " .. p.minimum) end
      if p.maximum and v > p.maximum then return invalid(tool.name, k .. " must be at most " .. p.maximum) end
      if p.enum then
        local found = false
        for _, e in ipairs(p.enum) do found = found or e == v end
        if not found then return invalid(tool.name, k .. " must be one of " .. table.concat(p.enum, ", ")) end
      end
      out[k] = v
    end
  end
  for _, k in ipairs(tool.parameters.required or {}) do
    local p = tool.parameters.properties[k]
    local optional = type(p.type) == "table"
    if not optional and out[k] == nil then return invalid(tool.name, k .. " is required") end
  end
  return out
end

-- Clear text for every failure the seam returns.
local HINTS = {
  NO_SESSION = "use terminal_list to see the open sessions",
  FOREIGN_SESSION = "that session belongs to another agent",
  SEND_ACTIVE = "another terminal_send is still waiting on this session; wait for it, or stop the program "
    .. "with terminal_signal INT",
  DUPLICATE_NAME = "choose another name, or use the existing session",
  NO_BACKEND = "use type \"shell\"",
  PTY_EXITED = "the shell has exited; open a new session with terminal_open",
  PTY_CLOSING = "the session is being closed; open a new one with terminal_open",
  PTY_SIGNAL = "nothing runs in the foreground, or the signal is refused",
  OWNER_NOT_LIVE = "this agent can no longer open terminals",
  SERVICE_DISPOSING = "terminals are shutting down",
}

--- "Error: <message>" for the model.
function M.render_error(err)
  return "Error: " .. tostring(type(err) == "table" and err.message or err)
end

local function fail(tool, err)
  local hint = HINTS[err.code]
  return nil, errors.new(err.code or "TERMINAL_FAILED", tool .. ": " .. tostring(err.message)
    .. (hint and (" (" .. hint .. ")") or ""), { cause = err })
end

-- The seam and the owner, or nil, err.
local function prelude(tool, ctx, input, opts)
  local agent = opts and opts.agent
  if type(agent) ~= "table" or type(agent.id) ~= "string" then
    return nil, errors.new("TERMINAL_NO_AGENT", "terminal tools require an initiating agent")
  end
  local pty = ctx and ctx.pty
  if not pty then return nil, errors.new("TERMINAL_UNAVAILABLE", tool.name .. ": ctx.pty is not configured") end
  local args, err = check(tool, input)
  if not args then return nil, err end
  return pty, agent, args
end

local function limit(opts)
  local n = opts and opts.maxResultBytes or M.MAX_RESULT_BYTES
  return math.max(M.MIN_RESULT_BYTES, n)
end

-- The last n bytes of s (valid UTF-8, as the seam returns), minus the rest
-- of a code point they would cut.
local function tail(s, n)
  if n <= 0 then return "" end
  local i = #s - n + 1
  while i <= #s do
    local b = s:byte(i)
    if b < 0x80 or b >= 0xC0 then break end
    i = i + 1
  end
  return s:sub(i)
end

-- body (cut to its newest bytes) followed by trailer, within max bytes.
local function fit(body, trailer, max)
  local room = max - #trailer
  if #body <= room then return body .. trailer, false end
  return tail(body, room) .. trailer, true
end

local function status_text(st)
  if st.kind == "running" then return "running" end
  return string.format("exited code=%s signal=%s", st.exitCode ~= nil and tostring(st.exitCode) or "null",
    st.signal or "null")
end

local T = {}

T.terminal_open = {
  name = "terminal_open",
  description = "Open a persistent interactive shell in the workspace. It keeps its state (directory, "
    .. "variables, running programs) between terminal_send calls until terminal_close.",
  parameters = schema({
    type = { type = "string", description = "The kind of terminal; \"shell\" is a bash shell." },
    name = nullable("string", "An optional name, unique among your sessions."),
    cwd = nullable("string", "Working directory, relative to the workspace or absolute."),
  }, { "type", "name", "cwd" }),
}

function T.terminal_open.run(ctx, input, opts)
  local tool = T.terminal_open
  local pty, agent, args = prelude(tool, ctx, input, opts)
  if not pty then return nil, agent end
  local s, err = pty:spawn(agent, { type = args.type, name = args.name, cwd = args.cwd }, opts and opts.signal)
  if not s then return fail(tool.name, err) end
  local head = "started terminal session " .. s.id .. (s.name and (" (" .. s.name .. ")") or "")
    .. " [type: " .. s.type .. "]\n"
  local motd = (s.motd and s.motd ~= "") and s.motd or "(no startup output)"
  return head .. (fit(motd, "", limit(opts) - #head))
end

T.terminal_send = {
  name = "terminal_send",
  description = "Type text into a terminal session (and press Enter unless submit is false), then wait "
    .. "until the shell is ready for more input, goes quiet, exits or times out, and return what it "
    .. "printed meanwhile. Control characters are typed as they are (\\u0003 is Ctrl-C, \\u001b is Escape). "
    .. "With wait false it returns at once and the program runs on; the next terminal_send (Ctrl-C "
    .. "included) is accepted at once. To wait for what a full-screen program shows, use terminal_screen "
    .. "with wait_for.",
  parameters = schema({
    session_id = SESSION,
    text = { type = "string", description = "The text to type." },
    submit = nullable("boolean", "Press Enter after the text (default true)."),
    wait = nullable("boolean", "Wait for the shell (default true); false returns at once."),
    timeout_ms = nullable("integer", "Longest wait in milliseconds (default: the terminal's timeout, 30000 "
      .. "unless configured otherwise).", { minimum = 1, maximum = MAX_WAIT_MS }),
    wait_for = nullable("string", "Return as soon as the program prints this text (the echo of what you "
      .. "typed does not count); silence does not end this wait, the prompt coming back does."),
    idle_ms = nullable("integer", "Return once nothing was printed for this long (default 3000).",
      { minimum = 1, maximum = MAX_WAIT_MS }),
  }, { "session_id", "text", "submit", "wait", "timeout_ms", "wait_for", "idle_ms" }),
}

function T.terminal_send.run(ctx, input, opts)
  local tool = T.terminal_send
  local pty, agent, args = prelude(tool, ctx, input, opts)
  if not pty then return nil, agent end
  if args.wait_for == "" then return invalid(tool.name, "wait_for must not be empty") end
  local op, err = pty:startSend(agent, args.session_id, { text = args.text, submit = args.submit ~= false,
    timeoutMs = args.timeout_ms, idleMs = args.idle_ms, waitFor = args.wait_for }, opts and opts.signal)
  if not op then return fail(tool.name, err) end
  if args.wait == false then
    op:detach()
    return "sent to " .. args.session_id .. "; not waiting (terminal_read or terminal_screen show the output; "
      .. "the next terminal_send is accepted at once)"
  end
  local r, werr = op:wait()
  if not r then return fail(tool.name, werr) end
  local viewport = r.viewport ~= "" and r.viewport or "(no new output)"
  local trailer = "\n[wait: " .. r.waitReason .. "]\n[session: " .. status_text(r.sessionStatus) .. "]"
  local cut_note = "\n[output truncated]"
  local text, cut = fit(viewport, trailer .. cut_note, limit(opts))
  if cut or r.truncated then return text end
  return viewport .. trailer
end

T.terminal_read = {
  name = "terminal_read",
  description = "Read a terminal session's scrollback by lines, counted from the newest: offset lines "
    .. "are skipped, then up to count older lines are returned (oldest first).",
  parameters = schema({
    session_id = SESSION,
    offset = nullable("integer", "Newest lines to skip (default 0).", { minimum = 0 }),
    count = nullable("integer", "Lines to return (default 500).", { minimum = 1 }),
  }, { "session_id", "offset", "count" }),
}

function T.terminal_read.run(ctx, input, opts)
  local tool = T.terminal_read
  local pty, agent, args = prelude(tool, ctx, input, opts)
  if not pty then return nil, agent end
  local page, err = pty:read(agent, args.session_id, { offset = args.offset, count = args.count })
  if not page then return fail(tool.name, err) end
  local trailer = string.format("\n[lines: %d-%d of %d]", page.lineBegin, page.lineEnd, page.totalLines)
  return (fit(page.text, trailer, limit(opts)))
end

T.terminal_screen = {
  name = "terminal_screen",
  description = "Show the terminal's screen as it looks now (rows of text and the cursor), which is what "
    .. "full-screen programs such as vim, less or top display. Optionally wait first until the screen "
    .. "shows some text or stops changing.",
  parameters = schema({
    session_id = SESSION,
    wait_for = nullable("string", "Wait until this text appears on the screen."),
    idle_ms = nullable("integer", "Wait until the screen has not changed for this long.",
      { minimum = 1, maximum = MAX_WAIT_MS }),
    timeout_ms = nullable("integer", "Longest wait in milliseconds (default 10000).",
      { minimum = 1, maximum = MAX_WAIT_MS }),
  }, { "session_id", "wait_for", "idle_ms", "timeout_ms" }),
}

function T.terminal_screen.run(ctx, input, opts)
  local tool = T.terminal_screen
  local pty, agent, args = prelude(tool, ctx, input, opts)
  if not pty then return nil, agent end
  local snap, note
  if args.wait_for or args.idle_ms then
    local r, err = pty:waitFor(agent, args.session_id, { pattern = args.wait_for, plain = true,
      idleMs = args.idle_ms, timeoutMs = args.timeout_ms or 10000 })
    if not r then return fail(tool.name, err) end
    snap, note = r.screen, "\n[wait: " .. r.reason .. "]"
  else
    local err
    snap, err = pty:screen(agent, args.session_id)
    if not snap then return fail(tool.name, err) end
  end
  local trailer = string.format("\n[cursor: row %d, col %d; screen %dx%d%s]%s\n[session: %s]",
    snap.cursor.row + 1, snap.cursor.col + 1, snap.rows, snap.cols, snap.altscreen and ", full-screen program" or "",
    note or "", status_text(snap.sessionStatus))
  local rows = table.concat(snap.lines, "\n"):gsub("\n+$", "") -- blank rows below the text say nothing
  return (fit(rows, trailer, limit(opts)))
end

T.terminal_signal = {
  name = "terminal_signal",
  description = "Send a signal to the program running in the foreground of a terminal session (INT is "
    .. "Ctrl-C, TSTP is Ctrl-Z). KILL of the shell itself is refused: use terminal_close.",
  parameters = schema({
    session_id = SESSION,
    signal = { type = "string", enum = { "INT", "TERM", "KILL", "TSTP", "HUP" }, description = "The signal." },
  }, { "session_id", "signal" }),
}

function T.terminal_signal.run(ctx, input, opts)
  local tool = T.terminal_signal
  local pty, agent, args = prelude(tool, ctx, input, opts)
  if not pty then return nil, agent end
  local d, err = pty:signal(agent, args.session_id, args.signal)
  if not d then return fail(tool.name, err) end
  return string.format("delivered %s to foreground process group %d", d.signal, d.targetPgid)
end

T.terminal_close = {
  name = "terminal_close",
  description = "Close a terminal session: its shell and everything started in it are stopped.",
  parameters = schema({ session_id = SESSION }, { "session_id" }),
}

function T.terminal_close.run(ctx, input, opts)
  local tool = T.terminal_close
  local pty, agent, args = prelude(tool, ctx, input, opts)
  if not pty then return nil, agent end
  local ok, err = pty:kill(agent, args.session_id)
  if ok == nil then return fail(tool.name, err) end
  return ok and ("closed terminal session " .. args.session_id)
    or ("terminal session " .. args.session_id .. " was already closing; it is closed now")
end

T.terminal_list = {
  name = "terminal_list",
  description = "List your open terminal sessions.",
  parameters = schema({}, {}),
}

function T.terminal_list.run(ctx, input, opts)
  local tool = T.terminal_list
  local pty, agent = prelude(tool, ctx, input or {}, opts)
  if not pty then return nil, agent end
  local lines = {}
  for _, s in ipairs(pty:list(agent)) do
    lines[#lines + 1] = string.format("%s%s [type: %s] %s%s", s.id, s.name and (" (" .. s.name .. ")") or "",
      s.type, status_text(s.status), s.busy and ", busy" or "")
  end
  if #lines == 0 then return "(no terminal sessions)" end
  return (fit(table.concat(lines, "\n"), "", limit(opts)))
end

M.tools = T
M.order = { "terminal_open", "terminal_send", "terminal_read", "terminal_screen", "terminal_signal",
  "terminal_close", "terminal_list" }

return M
