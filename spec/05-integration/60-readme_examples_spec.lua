-- Every ```lua block of README.md runs as printed, in a fresh `luajit`
-- started the way the README says (after `eval "$(make -s env)"`), against
-- real local sandboxes in an isolated $DSH_STATE_DIR, twice: as a script,
-- and typed line by line into the `luajit` REPL (each line its own chunk,
-- so a `local` of one line is gone on the next; the REPL's banner is not
-- the program's output):
--   * a block is a whole program; a block whose first line is `-- continued`
--     is appended to the program of the block before it (one program, run
--     once the chain ends);
--   * `--> text` at the end of a line is what that line prints (a line holding
--     only `--> text` is a further line of that output): the program's
--     stdout must be exactly these lines, in order (`...` at the end of one
--     matches any rest of the line);
--   * a block whose first line is `-- needs: E2B_API_KEY` (or another reason
--     of the same form: a network model, ...) is not run when that variable is
--     unset; the spec prints which blocks it skipped and why, so a green run
--     says what it did not run;
--   * the program must exit 0, write nothing to stderr, and leave no sandbox.
local helpers = require "helpers"

local README = "README.md"

local function blocks(text)
  local out, n, cur = {}, 0, nil
  for l in (text .. "\n"):gmatch("(.-)\n") do
    n = n + 1
    if cur then
      if l:match("^```%s*$") then
        out[#out + 1] = cur
        cur = nil
      else
        cur.lines[#cur.lines + 1] = l
      end
    elseif l:match("^```lua%s*$") then
      cur = { line = n + 1, lines = {} }
    end
  end
  assert(cur == nil, README .. ": a ```lua block is not closed")
  return out
end

-- The programs: {lines=, first=, last=, needs=} (blocks joined by `-- continued`).
local function programs(text)
  local out = {}
  for _, b in ipairs(blocks(text)) do
    local first = b.lines[1] or ""
    if first:match("^%-%- continued") then
      local p = assert(out[#out], README .. ":" .. b.line .. ": `-- continued` with no block before it")
      for _, l in ipairs(b.lines) do p.lines[#p.lines + 1] = l end
      p.last = b.line + #b.lines - 1
    else
      out[#out + 1] = { lines = { unpack(b.lines) }, first = b.line, last = b.line + #b.lines - 1,
        needs = first:match("^%-%- needs: (.+)$") }
    end
  end
  return out
end

local function expected(lines)
  local out = {}
  for _, l in ipairs(lines) do
    local e = l:match("%-%-> (.*)$")
    if e then out[#out + 1] = e end
  end
  return out
end

local function matches(want, got)
  if want:sub(-3) == "..." then return got:sub(1, #want - 3) == want:sub(1, -4) end
  return want == got
end

-- Run program p as a script, or (repl) typed into `luajit -i` line by line
-- (no prompts); returns the exit status, the lines of stdout and stderr.
local function run_program(p, repl)
  local dir = helpers.tmpdir()
  helpers.write_file(dir .. "/example.lua", table.concat(p.lines, "\n") .. "\n")
  local root = helpers.root
  local run = repl and string.format([[luajit -e "_PROMPT='' _PROMPT2=''" -i < '%s/example.lua']], dir)
    or string.format("luajit '%s/example.lua'", dir)
  -- The README's own setup line, as a user types it.
  local cmd = string.format("cd '%s' && eval \"$(make -s env)\" && "
    .. "timeout 300 %s 2>'%s/stderr'; echo \"__exit=$?\"", root, run, dir)
  local f = io.popen(cmd)
  local out = f:read("*a")
  f:close()
  local stderr = helpers.read_file(dir .. "/stderr") or ""
  helpers.rm_rf(dir)
  local status = tonumber(out:match("__exit=(%d+)\n$"))
  out = out:gsub("__exit=%d+\n$", "")
  local lines = {}
  for l in out:gmatch("(.-)\n") do lines[#lines + 1] = l end
  if repl then
    -- the REPL's banner (version, JIT status) first, and a newline at the end of its input
    assert(lines[1] and lines[1]:match("^LuaJIT ") and lines[2] and lines[2]:match("^JIT: "),
      "no REPL banner: " .. out)
    table.remove(lines, 1)
    table.remove(lines, 1)
    if lines[#lines] == "" then lines[#lines] = nil end
  end
  return status, lines, stderr
end

describe("README.md examples", function()
  local text = assert(helpers.read_file(helpers.root .. "/" .. README))
  local progs = programs(text)

  it("has examples, each with printed output to check", function()
    assert.is_true(#progs >= 5, "only " .. #progs .. " lua programs in " .. README)
    for _, p in ipairs(progs) do
      assert(#expected(p.lines) > 0, README .. ":" .. p.first .. ": a program that prints nothing checks nothing")
    end
  end)

  local skipped = {}
  for _, p in ipairs(progs) do
    local where = README .. ":" .. p.first .. "-" .. p.last
    local var = p.needs and p.needs:match("^([%u%d_]+)")
    if p.needs and not (var and os.getenv(var)) then
      skipped[#skipped + 1] = where .. " (needs " .. p.needs .. ")"
    else
      for _, repl in ipairs { false, true } do
        local how = repl and " line by line in the REPL" or " as printed"
        it((repl and "types " or "runs ") .. where .. how, function()
          helpers.isolate_state()
          local ok, err = pcall(function()
            local status, got, stderr = run_program(p, repl)
            local want = expected(p.lines)
            local report = "\n--- expected:\n" .. table.concat(want, "\n") .. "\n--- got:\n" .. table.concat(got, "\n")
              .. "\n--- stderr:\n" .. stderr
            assert(status == 0, where .. " exited with " .. tostring(status) .. report)
            assert(stderr == "", where .. " wrote to stderr" .. report)
            assert(#got == #want, where .. " printed " .. #got .. " lines, " .. #want .. " expected" .. report)
            for i = 1, #want do
              assert(matches(want[i], got[i]), where .. ": line " .. i .. " differs" .. report)
            end
            local left = require("dsh.sandbox").list()
            assert(#left == 0, where .. " left " .. #left .. " sandboxes behind")
          end)
          helpers.restore_state()
          assert(ok, err)
        end)
      end
    end
  end

  it("names only catalogued error codes", function()
    -- Upper-case words in backticks are error codes, except these names of
    -- environment variables and parts of them (the scrub's rules).
    local not_codes = { E2B_API_KEY = true, DSH_ = true, KEY = true, PASSWORD = true, SECRET = true,
      TOKEN = true, VAR = true, LUA_PATH = true, LUA_CPATH = true }
    local errors = require "dsh.errors"
    local bad, seen = {}, 0
    for word in text:gmatch("`([%u][%u%d_]*)`") do
      if not not_codes[word] then
        seen = seen + 1
        if not errors.known(word) then bad[#bad + 1] = word end
      end
    end
    assert.is_true(seen > 0)
    assert(#bad == 0, README .. " names codes missing from dsh.errors.CATALOGUE: " .. table.concat(bad, ", "))
  end)

  it("says which examples it did not run, and why", function()
    -- Printed so that a green run shows what it skipped.
    for _, s in ipairs(skipped) do print("\nREADME example not run: " .. s) end
    for _, s in ipairs(skipped) do assert.truthy(s:match("%(needs ")) end
  end)
end)
