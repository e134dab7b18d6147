--- dsh.app.cli: the `dsh` command line (bin/dsh).
--
--   dsh sandbox create [--timeout-ms N] [--on-timeout pause|kill] [--no-network]
--                      [--max-processes N] [--memory-mb N] [--cpus X]
--                      [--max-open-files N] [--disk-mb N]
--                      [--env K=V]... [--metadata K=V]...
--   dsh sandbox list [--cloud] [--state running|paused] [--metadata K=V]...
--   dsh sandbox metrics [--cloud] ID
--   dsh sandbox connect ID | pause ID | kill ID
--   dsh exec [--cwd DIR] [--env K=V]... [--timeout-ms N] ID -- CMD [ARGS...]
--   dsh poc [--cloud] [--no-network]
--   dsh shell [--new] [--cwd DIR] ID      (dsh.app.shell: an interactive terminal; Ctrl-] detaches)
--   dsh help                              (the usage: every command and flag)
--
-- Output is short: ids and states on stdout, problems on stderr with a
-- non-zero exit status (2 for bad usage). exec streams the command's output
-- as it arrives, forwards Ctrl-C (SIGINT) and SIGTERM to the command's
-- process group, returns at the command's exit (what it left in the
-- background keeps running) and exits with its status as a shell gives
-- them: 128+N when a signal N ended it, 124 when --timeout-ms ran out (the
-- command's processes were killed), 127 for a command that is not there,
-- 126 for one that cannot be run, each but the plain statuses with a
-- one-line message on stderr.
local async = require "dsh.async"
local signals = require "dsh.signals"

local M = {}

M.USAGE = [[
usage: dsh sandbox create [--timeout-ms N] [--on-timeout pause|kill] [--no-network]
                          [--max-processes N] [--memory-mb N] [--cpus X]
                          [--max-open-files N] [--disk-mb N]
                          [--env K=V]... [--metadata K=V]...
       dsh sandbox list [--cloud] [--state running|paused] [--metadata K=V]...
       dsh sandbox metrics [--cloud] ID
       dsh sandbox connect|pause|kill ID
       dsh exec [--cwd DIR] [--env K=V]... [--timeout-ms N] ID -- CMD [ARGS...]
       dsh poc [--cloud] [--no-network]
       dsh shell [--new] [--cwd DIR] ID
       dsh help
]]
local USAGE = M.USAGE

--- The flags of each command (parse's spec); the usage above lists every one.
M.FLAGS = {
  ["sandbox create"] = { ["timeout-ms"] = "value", ["on-timeout"] = "value", ["no-network"] = "flag",
    env = "list", metadata = "list", ["max-processes"] = "value", ["memory-mb"] = "value", cpus = "value",
    ["max-open-files"] = "value", ["disk-mb"] = "value" },
  ["sandbox list"] = { cloud = "flag", state = "list", metadata = "list" },
  ["sandbox metrics"] = { cloud = "flag" },
  exec = { cwd = "value", env = "list", ["timeout-ms"] = "value" },
  poc = { cloud = "flag", ["no-network"] = "flag" },
}

local function fail(msg)
  io.stderr:write("dsh: ", msg, "\n")
  return 1
end

-- A bad command line (an unknown option, a bad value): status 2.
local function bad(msg)
  io.stderr:write("dsh: ", msg, "\n")
  return 2
end

-- Bad usage: the message, then the usage of the command asked for (all of
-- it without one); status 2.
local function usage_error(msg, which)
  if msg then io.stderr:write("dsh: ", msg, "\n") end
  if not which then
    io.stderr:write(USAGE)
    return 2
  end
  local out, keep = {}, false
  for line in USAGE:gmatch("[^\n]+") do -- each line: "usage: " or 7 spaces, then the text
    local body = line:sub(8)
    if body:sub(1, 4) == "dsh " then keep = body:sub(1, #which + 5) == "dsh " .. which .. " " end
    if keep then out[#out + 1] = (#out == 0 and "usage: " or "       ") .. body end
  end
  io.stderr:write(table.concat(out, "\n"), "\n")
  return 2
end

-- Parses --flags into opts; returns opts and the remaining positional words.
local function parse(args, spec)
  local opts, rest = {}, {}
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "--" then
      for j = i + 1, #args do rest[#rest + 1] = args[j] end
      opts["--"] = true
      break
    elseif a:sub(1, 2) == "--" then
      local name, value = a:match("^%-%-([%w-]+)=(.*)$")
      name = name or a:sub(3)
      local kind = spec[name]
      if not kind then return nil, "unknown option --" .. name end
      if kind == "flag" then
        opts[name] = true
      else
        if value == nil then
          i = i + 1
          value = args[i]
          if value == nil then return nil, "option --" .. name .. " needs a value" end
        end
        if kind == "list" then
          opts[name] = opts[name] or {}
          table.insert(opts[name], value)
        else
          opts[name] = value
        end
      end
    else
      rest[#rest + 1] = a
    end
    i = i + 1
  end
  return opts, rest
end

local function kv_map(list, what)
  local out = {}
  for _, item in ipairs(list or {}) do
    local k, v = item:match("^([^=]+)=(.*)$")
    if not k then return nil, what .. " must be KEY=VALUE: " .. item end
    out[k] = v
  end
  return out
end

local function number_opt(v, name)
  if v == nil then return nil end
  local n = tonumber(v)
  if not n or n <= 0 or n % 1 ~= 0 then return nil, "--" .. name .. " must be a positive integer" end
  return n
end

-- `sandbox list` and `sandbox metrics`, on local sandboxes or (--cloud,
-- E2B_API_KEY) E2B's, through dsh.providers.e2b's list and metrics.
local function inventory_cmd(sub, args)
  local e2b = require "dsh.providers.e2b"
  local opts, rest = parse(args, M.FLAGS["sandbox " .. sub])
  if not opts then return bad(rest) end
  local cfg = { backend = opts.cloud and "cloud" or "local" }
  if sub == "list" then
    if #rest > 0 then return bad("unexpected argument " .. rest[1]) end
    local meta, merr = kv_map(opts.metadata, "--metadata")
    if not meta then return bad(merr) end
    for _, st in ipairs(opts.state or {}) do
      if st ~= "running" and st ~= "paused" then return bad("--state must be running or paused") end
    end
    local ok, list, err = pcall(e2b.list, cfg, { state = opts.state, metadata = meta })
    if not ok then return fail((tostring(list):gsub("^.-dsh%-e2b: ", ""))) end
    if not list then return fail(tostring(err)) end
    if #list == 0 then
      print("(no sandboxes)")
      return 0
    end
    print(string.format("%-20s  %-7s  %-20s  %s", "ID", "STATE", "CREATED", "METADATA"))
    for _, s in ipairs(list) do
      local kv = {}
      for k, v in pairs(s.metadata or {}) do kv[#kv + 1] = k .. "=" .. v end
      table.sort(kv)
      print(string.format("%-20s  %-7s  %-20s  %s", s.sandboxId, s.state, s.startedAt or "", table.concat(kv, ",")))
    end
    return 0
  end
  local id = rest[1]
  if not id or #rest > 1 then return usage_error(nil, "sandbox metrics") end
  local ok, samples, err = pcall(e2b.metrics, cfg, id)
  if not ok then return fail((tostring(samples):gsub("^.-dsh%-e2b: ", ""))) end
  if not samples then return fail(tostring(err)) end
  local function n(v, fmt) return v == nil and "-" or string.format(fmt, v) end
  print(string.format("%-20s  %5s  %6s  %12s  %12s  %12s  %12s", "TIME", "CPUS", "CPU%", "MEM-USED", "MEM-TOTAL",
    "DISK-USED", "DISK-TOTAL"))
  for _, m in ipairs(samples) do
    print(string.format("%-20s  %5s  %6s  %12s  %12s  %12s  %12s", m.timestamp or "-", n(m.cpuCount, "%g"),
      n(m.cpuUsedPct, "%.1f"), n(m.memUsed, "%d"), n(m.memTotal, "%d"), n(m.diskUsed, "%d"), n(m.diskTotal, "%d")))
  end
  return 0
end

local function sandbox_cmd(args)
  local sandbox = require "dsh.sandbox"
  local sub = table.remove(args, 1)
  if sub == "create" then
    local opts, rest = parse(args, M.FLAGS["sandbox create"])
    if not opts then return bad(rest) end
    if #rest > 0 then return bad("unexpected argument " .. rest[1]) end
    local timeout, terr = number_opt(opts["timeout-ms"], "timeout-ms")
    if terr then return bad(terr) end
    local max_processes, perr = number_opt(opts["max-processes"], "max-processes")
    if perr then return bad(perr) end
    local memory_mb, merr0 = number_opt(opts["memory-mb"], "memory-mb")
    if merr0 then return bad(merr0) end
    local max_open_files, oerr = number_opt(opts["max-open-files"], "max-open-files")
    if oerr then return bad(oerr) end
    local disk_mb, derr = number_opt(opts["disk-mb"], "disk-mb")
    if derr then return bad(derr) end
    local cpus = opts.cpus and tonumber(opts.cpus)
    if opts.cpus and (not cpus or cpus <= 0) then return bad("--cpus must be a positive number") end
    local envs, eerr = kv_map(opts.env, "--env")
    if not envs then return bad(eerr) end
    local meta, merr = kv_map(opts.metadata, "--metadata")
    if not meta then return bad(merr) end
    local on_timeout = opts["on-timeout"]
    if on_timeout and on_timeout ~= "pause" and on_timeout ~= "kill" then
      return bad("--on-timeout must be pause or kill")
    end
    local copts = { timeoutMs = timeout, onTimeout = on_timeout, network = not opts["no-network"], envs = envs,
      metadata = meta, maxProcesses = max_processes, memoryMb = memory_mb, cpus = cpus,
      maxOpenFiles = max_open_files, diskMb = disk_mb }
    local ok, sb, err = pcall(sandbox.create, copts)
    if not ok then -- a limit out of range: say it with the option's name
      local msg = tostring(sb):gsub("^dsh%.sandbox: create: ", "")
      for k, flag in pairs { maxProcesses = "--max-processes", memoryMb = "--memory-mb", cpus = "--cpus",
        maxOpenFiles = "--max-open-files", diskMb = "--disk-mb" } do
        msg = msg:gsub("^" .. k .. " ", flag .. " ")
      end
      return bad(msg)
    end
    if not sb then return fail(tostring(err)) end
    print(sb.id)
    sb:close()
    return 0
  elseif sub == "list" or sub == "metrics" then
    return inventory_cmd(sub, args)
  elseif sub == "connect" or sub == "pause" or sub == "kill" then
    local id = args[1]
    if not id or #args > 1 then return bad("usage: dsh sandbox " .. sub .. " ID") end
    if sub == "connect" then
      local sb, err = sandbox.connect(id)
      if not sb then return fail(tostring(err)) end
      sb:close()
      print(id .. " running")
    else
      local ok, err = sandbox[sub](id)
      if not ok then return fail(tostring(err)) end
      print(id .. (sub == "pause" and " paused" or " killed"))
    end
    return 0
  end
  if sub == nil then return usage_error(nil, "sandbox") end
  return usage_error("unknown sandbox command " .. sub .. " (create, list, metrics, connect, pause or kill)",
    "sandbox")
end

-- A start that failed as a shell's would: 127 for a command that is not
-- there, 126 for one that cannot be run (dshd spawns without a shell).
local function start_failed(cmd, err)
  local why = tostring(err and err.message or err)
  if why:find("No such file or directory", 1, true) then
    io.stderr:write("dsh: exec: ", cmd, ": command not found\n")
    return 127
  elseif why:find("Permission denied", 1, true) then
    io.stderr:write("dsh: exec: ", cmd, ": permission denied (not an executable file)\n")
    return 126
  end
  return fail("exec: " .. why)
end

-- The status of an end event, as a shell gives it, with a line on stderr
-- when a signal ended the command (none for SIGINT and SIGPIPE, as bash).
local function end_status(ev, sb)
  if ev.signal_number then
    local n = ev.signal_number
    local name = signals.name(n) or ("signal " .. n)
    if n ~= 2 and n ~= 13 then
      local note = ev.core_dumped and " (core dumped)" or ""
      local mem = sb.limits and sb.limits.memoryMb
      if n == 9 and mem then note = " (also how a process over the sandbox's " .. mem .. " MiB of memory ends)" end
      io.stderr:write("dsh: exec: the command was killed by ", name, note, "\n")
    end
    return 128 + n
  end
  if not ev.exited then
    io.stderr:write("dsh: exec: the command ended without an exit status (", tostring(ev.status), ")\n")
    return 255
  end
  return ev.exit_code
end

local function exec_cmd(args)
  local sandbox = require "dsh.sandbox"
  local loop = require "dsh.core.loop"
  local opts, rest = parse(args, M.FLAGS.exec)
  if not opts then return bad(rest) end
  local id = table.remove(rest, 1)
  if not id or not opts["--"] or #rest == 0 then return usage_error(nil, "exec") end
  local envs, eerr = kv_map(opts.env, "--env")
  if not envs then return bad(eerr) end
  local timeout, terr = number_opt(opts["timeout-ms"], "timeout-ms")
  if terr then return bad(terr) end
  local sb, err = sandbox.connect(id)
  if not sb then return fail(tostring(err)) end
  local cmd = table.remove(rest, 1)
  local p, serr = sb.envd:start { cmd = cmd, args = rest, envs = envs, cwd = opts.cwd, timeout_ms = timeout }
  if not p then
    sb:close()
    if serr and serr.code == "invalid_argument" then return start_failed(cmd, serr) end
    return fail(tostring(serr))
  end
  p:end_at_exit()
  local watchers = {}
  for _, sig in ipairs { 2, 15 } do
    watchers[#watchers + 1] = loop.on_signal(sig, function(n)
      async.run(function() p:signal(n == 2 and "SIGINT" or "SIGTERM", { group = true }) end)
    end)
  end
  local status = 0
  while true do
    local ev, perr = p:next()
    if not ev then
      if perr and perr.code == "deadline_exceeded" and timeout then
        io.stderr:write("dsh: exec: timed out after ", timeout, " ms; the command's processes were killed\n")
        status = 124
      elseif perr then
        status = fail("exec: " .. tostring(perr))
      end
      break
    end
    if ev.type == "data" then
      local out = ev.stream == "stderr" and io.stderr or io.stdout
      out:write(ev.data)
      out:flush()
    elseif ev.type == "end" then
      status = end_status(ev, sb)
    end
  end
  for _, w in ipairs(watchers) do w:close() end
  p:close()
  sb:close()
  return status
end

--- Run the command line; returns the exit status.
function M.main(argv)
  local args = {}
  for i = 1, #(argv or {}) do args[i] = argv[i] end
  local cmd = table.remove(args, 1)
  local code
  local ok, err = pcall(function()
    code = async.run(function()
      if cmd == "sandbox" then return sandbox_cmd(args) end
      if cmd == "exec" then return exec_cmd(args) end
      if cmd == "poc" then return require("dsh.app.poc").main(args) end
      if cmd == "shell" then return require("dsh.app.shell").main(args) end
      if cmd == "help" or cmd == "--help" or cmd == "-h" then
        io.stdout:write(USAGE)
        return 0
      end
      if cmd == nil then return usage_error() end
      return usage_error("unknown command " .. cmd .. " (sandbox, exec, shell, poc or help)")
    end):await()
  end)
  if not ok then return fail(tostring(err)) end
  io.stdout:flush()
  return code or 0
end

return M
