--- Shared spec helpers (loaded by busted --helper and by `require "helpers"`).
--
-- Every spec checks after each test, with before_each(helpers.snapshot) and
-- after_each(helpers.assert_clean) (or helpers.dshd.use_sandbox/use_state,
-- which register them), that since the snapshot:
--   * no dsh object is still open (the loop's registry of core resources),
--     and none was garbage-collected while still open (it leaked, and the
--     registry, being weak, would otherwise forget it);
--   * no fd of this process leaked;
--   * every process group dsh started on this host is gone;
--   * no process runs in a sandbox the spec file uses (use_sandbox);
--   * no error was made with a code missing from dsh.errors.CATALOGUE.
-- Also here: the one `eventually`, the isolated $DSH_STATE_DIR, and the one
-- way to start a context of providers (start_context, with_context).
local loop = require "dsh.core.loop"
local sys = require "dsh.core.sysutil"

local M = {}

M.root = os.getenv("PWD")

-- Every error dsh makes while specs run must carry a catalogued code
-- (dsh.errors.CATALOGUE); assert_clean fails the test that made one that is
-- not. Codes a spec makes itself (fault injection) are the spec's to name.
local unknown_codes = {}

--- True when a chunk's source (debug.getinfo(...).source) is a file under spec/.
function M.is_spec_source(src)
  local path = src:match("^@(.*)$")
  if not path then return false end
  if path:sub(1, 1) ~= "/" then path = M.root .. "/" .. path end
  return path:sub(1, #M.root + 6) == M.root .. "/spec/"
end

require("dsh.errors").on_unknown_code(function(code, at)
  if at and M.is_spec_source(at.source) then return end
  unknown_codes[#unknown_codes + 1] = tostring(code) .. " (made at "
    .. (at and (at.short_src .. ":" .. tostring(at.currentline)) or "?") .. ")"
end)
M.build = os.getenv("DSH_BUILD_DIR") or (M.root .. "/build")

--- Path of a fixture program built by CMake (spec/fixtures/<name>.c).
function M.fixture(name)
  return M.build .. "/bin/fixture-" .. name
end

function M.bin(name)
  return M.build .. "/bin/" .. name
end

--- Open fds of this process (a set of numbers).
function M.fds()
  local lfs = require "lfs"
  local set = {}
  for name in lfs.dir("/proc/self/fd") do
    if name:match("^%d+$") then set[tonumber(name)] = true end
  end
  return set
end

local pid
function M.pid()
  if not pid then
    local f = io.open("/proc/self/stat")
    pid = tonumber(f:read("*l"):match("^(%d+)"))
    f:close()
  end
  return pid
end

-- Leak accounting ------------------------------------------------------------------
-- Every object dsh.core.loop.track()s gets a sentinel whose finaliser runs once
-- the object was collected: if it was never untracked (closed), that is a
-- leak the weak registry alone would not show. Process handles ("proc")
-- have their group id remembered, to check the group is gone.

local track, untrack = loop.track, loop.untrack
local tracked = setmetatable({}, { __mode = "k" }) -- obj -> {open=, what=}
local collected_open = {}                           -- what of each object collected while open
local groups = {}                                   -- pgids started since the snapshot

local function describe_obj(obj, kind)
  local ok, s = pcall(tostring, obj)
  return ok and s or kind
end

loop.track = function(obj, kind)
  track(obj, kind)
  local st = { open = true, what = describe_obj(obj, kind) }
  local sentinel = newproxy(true)
  getmetatable(sentinel).__gc = function()
    if st.open then collected_open[#collected_open + 1] = st.what end
  end
  tracked[obj] = { st = st, sentinel = sentinel }
  if kind == "proc" and type(obj.pid) == "number" and obj.pid > 0 and not st.exempt then
    groups[#groups + 1] = { pgid = obj.pid, st = st }
  end
end

loop.untrack = function(obj)
  untrack(obj)
  local t = tracked[obj]
  if t then t.st.open = false end
end

--- obj (a tracked dsh object, e.g. a proc) lives longer than the test that
-- made it: it leaves the leak checks until it is tracked again.
function M.outlives_test(obj)
  untrack(obj)
  local t = tracked[obj]
  if t then
    t.st.open = false
    t.st.exempt = true
  end
end

--- The objects collected while still open since the snapshot (their
-- tostring), emptied: for a test whose point is to forget objects.
function M.take_collected_open()
  for _ = 1, 3 do collectgarbage() end
  local list = collected_open
  collected_open = {}
  table.sort(list)
  return list
end

local clean_checks = {}

--- Run check() in every assert_clean until the returned function is called
-- (helpers.dshd.use_sandbox checks its sandbox this way).
function M.add_clean_check(check)
  clean_checks[check] = true
  return function() clean_checks[check] = nil end
end

local snapshot, live_before = nil, {}
function M.snapshot()
  require "dsh.async" -- the loop's own fds are not a leak
  collectgarbage()
  collectgarbage()
  collected_open, groups = {}, {}
  snapshot = M.fds()
  live_before = loop.live()
end

--- True when a process group has members: signal 0 reaches the group, or
-- is refused because its members are another user's (EPERM: they exist).
function M.group_alive(pgid)
  local ok, err = sys.kill(-pgid, 0)
  return ok == true or err.code == "PERMISSION_DENIED"
end

--- True when a pid exists and is not a zombie.
function M.pid_alive(p)
  local f = io.open("/proc/" .. p .. "/stat")
  if not f then return false end
  local stat = f:read("*l") or ""
  f:close()
  return not stat:match("^%d+ %b() Z")
end

--- Fails when anything listed in this module's header was left behind
-- since snapshot() (see there). Every check runs (so leftovers are cleaned
-- up and one failure stays one); the failures are reported together.
function M.assert_clean()
  local async = require "dsh.async"
  local failures = {}
  local function fail(msg) failures[#failures + 1] = msg end
  for check in pairs(clean_checks) do
    local ok, err = pcall(check)
    if not ok then fail(tostring(err)) end
  end
  -- let closes that were queued settle, then collect (more than once:
  -- sentinels are finalised a cycle after their objects)
  for _ = 1, 3 do async.step(0) end
  for _ = 1, 3 do collectgarbage() end
  -- counted against the snapshot: what an earlier failed test left is its
  -- failure, not every later test's
  local names = {}
  for kind, n in pairs(loop.live()) do
    if n > (live_before[kind] or 0) then names[#names + 1] = kind .. "=" .. (n - (live_before[kind] or 0)) end
  end
  table.sort(names)
  if #names > 0 then fail("live dsh objects after the test: " .. table.concat(names, ", ")) end
  if #collected_open > 0 then
    fail("dsh objects garbage-collected while still open (never closed): " .. table.concat(collected_open, ", "))
    collected_open = {}
  end
  if #unknown_codes > 0 then
    fail("error codes missing from dsh.errors.CATALOGUE: " .. table.concat(unknown_codes, ", "))
    unknown_codes = {}
  end
  local started, alive = groups, {}
  groups = {}
  M.eventually(function()
    alive = {}
    for _, g in ipairs(started) do
      if not g.st.exempt and M.group_alive(g.pgid) then alive[#alive + 1] = g.pgid .. " (" .. g.st.what .. ")" end
    end
    return #alive == 0
  end, 2000)
  if #alive > 0 then fail("process groups started by the test still have members: " .. table.concat(alive, ", ")) end
  if snapshot then
    local leaked = {}
    for fd in pairs(M.fds()) do
      if not snapshot[fd] then leaked[#leaked + 1] = fd end
    end
    table.sort(leaked)
    snapshot = nil
    if #leaked > 0 then fail("leaked fds: " .. table.concat(leaked, ", ")) end
  end
  if #failures > 0 then error(table.concat(failures, "\n"), 2) end
end

--- A spec's ceiling (the time after which a wait counts as a hang) is
-- what a hang costs, never a guess of how long the thing takes: ceilings
-- given to eventually and helpers.dshd.within are multiplied by this (4, or
-- $DSH_SPEC_CEILING_SCALE), so that a loaded machine does not reach them.
M.CEILING_SCALE = tonumber(os.getenv("DSH_SPEC_CEILING_SCALE") or "") or 4

--- ms as a ceiling: scaled by CEILING_SCALE.
function M.ceiling(ms)
  return ms * M.CEILING_SCALE
end

--- Poll pred (every interval_ms, default 10) until it returns a truthy value
-- or the ceiling timeout_ms (default 5000, scaled: M.ceiling) passes; returns
-- that value, or nil. Drives the loop, inside a task or outside one.
function M.eventually(pred, timeout_ms, interval_ms)
  local async = require "dsh.async"
  local deadline = loop.now_ms() + M.ceiling(timeout_ms or 5000)
  while true do
    local v = pred()
    if v then return v end
    if loop.now_ms() > deadline then return nil end
    async.sleep(interval_ms or 10)
  end
end

-- An isolated state directory --------------------------------------------------------

local saved_state

--- Point $DSH_STATE_DIR at a fresh temporary directory (so specs never touch
-- the user's sandboxes); returns it (also as helpers.state_dir).
function M.isolate_state()
  saved_state = os.getenv("DSH_STATE_DIR")
  M.state_dir = M.tmpdir()
  sys.setenv("DSH_STATE_DIR", M.state_dir)
  return M.state_dir
end

--- Kill every sandbox left in the isolated state directory, remove it and
-- restore $DSH_STATE_DIR.
function M.restore_state()
  if not M.state_dir then return end
  M.run(function()
    local sandbox = require "dsh.sandbox"
    for _, s in ipairs(sandbox.list()) do sandbox.kill(s.id) end
  end)
  M.rm_rf(M.state_dir)
  M.state_dir = nil
  sys.setenv("DSH_STATE_DIR", saved_state)
end

-- Contexts ---------------------------------------------------------------------------

--- A started context of providers: each entry is a provider module or
-- {provider, config}. When a setup fails, what started is disposed and this
-- raises at the caller, naming the failure. Call inside a task.
function M.start_context(list)
  local ctx = require("dsh.context").new()
  for _, p in ipairs(list) do
    if p.setup then ctx:use(p) else ctx:use(p[1], p[2]) end
  end
  local ok, err = ctx:start()
  if not ok then
    ctx:dispose()
    error("the context did not start: " .. tostring(err), 2)
  end
  return ctx
end

--- Run fn(ctx) on start_context(list); the context is disposed afterwards
-- also when fn fails, and a failed disposal fails too. Returns fn's value.
function M.with_context(list, fn)
  local ctx = M.start_context(list)
  local ok, res = xpcall(fn, debug.traceback, ctx)
  local dok, derr = ctx:dispose()
  if not ok then error(res, 0) end
  assert(dok, "dispose failed: " .. tostring(derr))
  return res
end

--- Run fn as a dsh task and wait for it (so specs read straight-line).
function M.run(fn)
  local async = require "dsh.async"
  return async.run(fn):await()
end

--- Read a whole file (nil when missing).
function M.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

function M.write_file(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

--- A fresh temporary directory (removed by M.rm_rf).
function M.tmpdir()
  local p = io.popen("mktemp -d /tmp/dsh-spec.XXXXXX")
  local dir = p:read("*l")
  p:close()
  return dir
end

function M.rm_rf(path)
  assert(path and #path > 5 and path:sub(1, 1) == "/", "refusing to remove " .. tostring(path))
  os.execute("rm -rf '" .. path .. "'")
end

return M
