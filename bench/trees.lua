--- bench/trees.lua: moving trees with ctx.fs (uploadTree, downloadTree),
-- each figure against a baseline measured in the same run. Run by bench/run
-- (LUA_PATH, DSH_BUILD_DIR, DSH_STATE_DIR set); prints one table.
--
--   1 a large file (64 MiB) up and down a local sandbox as a tree, against
--     the same bytes as one file through /files (envd:write_file, read_file)
--   2 many small files (2000 x 4 KiB) up and down, against doing it by hand
--     with GNU tar: the archive made here by tar, through /files, unpacked by
--     the sandbox's tar (and the other way): file creation dominates both
--   3 fs-local: a tree of many small files copied on this host, against
--     `tar -c | tar -x` of the same tree
--
-- Real parts only: a real dshd in a real sandbox, the sandbox's own tar.
local async = require "dsh.async"
local context = require "dsh.context"
local proc = require "dsh.core.proc"
local T = require "report"

local TMP = os.getenv("DSH_BENCH_TMP") or "/tmp"
local LARGE, SMALL_N, SMALL = 64 * 1048576, 2000, 4096
local REPS = 3
local now = T.now

local function progress(fmt, ...) io.stderr:write("bench: ", string.format(fmt, ...), "\n") end

local function sh(script, ...)
  local argv = { "/bin/bash", "-c", script, "_" }
  for _, a in ipairs { ... } do argv[#argv + 1] = tostring(a) end
  local p = assert(proc.spawn { argv = argv, stdout = "pipe", stderr = "inherit" })
  local out = p:read_all()
  local st = p:wait()
  p:close()
  assert(st.exit_code == 0, script)
  return out
end

local function median(fn)
  local s = {}
  for i = 1, REPS do s[i] = fn(i) end
  return T.stats(s).median
end

local function mbs(bytes, secs) return string.format("%.0f MB/s", bytes / secs / 1e6) end
local function ratio(a, b) return string.format("%.2fx the time", a / b) end

local function main()
  local dir = TMP .. "/trees"
  sh('rm -rf -- "$1"; mkdir -p -- "$1/large" "$1/many"; head -c "$2" /dev/urandom > "$1/large/big.bin"; '
    .. 'for i in $(seq 1 "$3"); do head -c "$4" /dev/urandom > "$1/many/f$i"; done', dir, LARGE, SMALL_N, SMALL)
  local ctx = context.new():use(require "dsh.providers.e2b", {}):use(require "dsh.providers.fs_e2b")
  assert(ctx:start())
  local envd = assert(ctx.e2b:getSandbox()).envd
  local base = ctx.e2b.cwd
  T.section("trees (ctx.fs uploadTree/downloadTree, local sandbox)", REPS .. " runs each, median")
  local function by_hand(name, i, bytes)
    if name == "large" then
      local blob = string.rep("x", bytes)
      return function()
        local t0 = now()
        assert(envd:write_file(base .. "/raw" .. i .. ".bin", blob))
        return now() - t0
      end, function()
        local t0 = now()
        assert(#assert(envd:read_file(base .. "/raw" .. i .. ".bin")) == bytes)
        return now() - t0
      end
    end
    return function()
      local t0 = now()
      local archive = sh('tar -c -f - -C "$1" .', dir .. "/" .. name)
      assert(envd:write_file(base .. "/hand" .. i .. ".tar", archive))
      local r = assert(ctx.e2b:exec { "/bin/sh", "-c", 'mkdir -p "$1" && tar -x -p -f "$2" -C "$1"', "_",
        base .. "/hand" .. i, base .. "/hand" .. i .. ".tar" })
      assert(r.exit_code == 0, r.stderr)
      return now() - t0
    end, function()
      sh('rm -rf -- "$1"; mkdir -p -- "$1"', dir .. "/hback")
      local t0 = now()
      local r = assert(ctx.e2b:exec { "/bin/sh", "-c", 'tar -c -f "$2" -C "$1" .', "_", base .. "/" .. name .. i,
        base .. "/out" .. i .. ".tar" })
      assert(r.exit_code == 0, r.stderr)
      local archive = assert(envd:read_file(base .. "/out" .. i .. ".tar"))
      local f = assert(io.open(dir .. "/hand.tar", "wb"))
      f:write(archive)
      f:close()
      sh('tar -x -p -f "$1" -C "$2"', dir .. "/hand.tar", dir .. "/hback")
      return now() - t0
    end
  end
  for _, case in ipairs { { "1", "large", LARGE, "one 64 MiB file", "/files" }, { "2", "many", SMALL_N * SMALL,
    SMALL_N .. " files of 4 KiB", "GNU tar by hand" } } do
    local id, name, bytes, what, how = case[1], case[2], case[3], case[4], case[5]
    progress("%s up and down", what)
    local up = median(function(i)
      local t0 = now()
      assert(ctx.fs:uploadTree(dir .. "/" .. name, base .. "/" .. name .. i))
      return now() - t0
    end)
    local raw_up = median(function(i) return (by_hand(name, i, bytes))() end)
    local down = median(function(i)
      sh('rm -rf -- "$1"', dir .. "/back")
      local t0 = now()
      assert(ctx.fs:downloadTree(base .. "/" .. name .. i, dir .. "/back"))
      return now() - t0
    end)
    local raw_down = median(function(i) return select(2, by_hand(name, i, bytes))() end)
    T.row { row = id, name = "upload, " .. what, value = mbs(bytes, up), baseline = how .. " "
      .. mbs(bytes, raw_up), compare = ratio(up, raw_up) }
    T.row { row = "", name = "download, " .. what, value = mbs(bytes, down), baseline = how .. " "
      .. mbs(bytes, raw_down), compare = ratio(down, raw_down) }
  end
  assert(ctx:dispose())
  progress("fs-local")
  local lctx = context.new():use(require "dsh.providers.fs_local", { root = dir })
  assert(lctx:start())
  local copy = median(function(i)
    local t0 = now()
    assert(lctx.fs:uploadTree(dir .. "/many", dir .. "/copy" .. i))
    return now() - t0
  end)
  local tar = median(function(i)
    local t0 = now()
    sh('mkdir -p -- "$2" && tar -c -C "$1" . | tar -x -p -C "$2"', dir .. "/many", dir .. "/tar" .. i)
    return now() - t0
  end)
  T.row { row = "3", name = "fs-local copy, " .. SMALL_N .. " files of 4 KiB", value = mbs(SMALL_N * SMALL, copy),
    baseline = "tar -c | tar -x " .. mbs(SMALL_N * SMALL, tar), compare = ratio(copy, tar) }
  assert(lctx:dispose())
  sh('rm -rf -- "$1"', dir)
  T.print()
end

async.run(main):await()
