-- dsh.signals, the one table of signal names and numbers: every spelling,
-- agreement with the kernel's numbers (through the C core's table, which
-- libc's headers generate), and the envd client naming only what the wire can.
local helpers = require "helpers"
local signals = require "dsh.signals"

describe("dsh.signals", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("reads a signal in every spelling", function()
    for _, s in ipairs { "SIGTERM", "TERM", "sigterm", "term", "SigTerm", 15 } do
      assert.equal(15, signals.number(s), tostring(s))
      assert.equal("SIGTERM", signals.name(s), tostring(s))
    end
    assert.equal(9, signals.number("KILL"))
    assert.equal("SIGHUP", signals.name(1))
    assert.equal("SIGWINCH", signals.name(28))
  end)

  it("answers nil for what is not a signal", function()
    for _, s in ipairs { "SIGNOPE", "", "SIG", 0, 32, 64, -9, 1.5 } do
      assert.is_nil(signals.number(s), tostring(s))
      assert.is_nil(signals.name(s), tostring(s))
    end
    assert.is_nil(signals.number(nil))
    assert.is_nil(signals.number({}))
  end)

  it("numbers every signal as this Linux host does", function()
    local proc = require "dsh.core.proc" -- the C core's table, built from <signal.h>
    local names = signals.names()
    assert.equal(31, #names)
    for num, name in ipairs(names) do
      assert.equal(num, signals.number(name))
      assert.equal(proc.signum(name), num, name)
      assert.equal(proc.signame(num), name, name)
    end
  end)

  it("is what the envd client sends, limited to the signals the wire can name", function()
    local process = require "dsh.envd.process"
    for _, name in ipairs(process.WIRE_SIGNALS) do
      local num, wire_name = process.signal(name)
      assert.same({ signals.number(name), name }, { num, wire_name })
      assert.same({ num, name }, { process.signal(num) })
    end
    local ok, err = pcall(process.signal, "SIGUSR1")
    assert.is_false(ok)
    assert.matches("unsupported signal SIGUSR1", err, 1, true)
  end)
end)
