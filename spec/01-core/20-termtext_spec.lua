-- The terminal text bindings (dsh.core.termtext, dsh.core.termscreen): the sanitizer
-- pins of reference §6.8 items 1-5 through Lua, the buffer's pages and
-- limits, the screen's snapshot, replies and reflow, and misuse; and where
-- the terminal primitives live: declared from their headers (so the FFI
-- contract's drift check covers them) and libvterm linked into libdsh.so only.
local F = require "dsh.core._ffi"
local check = require "dsh.core._ffi.check"
local helpers = require "helpers"
local termscreen = require "dsh.core.termscreen"
local termtext = require "dsh.core.termtext"

local function output(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("*a")
  p:close()
  return out
end

local function needed(path)
  local out = output("readelf -d '" .. path .. "' 2>&1")
  local list = {}
  for lib in out:gmatch("%(NEEDED%)%s+Shared library: %[([^%]]+)%]") do list[#list + 1] = lib end
  assert.is_true(#list > 0, "readelf listed no NEEDED entry of " .. path .. ":\n" .. out)
  return table.concat(list, " ")
end

describe("the terminal primitives in the core", function()
  it("are declared from their headers and checked by the FFI contract", function()
    local seen = {}
    for _, f in ipairs(check.parse_facts(output(helpers.bin("dsh-ffi-probe")))) do
      seen[f.kind .. " " .. f.name .. (f.field and ("." .. f.field) or "")] = true
    end
    for _, fn in ipairs { "dsh_tsan_new", "dsh_tsan_feed", "dsh_textbuf_tail_lines", "dsh_screen_new",
      "dsh_screen_text", "dsh_tty_raw", "dsh_tty_size", "dsh_fd_read" } do
      assert.is_true(seen["func " .. fn], fn)
    end
    assert.is_true(seen["size struct dsh_screen_info"])
    assert.is_true(seen["offset struct dsh_screen_info.changes"])
    assert.is_true(seen["offset struct dsh_textbuf_stats.truncated"])
    assert.is_true(seen["const DSH_TSAN_PROMPT_TEXT"])
    assert.is_nil(F.cdefs:find("VTerm", 1, true)) -- libvterm's own types stay behind the wrapper
  end)

  it("link libvterm into libdsh.so only, never into dshd", function()
    assert.matches("libvterm", needed(F.path))
    assert.not_matches("vterm", needed(helpers.bin("dshd")))
    local core = helpers.build .. "/lib/libdsh_core.a"
    assert(helpers.read_file(core), "no " .. core .. ": build first")
    local syms = output("nm -A '" .. core .. "' 2>&1")
    assert.matches("termtext%.c%.o", syms)
    assert.not_matches("termscreen", syms)
    assert.not_matches("vterm_", syms)
  end)
end)

describe("dsh.core.termtext", function()
  it("sanitizes as the reference pins", function()
    local s = termtext.sanitizer(4096)
    assert.same({ "red", false, false }, { s:feed("\27[31mred\27[") })
    assert.same({ " text\n", false, false }, { s:feed("0m text\n") })
    assert.same({ "", false, false }, { s:feed("\27]133;D;0") })
    assert.same({ "dsh> ", true, true }, { s:feed("\7dsh> ") })
    assert.same({ "abc", false, false }, { s:feed("a\27]0;t\27\\b\27]2;t\7c\27") })
    assert.equal("", s:flush())
    assert.equal("a\nb\nc", (s:feed("a\r\nb\rc\7")))
    assert.equal("x", (s:feed("x\r")))
    assert.equal("\n", s:flush())
    assert.same({ "", true, false }, { s:feed("\27]133;D;0\7") })
    assert.same({ "dsh> ", false, true }, { s:feed("dsh> ") })
    local small = termtext.sanitizer(8)
    assert.equal("a", (small:feed("a\27]133;D;0123456789")))
    assert.equal("", (small:feed("more\27x\27")))
    assert.same({ "b", false, false }, { small:feed("\\b") })
    assert.equal("dsh.core.termtext.sanitizer(8)", tostring(small))
    assert.has_error(function() termtext.sanitizer(0) end,
      "dsh.core.termtext: sanitizer: maxPending must be a positive integer, got 0")
    assert.has_error(function() small:feed(1) end, "dsh.core.termtext: feed: expected string, got number")
  end)

  it("keeps a bounded, code-point-safe tail and pages lines newest first", function()
    local b = termtext.buffer(10, 3)
    b:append("a\nb\nc\n")
    assert.same({ "b\nc", 2 }, { b:page(0, 2) })
    b:append("你好你好")
    assert.equal("好你好", b:text()) -- 12 new bytes: only their tail fits, from a code point
    assert.same({ bytes = 9, lines = 1, appended = 18, dropped = 9, truncated = true }, b:stats())
    b:append("\n!")
    assert.equal("你好\n!", b:consume())
    assert.equal(0, b:lines())
    assert.is_true(b:truncated())
    assert.has_error(function() termtext.buffer(0) end,
      "dsh.core.termtext: buffer: maxBytes must be a positive integer, got 0")
  end)
end)

describe("dsh.core.termscreen", function()
  it("shows rows and the cursor, answers queries and reflows", function()
    local scr = termscreen.new(3, 10)
    assert.equal("\27[1;1R", scr:feed("\27[6n"))
    scr:feed("abcdefghijkl\r\n$ ")
    local snap = scr:snapshot()
    assert.same({ "abcdefghij", "kl", "$" }, snap.lines)
    assert.same({ row = 2, col = 2 }, snap.cursor)
    assert.is_false(snap.altscreen)
    scr:resize(3, 20)
    assert.same({ "abcdefghijkl", "$", "" }, scr:snapshot().lines)
    assert.same({ row = 1, col = 2 }, scr:info().cursor)
    assert.equal("dsh.core.termscreen(3x20)", tostring(scr))
    assert.has_error(function() termscreen.new(0, 80) end,
      "dsh.core.termscreen: new: rows must be an integer in [1, 1000], got 0")
    assert.has_error(function() scr:resize(3, 1001) end,
      "dsh.core.termscreen: resize: cols must be an integer in [1, 1000], got 1001")
  end)
end)
