--- dsh.fs._errors: how an fs call goes wrong — the failure words of the
-- seam and of its backend contract, misuse of a call's options, aborts (and
-- the onStep hook, whose failures are the caller's).
--
-- A backend (providers/fs_local, providers/fs_e2b) reports a failure as
-- nil, err with err.code one of BACKEND_CODES and err.message the detail
-- (e.g. "open: Permission denied"); each backend maps its own world's words
-- (errno, envd's Connect codes) to these at its boundary. The seam then
-- names the operation and the path ('cannot read "a.txt": open: Permission
-- denied') and keeps the backend's error as err.cause. Codes and messages
-- of the seam's own failures (FS_NOT_FOUND, FS_NOT_TEXT, ...) are made here
-- too, so every one of them is spelled once.
local async = require "dsh.async"
local errors = require "dsh.errors"

local M = {}
local MOD = "dsh.fs"

--- The codes a backend may return; any other code counts as FS_IO_ERROR.
M.BACKEND_CODES = {
  FS_NOT_FOUND = "nothing is there",
  FS_PERMISSION_DENIED = "the backend's world refused",
  FS_ABORTED = "the call was aborted (its signal fired)",
  FS_DIRECTORY_NOT_EMPTY = "rmdir, or a rename onto a directory, met a directory with entries",
  FS_IO_ERROR = "any other failure",
}

--- Codes of the world below the backend that reach the caller unchanged
-- (with the seam's message): the sandbox is gone for good, does not answer
-- in time, or the service that owns it was disposed. They are not I/O errors.
M.PASSED_CODES = { SANDBOX_GONE = true, SANDBOX_UNRESPONSIVE = true, DISPOSED = true }

function M.new(code, msg, fields)
  return errors.new(code, msg, fields)
end

function M.aborted(op)
  return errors.new("FS_ABORTED", op .. " aborted")
end

function M.missing(display)
  return errors.new("FS_NOT_FOUND", string.format('"%s" does not exist', display))
end

function M.not_regular(display)
  return errors.new("FS_NOT_REGULAR_FILE", string.format('"%s" is not a regular file', display))
end

function M.not_directory(display)
  return errors.new("FS_NOT_DIRECTORY", string.format('"%s" is not a directory', display))
end

--- FS_STALE_VERSION: the file changed since it was read; gone: it no longer
-- exists ("missing": it does not exist, and no version was given).
function M.stale(display, gone)
  local msg = gone == "missing" and '"%s" does not exist' or gone and '"%s" no longer exists'
    or '"%s" has changed since it was read'
  return errors.new("FS_STALE_VERSION", string.format(msg, display))
end

--- The seam's error for a failed backend call of operation op on display.
-- A read-only file system (EROFS, in any backend's words) is the world
-- refusing: FS_PERMISSION_DENIED saying so, not the temporary file's name.
---@param err table|nil the backend's error (nil or {} when the failure was an abort)
---@param signal dsh.AbortSignal|nil an abort wins over whatever the backend said
function M.map(op, display, err, signal)
  if signal and signal.aborted then return M.aborted(op) end
  if type(err) ~= "table" then err = { message = tostring(err) } end
  if err.code == "FS_ABORTED" then return M.aborted(op) end
  if tostring(err.message):lower():find("read-only file system", 1, true) then
    return errors.new("FS_PERMISSION_DENIED", string.format('cannot %s "%s": the file system is read-only', op,
      display), { cause = err })
  end
  local code = (M.BACKEND_CODES[err.code] or M.PASSED_CODES[err.code]) and err.code or "FS_IO_ERROR"
  local detail = tostring(err.message or err.code or "unknown error")
  return errors.new(code, string.format('cannot %s "%s": %s', op, display, detail), { cause = err })
end

--- True when opts.signal has fired.
function M.is_aborted(opts)
  return opts.signal ~= nil and opts.signal.aborted
end

--- Check the opts table every public method takes (misuse raises, naming method).
---@return dsh.FsOpts
function M.check_opts(method, opts)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    errors.misuse(MOD, "%s: opts must be a table, got %s", method, type(opts))
  end
  if opts.signal ~= nil and not async.is_signal(opts.signal) then
    errors.misuse(MOD, "%s: opts.signal must be a dsh.async signal", method)
  end
  if opts.cwd ~= nil and type(opts.cwd) ~= "string" then
    errors.misuse(MOD, "%s: opts.cwd must be a string, got %s", method, type(opts.cwd))
  end
  if opts.onStep ~= nil and type(opts.onStep) ~= "function" then
    errors.misuse(MOD, "%s: opts.onStep must be a function", method)
  end
  return opts
end

--- Report a step to opts.onStep; a hook that raises propagates (after the
-- caller's cleanup), since it is the caller's bug, not an I/O failure.
function M.step(opts, name, detail)
  if opts.onStep then opts.onStep(name, detail or {}) end
end

return M
