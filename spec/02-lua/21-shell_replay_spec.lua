-- dsh.app.shell.replay: replayed output loses the queries a terminal would
-- answer, and the answers a terminal sends anyway are dropped until it
-- answered the fence (the whole path, through a real terminal:
-- spec/05-integration/11-shell_spec.lua).
local helpers = require "helpers"
local replay = require "dsh.app.shell.replay"

describe("dsh shell's replay guards", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("strip every query a terminal answers, and nothing else", function()
    local queries = {
      "\27[6n", "\27[?6n", "\27[5n", "\27[c", "\27[0c", "\27[>c", "\27[=c", "\27[x", "\27[?25$p", "\27[4$p",
      "\27[14t", "\27[18t", "\27[>q", "\27[?u", "\27]11;?\7", "\27]10;?\27\\", "\27]4;1;?\7", "\27]52;c;?\7",
      "\27P$qm\27\\", "\27P+q544e\27\\", "\5",
    }
    for _, q in ipairs(queries) do
      assert.equal("a" .. "b", replay.strip("a" .. q .. "b"), ("%q"):format(q))
    end
    local kept = {
      "\27[31mred\27[0m", "\27[2J\27[H", "\27[?1049h", "\27[8;24;80t", "\27[q", "\27]0;title\7", "\27]11;#000000\7",
      "\27(B", "\27=", "\27[?1;2c", -- a DA answer printed is output, not a query
      "plain text \226\130\172",
    }
    for _, k in ipairs(kept) do
      assert.equal("<" .. k .. ">", replay.strip("<" .. k .. ">"), ("%q"):format(k))
    end
    -- a sequence cut at the end stays (the live bytes go on with it)
    assert.equal("x\27[6", replay.strip("x\27[6"))
    assert.equal("vi\27[?1049h\27[H~", replay.strip("vi\27[6n\27[?1049h\27[c\27[H\27[>c~"))
  end)

  it("a fence drops the terminal's reports until the answer to its own query, keys go through", function()
    local f = replay.fence()
    assert.equal("ls", f:filter("\27[12;5R" .. "l" .. "\27[?1;2c"
      -- the fence's own answer above (CSI ? ... c) ends it: what follows goes through as it is
      .. "s"))
    assert.is_false(f.open)
    assert.equal("\27[12;5R", f:filter("\27[12;5R"))
    f = replay.fence()
    -- answers split across reads; arrows and Alt-keys are not reports
    assert.equal("", f:filter("\27[>41;3"))
    assert.equal("\27[A\27x", f:filter("21;0c\27]11;rgb:0000/0000/0000\27\\\27[A\27x\27P>|xterm\27\\\27[0n"))
    assert.is_true(f.open)
    assert.equal("", f:filter("\27[?6"))
    assert.equal("\27[?6", f:expire()) -- no answer in time: what was held goes to the shell
    assert.is_false(f.open)
    assert.equal("abc", f:filter("abc"))
  end)
end)
