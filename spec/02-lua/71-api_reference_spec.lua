-- docs/api.md cannot drift from the code. The public surface is found at run
-- time (spec/helpers/api_doc.lua states the rule: public modules required
-- and walked, a context composed with every service on a real local sandbox
-- and its service tables walked, object classes read from their source) and
-- compared with the headings of docs/api.md, both ways (and each documented
-- function has a description); every error code
-- docs/api.md names on an `Errors:` line or in its catalogue must be in
-- dsh.errors.CATALOGUE, and every catalogued code must be in its catalogue.
local api = require "helpers.api_doc"
local errors = require "dsh.errors"
local helpers = require "helpers"

local DOC = "docs/api.md"

local function key(recv, sep, name) return recv .. sep .. name end

local inventory, text, funcs, sections

describe("docs/api.md", function()
  setup(function()
    helpers.isolate_state()
    helpers.snapshot()
    helpers.run(function()
      local ctx = api.compose()
      local ok, res = pcall(api.inventory, ctx)
      assert(ctx:dispose())
      assert(ok, res)
      inventory = res
    end)
    helpers.restore_state()
    helpers.assert_clean()
    text = assert(helpers.read_file(helpers.root .. "/" .. DOC), DOC .. " is missing")
    funcs, sections = api.parse(text)
  end)

  it("finds the public surface (the inventory is not empty where it must not be)", function()
    local receivers = {}
    for _, it in ipairs(inventory) do receivers[it.receiver] = (receivers[it.receiver] or 0) + 1 end
    for _, r in ipairs { "dsh.async", "dsh.context", "ctx", "ctx.fs", "ctx.subprocess", "ctx.bash", "ctx.pty",
      "ctx.lsp", "ctx.codeRuntime", "ctx.e2b", "dsh.sandbox", "sb", "sb.envd", "future" } do
      assert.is_true((receivers[r] or 0) > 0, "nothing public found on " .. r)
    end
    assert.is_true(#inventory > 200, "only " .. #inventory .. " public functions found")
  end)

  it("has a section for every public module and service", function()
    local have = {}
    for _, s in ipairs(sections) do have[s] = true end
    local missing = {}
    for _, m in ipairs(api.modules()) do
      if not have[m] then missing[#missing + 1] = "## " .. m end
    end
    for _, k in ipairs(api.SERVICES) do
      if not have["ctx." .. k] then missing[#missing + 1] = "## ctx." .. k end
    end
    assert(#missing == 0, DOC .. " lacks these sections:\n" .. table.concat(missing, "\n"))
  end)

  it("documents every public function", function()
    local documented = {}
    for _, f in ipairs(funcs) do
      if f.receiver then documented[key(f.receiver, f.sep, f.name)] = true end
    end
    local missing = {}
    for _, it in ipairs(inventory) do
      if not documented[key(it.receiver, it.sep, it.name)] then
        missing[#missing + 1] = "(" .. it.file .. ":" .. it.line .. ")\n" .. api.skeleton(it)
      end
    end
    assert(#missing == 0, #missing .. " public functions are not in " .. DOC
      .. "; a section for each, from its doc comment:\n\n" .. table.concat(missing, "\n"))
  end)

  it("documents only functions that exist, each once, in the heading format", function()
    local exists = {}
    for _, it in ipairs(inventory) do exists[key(it.receiver, it.sep, it.name)] = true end
    local bad, seen, section = {}, {}, nil
    local n = 0
    for l in (text .. "\n"):gmatch("(.-)\n") do
      n = n + 1
      section = l:match("^## (.-)%s*$") or section
      if l:match("^### ") and section ~= "Error codes" then
        local f = api.parse(l)[1]
        if not f.receiver then
          bad[#bad + 1] = DOC .. ":" .. n .. ": not `### receiver.name(args)` or `### receiver:name(args)`: " .. l
        else
          local k = key(f.receiver, f.sep, f.name)
          if not exists[k] then
            bad[#bad + 1] = DOC .. ":" .. n .. ": " .. k .. " is documented but does not exist"
          elseif seen[k] then
            bad[#bad + 1] = DOC .. ":" .. n .. ": " .. k .. " is documented twice (also line " .. seen[k] .. ")"
          end
          seen[k] = seen[k] or n
        end
      end
    end
    assert(#bad == 0, table.concat(bad, "\n"))
  end)

  it("says something about every function it documents", function()
    local empty, heading, body, n, at = {}, nil, false, 0, 0
    local function close()
      if heading and not body then empty[#empty + 1] = DOC .. ":" .. at .. ": " .. heading .. " has no text" end
    end
    for l in (text .. "\n"):gmatch("(.-)\n") do
      n = n + 1
      if l:match("^##") then
        close()
        heading, body, at = l:match("^### (.*)$"), false, n
      elseif l:match("%S") then
        body = true
      end
    end
    close()
    assert(#empty == 0, table.concat(empty, "\n"))
  end)

  it("names only catalogued error codes, and catalogues every one", function()
    local bad, n = {}, 0
    local catalogue, section = {}, nil
    for l in (text .. "\n"):gmatch("(.-)\n") do
      n = n + 1
      section = l:match("^## (.-)%s*$") or section
      local list = l:match("^%s*[-*]?%s*Errors:%s*(.*)$")
      if list then
        for code in list:gmatch("`([%w_]+)`") do
          if not errors.known(code) then bad[#bad + 1] = DOC .. ":" .. n .. ": " .. code .. " is not catalogued" end
        end
      end
      if section == "Error codes" then
        local code = l:match("^| `([%w_]+)` |")
        if code then
          if not errors.known(code) then bad[#bad + 1] = DOC .. ":" .. n .. ": " .. code .. " is not catalogued" end
          catalogue[code] = true
        end
      end
    end
    for _, codes in pairs(errors.CATALOGUE) do
      for code in pairs(codes) do
        if not catalogue[code] then bad[#bad + 1] = code .. " is catalogued but missing from " .. DOC end
      end
    end
    assert(#bad == 0, table.concat(bad, "\n"))
  end)

  it("fails on drift: a renamed function and an unknown code are caught", function()
    -- The checks above, applied to a doctored copy, so a parser that matches
    -- nothing cannot pass them.
    local doctored = text:gsub("### ctx%.fs:readText%(", "### ctx.fs:readTexts(", 1)
    local f = api.parse(doctored)
    local names = {}
    for _, x in ipairs(f) do if x.receiver then names[key(x.receiver, x.sep, x.name)] = true end end
    assert.is_true(names["ctx.fs:readTexts"])
    assert.is_nil(names["ctx.fs:readText"])
    assert.is_nil(errors.known("FS_NO_SUCH_CODE"))
  end)
end)
