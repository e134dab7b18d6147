--- dsh.errors: the one shape of an expected failure, and the one catalogue
-- of the codes it may carry.
--
-- Misuse raises (`errors.misuse("dsh.fs", "readText: path must be a string")`,
-- at the caller's line); expected failures return `nil, err` where err is
-- made here: a table with `code` and `message`, printable with tostring.
--
-- Every code dsh returns is in CATALOGUE below, one table per area (a seam
-- with its providers, the core bindings, the wire), code -> what it means.
-- A code made anywhere in lua/dsh or providers/ that is missing here fails
-- the suite: spec/02-lua scans every error constructor in the tree, and the
-- spec helpers watch every error made at run time (on_unknown_code).
--
-- Registering codes: a new seam or provider adds them, with what each means,
-- to its area's table below (one table per seam; the LSP and code-runtime
-- tables are reserved and empty). A code shared by several
-- areas is listed once, in the area that defines it.
--
-- Two vocabularies live side by side: dsh's codes are UPPER_CASE (the
-- reference's codes where it has them: FS_NOT_FOUND, SUBPROCESS_LOST, ...);
-- the envd client and what speaks the envd protocol for it (dsh.sandbox,
-- the ctx.e2b backends) pass envd's lower-case Connect codes through
-- unchanged ("not_found", "deadline_exceeded", ...), as the wire has them.
local M = {}

-- The catalogue ------------------------------------------------------------------

M.CATALOGUE = {
  -- Shared by every area.
  dsh = {
    ABORTED = "an abort signal fired (err.reason holds its reason)",
    TIMEOUT = "dsh.async.timeout ran out",
    DISPOSED = "the service or context is disposing or disposed",
    INVALID_ARGUMENT = "a tool's input does not match its parameters",
    JSON = "text that is not valid JSON (dsh.json.decode: the parser's message)",
  },
  -- dsh.context: composition of providers.
  context = {
    SETUP_FAILED = "a provider's setup raised, or failed and so did its rollback (.errors)",
    DISPOSE_FAILED = "cleanups failed while disposing (.errors lists each when several did)",
    DEPENDENCY_MISSING = "a provider injects a service nobody offers",
    DEPENDENCY_FAILED = "a provider was not set up because a service it injects failed",
    DEPENDENCY_CYCLE = "providers inject each other's services",
  },
  -- The core bindings (dsh.core.http, dsh.core.proc and the codecs).
  core = {
    HTTP_ERROR = "an HTTP transfer failed (libcurl's message)",
    HTTP_TIMEOUT = "an HTTP request ran past its timeout",
    HTTP_STALLED = "no byte of an HTTP transfer moved for its stall_timeout_ms (err.stall_ms)",
    PROC_CLOSED = "the process handle was closed while a call waited",
    PROC_STDIN_CLOSED = "the process stopped reading stdin",
    PROC_SPAWN_FAILED = "the process could not be started",
    BASE64 = "invalid base64",
    UTF8 = "invalid UTF-8 (err.position when known)",
    ENVELOPE = "a malformed Connect envelope",
    FRAME = "a malformed NDJSON-base64 frame",
    LSP_FRAME = "a malformed LSP Content-Length frame",
    TTY = "the host's terminal refused a call (dsh.core.tty: not a terminal, a failed read)",
  },
  -- ctx.fs (dsh.fs; fs_local, fs_e2b). The first four are also its backend contract's.
  fs = {
    FS_NOT_FOUND = "nothing is at the path (or the path is blank or holds a NUL)",
    FS_PERMISSION_DENIED = "the world refused the operation (no permission, a read-only file system)",
    FS_ABORTED = "opts.signal fired",
    FS_IO_ERROR = "any other failure of the backend",
    FS_NOT_TEXT = "the file is binary or not valid UTF-8",
    FS_NOT_REGULAR_FILE = "the path is not a regular file",
    FS_NOT_DIRECTORY = "the path is not a directory",
    FS_STALE_VERSION = "the file changed (or vanished) since the version the caller holds",
    FS_NOT_OBSERVED = "createIfAbsent, but the file exists",
    FS_EDIT_NOT_FOUND = "oldString is empty or not in the file",
    FS_AMBIGUOUS_EDIT = "oldString matches more than once and replaceAll is not set",
    FS_ALREADY_EXISTS = "move's target exists (and overwrite is not set, or it is of another kind)",
    FS_DIRECTORY_NOT_EMPTY = "remove without recursive, or a move onto, a directory that has entries",
  },
  -- ctx.subprocess (dsh.subprocess; subprocess_local, subprocess_e2b).
  subprocess = {
    SUBPROCESS_START = "the process group could not be started or published",
    SUBPROCESS_LOST = "the process's outcome can no longer be learned (its daemon is gone)",
    SUBPROCESS_CLOSED = "the process was already released",
    SUBPROCESS_NOT_FOUND = "the process, its group or its terminal's foreground group is gone (a backend's "
      .. "not-found, in the backend contract's words)",
    SUBPROCESS_CLEANUP = "a terminal's session could not be emptied (.survivors); closing it again retries",
    SUBPROCESS_ROLLBACK = "a failed start's rollback did not reach quiescence (.errors)",
    SUBPROCESS_DISPOSE = "several handles failed to release while disposing (.errors)",
    SUBPROCESS_EXECUTABLE = "resolveExecutable found no single absolute path",
    SUBPROCESS_FAILED = "a backend raised (a bug); done is rejected with it",
  },
  -- ctx.bash and the bash tool.
  bash = {
    BASH_UNAVAILABLE = "the context has no ctx.bash",
    BASH_UNKNOWN_PROCESS = "no background process of ctx.bash has this id (or it ended long ago and was let go)",
  },
  -- ctx.e2b (providers/e2b).
  e2b = {
    E2B_DISPOSING = "(no longer made: a disposed ctx.e2b says DISPOSED; kept for providers that test for it)",
    SANDBOX_GONE = "the sandbox no longer exists (killed, or killed by its timeout); the message says why and when",
    SANDBOX_UNRESPONSIVE = "the sandbox's daemon did not answer within the host's own deadline (stopped, frozen, "
      .. "too slow), or dispose ran past its deadline; the message names the sandbox (err.sandbox)",
    E2B_EXECUTABLE = "resolveExecutable found no single absolute path in the sandbox",
    E2B_SETUP = "the sandbox's working directories could not be prepared",
  },
  -- ctx.pty (dsh.pty, dsh.pty.session; pty_local, pty_e2b) and the terminal tools.
  pty = {
    OWNER_NOT_LIVE = "the owner was closed (or its signal aborted)",
    NO_BACKEND = "no backend of the session type is registered",
    DUPLICATE_BACKEND = "a backend of that type is registered already",
    DUPLICATE_NAME = "the owner has (or is spawning) a session of that name",
    NO_SESSION = "no such session (or it was killed)",
    FOREIGN_SESSION = "the session belongs to another owner",
    SEND_ACTIVE = "the session has an active send (one at a time)",
    SERVICE_DISPOSING = "the PTY service is being disposed",
    PTY_CLOSING = "the session (or its terminal) is being closed",
    PTY_EXITED = "the shell has exited",
    PTY_ABORTED = "a send's signal aborted before the write",
    PTY_STARTUP = "the shell exited or never became ready at startup",
    PTY_TRANSPORT = "invalid UTF-8 input, or the terminal's connection was lost",
    PTY_SIGNAL = "no foreground group to signal, or SIGKILL aimed at the shell",
    PTY_CLEANUP = "closing left processes behind (named in the message)",
    PTY_BACKEND_CLEANUP = "startup failed and so did its cleanup (.spawnError and .cleanupError)",
    PTY_DISPOSE = "disposal could not close every session (.errors lists each)",
    TERMINAL_NO_AGENT = "a terminal tool was called without an initiating agent",
    TERMINAL_UNAVAILABLE = "the context has no ctx.pty",
    TERMINAL_FAILED = "a terminal tool's call failed without a code of its own",
  },
  -- ctx.lsp (dsh.lsp; lsp_e2b, lsp_local; the lsp tool). Aborts are ABORTED
  -- (err.reason the exact reason), opts.timeoutMs is TIMEOUT.
  lsp = {
    LSP_UNAVAILABLE = "no provider handles the file's extension, or ctx.lsp or its dependencies are missing",
    LSP_INVALID_PROVIDER = "a provider's registration is malformed",
    LSP_CONFLICT = "a provider's id or one of its extensions is already registered",
    LSP_DISPOSED = "the seam or the provider is disposed (or disposing)",
    LSP_UNSUPPORTED_OPERATION = "the server lacks the capability (or answered \"method not found\")",
    LSP_MALFORMED_RESPONSE = "the server's answer has the wrong shape",
    LSP_WORKSPACE_REQUIRED = "the query has no workspaceRoot (the session no working directory)",
    LSP_INVALID_WORKSPACE = "the workspace root does not resolve to a directory",
    LSP_INVALID_SOURCE = "the file is outside the workspace, not regular, too big or not UTF-8",
    LSP_READER_FAILED = "the source reader broke its protocol or died",
    LSP_SERVER_FAILED = "the server's transport failed (exit, malformed stream, no answer to a cancel)",
    LSP_REQUEST_FAILED = "the server answered with a JSON-RPC error (err.rpcCode)",
    LSP_EDIT_FAILED = "a server's edit was not applied (a file changed since the server saw it, overlapping "
      .. "edits, a write failed); no file was changed",
  },
  -- ctx.codeRuntime (dsh.code_runtime; code_runtime_local, code_runtime_e2b) and the run_code
  -- tool. A program's own failures are results ({error = {kind, message}}), not errors.
  code_runtime = {
    CODE_RUNTIME_SETUP = "the runner could not be provisioned (a runner file, the upload, LuaJIT not found)",
    CODE_RUNTIME_DISPOSED = "the runtime was disposed while its setup ran",
    CODE_RUNTIME_UNAVAILABLE = "run_code: the context has no ctx.codeRuntime",
    CODE_RUN_FAILED = "run_code: the run ended with an error result (err.kind, err.logs)",
  },
  -- make poc (dsh.app.poc): the faults its steps inject on purpose.
  poc = {
    POC_INJECTED = "make poc step 4: the failure injected into a command's publication",
  },
  -- The tool registry (dsh.tools): what a model asked for that is not there.
  tools = {
    TOOL_UNKNOWN = "the model called a tool the registry does not list",
    TOOL_UNAVAILABLE = "the tool needs a service the context does not have (the message names it)",
  },
  -- Host system calls (dsh.core.sysutil): err.errno and the function named in the message.
  sys = {
    NOT_FOUND = "no such file, directory or variable on the host (ENOENT, ENOTDIR)",
    PERMISSION_DENIED = "the host refused the call (EACCES, EPERM)",
    IO_ERROR = "a host system call failed for any other reason",
  },
  -- Host file primitives (dsh.core.hostfs): errno in err.errno. Besides "io" they
  -- use envd's words not_found (ENOENT, ENOTDIR) and permission_denied.
  host = {
    io = "a host file call failed for any other reason",
  },
  -- envd's Connect codes (lower-case), as the wire carries them: answers of
  -- dshd or E2B's envd, and the client's own transport failures (unavailable,
  -- deadline_exceeded, canceled).
  envd = {
    canceled = "the call was aborted (by the client or the peer)",
    unknown = "the peer's failure said no more",
    invalid_argument = "the request was refused as malformed",
    deadline_exceeded = "the call ran past its deadline",
    not_found = "no such process, file or sandbox",
    already_exists = "the file or directory exists",
    permission_denied = "the peer refused the operation",
    resource_exhausted = "a limit of the peer was reached",
    failed_precondition = "the operation does not fit the current state",
    aborted = "the peer aborted the operation",
    out_of_range = "an offset or size outside what exists",
    unimplemented = "the peer does not offer this call (e.g. a dshd extension on stock envd)",
    internal = "the peer failed, or sent something this client cannot read",
    unavailable = "the peer cannot be reached",
    data_loss = "data was lost",
    unauthenticated = "the access token was missing or wrong",
  },
}

-- Families: codes built from another catalogue, each matched by a pattern.
M.FAMILIES = {
  { area = "core", pattern = "^PROC_E[A-Z0-9]+$",
    meaning = "PROC_<status>: a core status of dsh.core.proc (core/include/dsh/errors.h), e.g. PROC_ESYS" },
}

local AREA = {}
for area, codes in pairs(M.CATALOGUE) do
  for code in pairs(codes) do
    assert(AREA[code] == nil, "dsh.errors: " .. code .. " is catalogued twice")
    AREA[code] = area
  end
end

--- The area of a catalogued code ("fs", "envd", ...), or nil when it is not catalogued.
---@param code string
---@return string|nil
function M.known(code)
  if type(code) ~= "string" then return nil end
  local area = AREA[code]
  if area then return area end
  for _, f in ipairs(M.FAMILIES) do
    if code:match(f.pattern) then return f.area end
  end
  return nil
end

-- Reporting codes the catalogue lacks, as they are made (see on_unknown_code).
local SELF = debug.getinfo(1, "S").source
local LIB = SELF:match("^@(.*/)[^/]*$")
local on_unknown

local function in_library(src)
  return LIB ~= nil and src:sub(1, 1) == "@" and src:sub(2, #LIB + 1) == LIB
end

-- Where the error was made: the first frame outside this file (level 3 is M.new's caller).
local function maker()
  local level = 3
  while true do
    local info = debug.getinfo(level, "Sl")
    if not info or info.source ~= SELF then return info end
    level = level + 1
  end
end

--- Call fn(code, where) for every error made with a code the catalogue
-- lacks, where = debug.getinfo of the frame that made it (nil: stop). The
-- spec helpers install one for the whole suite. Returns the previous fn.
---@param fn fun(code:any, where:table|nil)|nil
function M.on_unknown_code(fn)
  local old = on_unknown
  on_unknown = fn
  return old
end

---@class dsh.Error
---@field code string
---@field message string
local Error = {}
Error.__index = Error
Error.__tostring = function(e)
  return e.code .. ": " .. e.message
end

--- A new error. code should be catalogued (see the header).
---@param code string
---@param message string
---@param fields table|nil extra fields copied into the error
---@return dsh.Error
function M.new(code, message, fields)
  if on_unknown and not M.known(code) then on_unknown(code, maker()) end
  local e = { code = code, message = message }
  if fields then
    for k, v in pairs(fields) do
      if e[k] == nil then e[k] = v end
    end
  end
  return setmetatable(e, Error)
end

--- One error for a list of failures: nil for none, the failure itself for
-- one, else an error of code whose message lists every failure and whose
-- .errors holds them all (so none is lost, as AggregateError does).
---@param list dsh.Error[]
---@param code string
---@param what string what failed, e.g. "dsh.context: dispose"
---@return dsh.Error|nil
function M.combine(list, code, what)
  if #list == 0 then return nil end
  if #list == 1 then return list[1] end
  local parts = {}
  for i, e in ipairs(list) do parts[i] = tostring(e.message or e) end
  return M.new(code, string.format("%s: %d failures: %s", what, #list, table.concat(parts, "; ")),
    { errors = list })
end

--- True when v is an error made by M.new.
function M.is(v)
  return getmetatable(v) == Error
end

-- Misuse is reported where the caller made it: at the first stack frame
-- outside dsh's own modules (this directory, providers included), so a
-- message never points inside the library however deep the check sits.

local function caller_level()
  local level, last = 3, 2
  while true do
    local info = debug.getinfo(level, "S")
    if not info then return last end
    if info.what ~= "C" then
      if not in_library(info.source) then return level - 1 end
      last = level - 1
    end
    level = level + 1
  end
end

--- Raise a misuse error naming the module, at the caller's line (see above).
---@param module string e.g. "dsh.fs"
---@param fmt string the rest, starting with the public method: "readText: path must be a string"
function M.misuse(module, fmt, ...)
  error(module .. ": " .. string.format(fmt, ...), caller_level())
end

--- Check an argument's type; raises a misuse error naming module and what
-- ("<module>: <what>: expected <want>, got <type>").
function M.check(module, what, v, want, optional)
  local t = type(v)
  if t == want or (optional and v == nil) then return v end
  error(string.format("%s: %s: expected %s, got %s", module, what, want, t), caller_level())
end

return M
