--- dsh.core.proc._opts: dsh.core.proc's spawn options, checked and laid out for the
-- core (dsh_proc_opts_t) (private).
--
-- Owns: which options spawn takes, their defaults and their checks, and the
-- C arrays argv, envp and cwd point into. Never starts a process (dsh.core.proc
-- does, with what build returns). A bad option raises a tagged table
-- {misuse = "dsh.core.proc: spawn: ..."}, which spawn re-raises at its caller.
local F = require "dsh.core._ffi"
local ffi, C = F.ffi, F.C

local M = {}
local MOD = "dsh.core.proc"

local STDIO = { null = C.DSH_STDIO_NULL, pipe = C.DSH_STDIO_PIPE, inherit = C.DSH_STDIO_INHERIT }
local DEFAULT_MAX_BUFFER = 65536

local function bad_option(fmt, ...)
  error({ misuse = MOD .. ": " .. string.format(fmt, ...) }, 0)
end

local KNOWN = {
  argv = true, env = true, cwd = true, stdin = true, stdout = true, stderr = true, pty = true,
  new_session = true, max_buffer_bytes = true, uid = true, gid = true, init_groups = true,
}

local function check_cstring(what, s)
  if type(s) ~= "string" then bad_option("spawn: %s must be a string, got %s", what, type(s)) end
  if s:find("\0", 1, true) then bad_option("spawn: %s contains a NUL byte", what) end
  return s
end

local function check_int(what, v, lo, hi)
  if type(v) ~= "number" or v % 1 ~= 0 or v < lo or v > hi then
    bad_option("spawn: %s must be an integer in [%d, %d], got %s", what, lo, hi, tostring(v))
  end
  return v
end

--- The core's options for spawn options o: c (a dsh_proc_opts_t), keep (the
--- Lua strings and arrays c points into: keep it referenced until the spawn
--- returned), the stdio modes, the buffer bound and whether it is a PTY.
function M.build(o)
  if type(o) ~= "table" then bad_option("spawn: expected an options table, got %s", type(o)) end
  for k in pairs(o) do
    if not KNOWN[k] then bad_option("spawn: unknown option %q", tostring(k)) end
  end
  local argv = o.argv
  local nargs = type(argv) == "table" and #argv or 0
  local count = 0
  if type(argv) == "table" then for _ in pairs(argv) do count = count + 1 end end
  if nargs == 0 or count ~= nargs then bad_option("spawn: argv must be a non-empty list of strings") end
  for i = 1, nargs do
    if type(argv[i]) ~= "string" then bad_option("spawn: argv must be a non-empty list of strings") end
    check_cstring("argv[" .. i .. "]", argv[i])
  end
  if argv[1] == "" then bad_option("spawn: argv[1] must not be empty") end

  local keep = {} -- Lua strings the C arrays point into, alive until spawn returns
  local c = ffi.new("dsh_proc_opts_t")
  local cargv = ffi.new("const char *[?]", nargs + 1)
  for i = 1, nargs do cargv[i - 1] = argv[i] end
  c.argv = cargv
  keep[#keep + 1] = cargv

  if o.env ~= nil and type(o.env) ~= "table" then
    bad_option("spawn: env must be a table of name = value, got %s", type(o.env))
  end
  local names = {}
  for k, v in pairs(o.env or {}) do
    if type(k) ~= "string" or k == "" or k:find("=", 1, true) then
      bad_option("spawn: env name %q is not a valid variable name", tostring(k))
    end
    if type(v) == "number" then v = tostring(v) end
    check_cstring("env." .. k, v)
    check_cstring("env name", k)
    names[#names + 1] = k
  end
  table.sort(names)
  local cenv = ffi.new("const char *[?]", #names + 1)
  for i, k in ipairs(names) do
    local entry = k .. "=" .. tostring(o.env[k])
    keep[#keep + 1] = entry
    cenv[i - 1] = entry
  end
  c.envp = cenv
  keep[#keep + 1] = cenv

  if o.cwd ~= nil then
    c.cwd = check_cstring("cwd", o.cwd)
    keep[#keep + 1] = o.cwd
  end
  local modes = {}
  for _, name in ipairs { "stdin", "stdout", "stderr" } do
    local m = o[name]
    if m == nil then m = name == "stdin" and "null" or "pipe" end
    if not STDIO[m] then
      bad_option("spawn: %s must be \"pipe\", \"null\" or \"inherit\", got %s", name, tostring(m))
    end
    modes[name] = m
  end
  c.stdin_mode, c.stdout_mode, c.stderr_mode = STDIO[modes.stdin], STDIO[modes.stdout], STDIO[modes.stderr]

  local pty = o.pty
  if pty ~= nil and pty ~= false then
    if pty == true then pty = {} end
    if type(pty) ~= "table" then
      bad_option("spawn: pty must be a table {rows=, cols=} or true, got %s", type(pty))
    end
    c.pty = 1
    c.pty_rows = check_int("pty.rows", pty.rows or 24, 1, 65535)
    c.pty_cols = check_int("pty.cols", pty.cols or 80, 1, 65535)
    modes = { stdin = "pipe", stdout = "pipe", stderr = "null" }
  end
  if o.new_session ~= nil and type(o.new_session) ~= "boolean" then
    bad_option("spawn: new_session must be a boolean, got %s", type(o.new_session))
  end
  c.new_session = o.new_session and 1 or 0
  local max = check_int("max_buffer_bytes", o.max_buffer_bytes or DEFAULT_MAX_BUFFER, 1, 2 ^ 31)
  c.max_buffer_bytes = max
  c.uid = o.uid ~= nil and check_int("uid", o.uid, 0, 2 ^ 31 - 1) or -1
  c.gid = o.gid ~= nil and check_int("gid", o.gid, 0, 2 ^ 31 - 1) or -1
  c.init_groups = o.init_groups and 1 or 0
  return c, keep, modes, max, c.pty == 1
end

return M
