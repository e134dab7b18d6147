--- bench/report.lua: the one table `make bench` prints.
--
-- Each bench script adds its rows here (T.section, T.row). When bench/run
-- sets DSH_BENCH_ROWS, every row is also appended to that file as a JSON line
-- and bench/run prints the whole file as one table at the end
-- (`luajit bench/report.lua FILE`); a script run on its own prints its rows
-- itself (T.print). Also the statistics and the clock the scripts share.
local ffi = require "ffi"
local json = require "dsh.json"

local T = {}

ffi.cdef [[
struct dsh_bench_report_ts { long tv_sec; long tv_nsec; };
int clock_gettime(int clk, struct dsh_bench_report_ts *ts);
]]
local ts = ffi.new("struct dsh_bench_report_ts")

--- Seconds on CLOCK_MONOTONIC.
---@return number
function T.now()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

--- Median, percentiles, min and max of a list of numbers (not modified).
---@param samples number[]
---@return table
function T.stats(samples)
  local s = {}
  for i, v in ipairs(samples) do s[i] = v end
  table.sort(s)
  local n = #s
  if n == 0 then return { n = 0, median = 0, p50 = 0, p90 = 0, p99 = 0, min = 0, max = 0 } end
  local function pct(p) return s[math.max(1, math.ceil(n * p))] end
  local med = n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
  return { n = n, median = med, p50 = med, p90 = pct(0.9), p99 = pct(0.99), min = s[1], max = s[n] }
end

--- "median [p90]" in milliseconds.
function T.ms(s) return string.format("%.3f ms [%.3f]", s.median, s.p90) end

local rows, file = {}, os.getenv("DSH_BENCH_ROWS")
local section = "?"

--- Rows added from now on belong to this section (printed as a heading).
---@param name string
---@param note string|nil shown next to the heading (sample counts, versions)
function T.section(name, note)
  section = name
  T.row { heading = true, name = name, note = note }
end

--- One line of the table. Fields: row (a short id, "" for a sub-line), name,
--- value, baseline (with its figure), compare (value against baseline),
--- target, ok (true: met, false: MISSED, nil: no target judged).
---@param r table
function T.row(r)
  r.section = r.section or section
  rows[#rows + 1] = r
  if file then
    local f = assert(io.open(file, "a"))
    f:write(json.encode(r), "\n")
    f:close()
  end
end

local W = { 4, 54, 26, 42, 22 }

local function fmt(c)
  return (string.format("%-" .. W[1] .. "s%-" .. W[2] .. "s %-" .. W[3] .. "s %-" .. W[4] .. "s %-" .. W[5]
    .. "s %s", c[1] or "", c[2] or "", c[3] or "", c[4] or "", c[5] or "", c[6] or ""):gsub("%s+$", ""))
end

--- Print rows (default: the ones added in this process) as one table.
---@param list table[]|nil
---@param header string|nil
function T.print(list, header)
  list = list or rows
  if file and list == rows then return end -- bench/run prints them all at the end
  print("")
  if header then print(header) end
  print(fmt { "#", "measurement", "value", "baseline (same run)", "vs baseline", "target" })
  local missed = 0
  for _, l in ipairs(list) do
    if l.heading then
      print(l.note and (l.name .. " — " .. l.note) or l.name)
    else
      local target = l.target or ""
      if l.ok ~= nil then target = target .. (l.ok and "  met" or "  MISSED") end
      if l.ok == false then missed = missed + 1 end
      print(fmt { l.row, l.name, l.value, l.baseline, l.compare, target })
    end
  end
  io.stdout:flush()
  return missed
end

-- `luajit bench/report.lua FILE [HEADER]`: print the rows bench/run collected
-- (required, `...` is the module's name).
if ... ~= "report" then
  local path, header = arg[1], arg[2]
  local list = {}
  for l in assert(io.open(path)):lines() do
    if l ~= "" then list[#list + 1] = json.decode(l) end
  end
  file = nil
  local missed = T.print(list, header)
  print(string.format("%d rows with a target missed", missed))
end

return T
