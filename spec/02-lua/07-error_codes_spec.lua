-- The one catalogue of error codes (dsh.errors.CATALOGUE): every code the
-- library spells is in it, statically (every error constructor and every
-- code-shaped literal of lua/dsh and providers/) and at run time (the spec
-- helpers record any uncatalogued code a library module makes while the
-- whole suite runs, and helpers.assert_clean fails the test that made it).
local errors = require "dsh.errors"
local helpers = require "helpers"
local source = require "helpers.source"

local function library_files()
  local out = {}
  for _, dir in ipairs { "lua", "providers" } do
    for _, f in ipairs(source.files(dir, "%.lua$")) do
      if not f:match("^lua/dsh/providers/") then out[#out + 1] = f end
    end
  end
  return out
end

-- Codes of src the catalogue lacks: list of "line: code".
local function missing(src)
  local out = {}
  for _, c in ipairs(source.error_codes(src)) do
    local ok
    if c.prefix then
      for _, f in ipairs(errors.FAMILIES) do
        if f.pattern:sub(1, #c.code + 1) == "^" .. c.code then ok = true end
      end
    else
      ok = errors.known(c.code) ~= nil
    end
    if not ok then out[#out + 1] = c.line .. ": " .. c.code .. (c.prefix and " (a family prefix)" or "") end
  end
  return out
end

describe("the error catalogue", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("holds every code the library spells", function()
    local bad, sites = {}, 0
    for _, f in ipairs(library_files()) do
      sites = sites + #source.error_codes(source.read(f))
      for _, m in ipairs(missing(source.read(f))) do bad[#bad + 1] = f .. ":" .. m end
    end
    assert(#bad == 0, "codes missing from dsh.errors.CATALOGUE:\n  " .. table.concat(bad, "\n  "))
    assert.is_true(sites > 100, "the scan found only " .. sites .. " sites")
  end)

  it("finds codes behind every way of making an error", function()
    local codes = function(src)
      local out = {}
      for _, c in ipairs(source.error_codes(src)) do out[#out + 1] = c.code end
      return out
    end
    assert.same({ "NO_SUCH", "nope", "OTHER_ONE", "ALIASED", "PROC_" }, codes([[
      local errors = require "dsh.errors"
      local fe = require "dsh.fs._errors"
      local E, x = fe.new, 1
      local a = errors.new("NO_SUCH", "m")
      local b = errors.new(
        "nope", "lower-case: an envd code")
      local c = { name = "OTHER_ONE" }   -- a code-shaped literal anywhere
      local d = E("ALIASED", "m")
      local e = errors.new("PROC_" .. name, "m")
      local home = os.getenv("DSH_STATE_DIR") -- a variable name, not a code
      -- errors.new("IN_A_COMMENT", "m")
    ]]))
    assert.same({ "1: NOT_A_CODE", "2: BAD_FAMILY_ (a family prefix)" },
      missing('local errors = require "dsh.errors"; local e = errors.new("NOT_A_CODE", "m")\n'
        .. 'local f = errors.new("BAD_FAMILY_" .. x, "m")'))
    assert.same({}, missing('local errors = require "dsh.errors"; errors.new("FS_NOT_FOUND", "m")'
      .. '; errors.new("not_found", "m"); errors.new("PROC_" .. n, "m")'))
  end)

  it("knows each code once, in one area, with what it means", function()
    local areas = {}
    for area, codes in pairs(errors.CATALOGUE) do
      areas[#areas + 1] = area
      for code, meaning in pairs(codes) do
        assert.equal(area, errors.known(code))
        assert.is_true(type(meaning) == "string" and #meaning > 5, code)
        if area == "envd" then
          assert.matches("^[a-z_]+$", code)
        elseif area ~= "host" then
          assert.matches("^[A-Z][A-Z0-9_]+$", code)
        end
      end
    end
    table.sort(areas)
    -- the seams being written have their tables waiting
    for _, reserved in ipairs { "pty", "lsp", "code_runtime" } do
      assert.is_table(errors.CATALOGUE[reserved], reserved)
    end
    assert.is_nil(errors.known("NO_SUCH_CODE"))
    assert.is_nil(errors.known(nil))
  end)

  it("has envd's sixteen Connect codes as a set of their own", function()
    local want = { "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists",
      "permission_denied", "resource_exhausted", "failed_precondition", "aborted", "out_of_range",
      "unimplemented", "internal", "unavailable", "data_loss", "unauthenticated" }
    local have = {}
    for code in pairs(errors.CATALOGUE.envd) do have[#have + 1] = code end
    table.sort(want)
    table.sort(have)
    assert.same(want, have)
  end)

  it("covers every core status dsh.core.proc can turn into PROC_<status>", function()
    local F = require "dsh.core._ffi"
    local n = 0
    for rc = -1, -64, -1 do
      local name = F.status(rc)
      if name == "EUNKNOWN" then break end
      n = n + 1
      assert.equal("core", errors.known("PROC_" .. name), name)
    end
    assert.is_true(n >= 19, "only " .. n .. " statuses")
  end)

  it("reports, as it is made, an uncatalogued code made by the library, not one a spec made", function()
    local made = {}
    local old = errors.on_unknown_code(function(code, at)
      if not helpers.is_spec_source(at.source) then made[#made + 1] = { code, at.short_src } end
    end)
    -- a chunk that stands for a library module (its source is a file in lua/dsh)
    local lib = debug.getinfo(errors.new, "S").source:match("^@(.*/)[^/]*$")
    local chunk = assert(loadstring([[
      local errors = require "dsh.errors"
      errors.new("FS_NOT_FOUND", "catalogued")
      local e = errors.new("FS_NOT_A_CODE", "made inside the library")
      return e
    ]], "@" .. lib .. "imagined_module.lua"))
    local e = chunk()
    errors.new("SPEC_MADE", "made by a spec: the spec's to name")
    errors.on_unknown_code(old)
    assert.equal("FS_NOT_A_CODE", e.code) -- made all the same: reporting never changes behaviour
    assert.equal(1, #made)
    assert.equal("FS_NOT_A_CODE", made[1][1])
    assert.matches("imagined_module%.lua$", made[1][2])
  end)
end)
