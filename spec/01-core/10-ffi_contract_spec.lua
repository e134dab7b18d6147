-- The FFI contract: the declarations LuaJIT loads are the ones libdsh.so was
-- compiled from, and the drift check (dsh.core._ffi.check against the build's
-- probe) would catch a number, a layout or a function changed on one side.
local F = require "dsh.core._ffi"
local check = require "dsh.core._ffi.check"
local helpers = require "helpers"
local lfs = require "lfs"

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  assert(f:write(s))
  assert(f:close())
end

local function probe()
  local p = assert(io.popen(helpers.bin("dsh-ffi-probe")))
  local text = p:read("*a")
  assert(p:close(), "dsh-ffi-probe failed")
  return text
end

local function lines(t)
  return table.concat(t, "\n")
end

-- Replaces exactly one occurrence of old in s.
local function alter(s, old, new)
  local i, j = s:find(old, 1, true)
  assert(i, "not in the declarations: " .. old)
  assert(not s:find(old, j + 1, true), "more than once in the declarations: " .. old)
  return s:sub(1, i - 1) .. new .. s:sub(j + 1)
end

-- The check in a fresh LuaJIT (ffi.cdef cannot be undone): the library, the
-- probe's facts, and the declarations: the core's, then the libc parts.
local DRIVER = [[
local ffi = require "ffi"
local check = require "dsh.core._ffi.check"
local function read(p) local f = assert(io.open(p, "rb")) local s = f:read("*a") f:close() return s end
for i = 3, #arg do ffi.cdef(read(arg[i])) end
local lib = ffi.load(arg[1])
local exports = assert(check.exports(arg[1]))
for _, line in ipairs(check.compare(ffi, lib, check.parse_facts(read(arg[2])), exports)) do print(line) end
]]

local tmp
-- hostfs: the text of dsh.core._ffi.hostfs to use (the other libc part is as loaded)
local function run_check(cdefs, hostfs, facts)
  local paths = {}
  for name, text in pairs { driver = DRIVER, cdefs = cdefs, hostfs = hostfs, sys = require "dsh.core._ffi.sys",
    facts = facts } do
    paths[name] = tmp .. "/" .. name
    write(paths[name], text)
  end
  local cmd = string.format("luajit %s %s %s %s %s %s 2>&1", paths.driver, F.path, paths.facts, paths.cdefs,
    paths.hostfs, paths.sys)
  local p = assert(io.popen(cmd))
  local out = p:read("*a")
  local ok = p:close()
  assert(ok, "the check itself failed:\n" .. out)
  local problems = {}
  for l in out:gmatch("[^\n]+") do problems[#problems + 1] = l end
  return problems
end

describe("the FFI contract", function()
  local facts_text, facts, hostfs

  setup(function()
    facts_text = probe()
    facts = check.parse_facts(facts_text)
    hostfs = require "dsh.core._ffi.hostfs"
    tmp = os.tmpname()
    os.remove(tmp)
    assert(lfs.mkdir(tmp))
  end)

  teardown(function()
    if tmp then
      for name in lfs.dir(tmp) do
        if name ~= "." and name ~= ".." then os.remove(tmp .. "/" .. name) end
      end
      lfs.rmdir(tmp)
    end
  end)

  it("probes every struct, constant and function of the headers", function()
    local seen = {}
    for _, f in ipairs(facts) do
      seen[f.kind .. " " .. f.name .. (f.field and ("." .. f.field) or "")] = f.value or true
    end
    assert.equal(-17, seen["const DSH_ECANCELED"])
    assert.equal(3, seen["const DSH_ENVD_END"])
    assert.equal(22, seen["const DSH_EV_HTTP_DONE"])
    assert.is_number(seen["size struct dsh_proc_opts"])
    assert.is_number(seen["offset struct dsh_http_req_opts.max_header_bytes"])
    assert.is_number(seen["offset struct dsh_hostfs_statx.stx_mtime"])
    assert.equal(3, seen["const DSH_SYS_ESRCH"])
    assert.is_true(seen["func dsh_http_cancel"])
    assert.is_true(seen["func dsh_ffi_cdefs"])
    -- internal helpers are not part of it
    assert.is_nil(seen["func dsh_fail"])
    assert.is_nil(seen["func dsh_buf_append"])
    assert.is_nil(seen["func dsh_loop_push"])
  end)

  it("holds for the declarations dsh.core._ffi loaded", function()
    local exports = assert(check.exports(F.path))
    assert.equal("", lines(check.compare(F.ffi, F.C, facts, exports)))
  end)

  it("exports exactly the declared functions, and no internal helper", function()
    local declared, exported = {}, {}
    for _, f in ipairs(facts) do
      if f.kind == "func" then declared[#declared + 1] = f.name end
    end
    for _, name in ipairs(assert(check.exports(F.path))) do exported[#exported + 1] = name end
    table.sort(declared)
    table.sort(exported)
    assert.same(declared, exported)
    for _, internal in ipairs { "dsh_fail", "dsh_buf_append", "dsh_buf_write_fd", "dsh_proc_launch",
      "dsh_loop_push", "dsh_loop_ev", "dsh_envd_match_data" } do
      local ok, err = pcall(function() return F.C[internal] end)
      assert.is_false(ok, internal .. " is reachable from Lua")
      assert.matches("missing declaration", err)
    end
  end)

  it("passes when both sides agree (the control run)", function()
    assert.equal("", lines(run_check(F.cdefs, hostfs, facts_text)))
  end)

  it("fails when a status number differs on one side", function()
    local cdefs = alter(F.cdefs, "DSH_ECANCELED = -17", "DSH_ECANCELED = -99")
    assert.equal("DSH_ECANCELED: C value -17, Lua value -99", lines(run_check(cdefs, hostfs, facts_text)))
  end)

  it("fails when a struct layout differs on one side", function()
    local cdefs = alter(F.cdefs, "uint32_t max_buffer_bytes;\n  uint32_t max_header_bytes;",
      "uint64_t max_buffer_bytes;\n  uint32_t max_header_bytes;")
    assert.equal("struct dsh_http_req_opts: C size 96, Lua size 104\n"
      .. "struct dsh_http_req_opts.max_header_bytes: C offset 92, Lua offset 96",
      lines(run_check(cdefs, hostfs, facts_text)))
    cdefs = alter(F.cdefs, "int32_t kind;\n  int32_t stream;", "int32_t stream;\n  int32_t kind;")
    assert.equal("struct dsh_envd_event.kind: C offset 0, Lua offset 4\n"
      .. "struct dsh_envd_event.stream: C offset 4, Lua offset 0", lines(run_check(cdefs, hostfs, facts_text)))
  end)

  it("fails when a function is declared on one side only", function()
    local cdefs = alter(F.cdefs, "int dsh_http_cancel(dsh_http_req_t *r);", "")
    assert.matches("^dsh_http_cancel: declared in the headers, not callable from Lua %(.*dsh_http_cancel.*%)$",
      lines(run_check(cdefs, hostfs, facts_text)))
    local facts_without = alter(facts_text, "func dsh_http_cancel\n", "")
    assert.equal("dsh_http_cancel: exported by the library, declared in no public header",
      lines(run_check(F.cdefs, hostfs, facts_without)))
  end)

  it("fails when a hand-declared libc number or layout is wrong", function()
    local altered = alter(hostfs, "DSH_HOSTFS_O_EXCL = 128", "DSH_HOSTFS_O_EXCL = 256")
    assert.equal("DSH_HOSTFS_O_EXCL: C value 128, Lua value 256", lines(run_check(F.cdefs, altered, facts_text)))
    altered = alter(hostfs, "uint16_t stx_mode; uint16_t spare0;", "uint32_t stx_mode;")
    assert.equal("", lines(run_check(F.cdefs, altered, facts_text))) -- same layout, other spelling
    altered = alter(hostfs, "uint64_t spare2[14];", "uint64_t spare2[12];")
    assert.equal("struct dsh_hostfs_statx: C size 256, Lua size 240", lines(run_check(F.cdefs, altered, facts_text)))
  end)

  it("leaves no number of the core and no core declaration to the Lua side", function()
    local function each_lua(dir, fn)
      for name in lfs.dir(dir) do
        local path = dir .. "/" .. name
        if name:match("%.lua$") then
          fn(path, read(path))
        elseif name ~= "." and name ~= ".." and lfs.attributes(path, "mode") == "directory" then
          each_lua(path, fn)
        end
      end
    end
    local found = {}
    each_lua(helpers.root .. "/lua/dsh", function(path, text)
      local rel = path:sub(#helpers.root + 2)
      local n = 0
      for line in text:gmatch("[^\n]*") do
        n = n + 1
        -- a status compared with, or named as, a number literal (statuses are negative)
        local code = not line:match("^%s*%-%-") and line or ""
        if code:match("[=~]=%s*%-%d") or code:match("%f[%w_]E%u[%u%d_]*[%s,%w_]*=%s*%-%d") then
          found[#found + 1] = rel .. ":" .. n .. ": " .. line
        end
      end
      if rel ~= "lua/dsh/core/_ffi/init.lua" and text:match("cdef[^\n]*dsh_") then
        found[#found + 1] = rel .. ": declares core functions by hand"
      end
    end)
    assert.equal("", lines(found))
  end)
end)
