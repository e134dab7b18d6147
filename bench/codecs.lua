--- bench/codecs.lua: the codec rows of the table, from build/bin/dsh-bench-codecs
-- (bench/codecs.c: each codec in GB/s against memcpy of 64 KiB chunks,
-- measured in the same run). Run by bench/run.
local proc = require "dsh.core.proc"
local async = require "dsh.async"
local T = require "report"

local BUILD = os.getenv("DSH_BUILD_DIR") or "build"

local function main()
  local p = assert(proc.spawn { argv = { BUILD .. "/bin/dsh-bench-codecs" }, env = { PATH = "/usr/bin:/bin" } })
  local out = p:read_all()
  local st = p:wait()
  p:close()
  assert(st.exit_code == 0, "dsh-bench-codecs failed: " .. tostring(st.exit_code or st.signal))
  local head = out:match("^dsh codecs: ([^\n]*)")
  T.section("codecs (C core)", head)
  local base
  for name, gbps, ratio in out:gmatch("\n(%S[^\n]-)%s+([%d.]+)%s+([%d.]+)") do
    gbps, ratio = tonumber(gbps), tonumber(ratio)
    if not base then
      base = gbps
    else
      T.row { row = "", name = name, value = string.format("%.2f GB/s", gbps),
        baseline = string.format("memcpy 64 KiB chunks %.2f GB/s", base),
        compare = string.format("%.2fx of memcpy", ratio) }
    end
  end
  assert(base, "no rows in dsh-bench-codecs' output")
  T.print()
end

async.run(main):await()
