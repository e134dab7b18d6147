-- The pure parts of the subprocess seam: the one collector (reference §6.4
-- items 1–2, made code-point-safe), the pipe queue, and the one scrub definition.
local subprocess = require "dsh.subprocess"
local output = require "dsh.subprocess._output"
local helpers = require "helpers"

describe("dsh.subprocess collector", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("keeps a tail and reads from offsets without consuming (§6.4.1)", function()
    local c = subprocess.collector(4, { maxBytes = 10 })
    c.spillPath = "/state/stdout.log"
    for _, s in ipairs { "", "ab", "cdef" } do c:push(s) end
    assert.equal(6, c.total)
    assert.same({ text = "cdef", nextOffset = 6, lossy = true, spillPath = "/state/stdout.log" },
      c:readFrom(0))
    assert.same({ text = "cdef", nextOffset = 6, lossy = false }, c:readFrom(2))
    assert.same({ text = "f", nextOffset = 6, lossy = false }, c:readFrom(5))
    assert.same({ text = "", nextOffset = 6, lossy = false }, c:readFrom(99))
    assert.same(c:readFrom(0), c:readFrom(0))
  end)

  it("names a spill only when one exists and is complete (§6.4.2)", function()
    local c = subprocess.collector(2)
    c:push("abcd")
    assert.is_nil(c:readFrom(0).spillPath)
    local cut = subprocess.collector(2, { maxBytes = 3 })
    cut.spillPath = "/s"
    cut:push("abcd")
    assert.same({ text = "cd", nextOffset = 4, lossy = true }, cut:readFrom(0))
    assert.is_true(cut:spill_unneeded())
    local small = subprocess.collector(4, { maxBytes = 10 })
    small:push("ab")
    assert.is_true(small:spill_unneeded())
  end)

  it("rejects offsets that are not non-negative safe integers", function()
    local c = subprocess.collector(4)
    for _, bad in ipairs { -1, 1.5, 2 ^ 53, 0 / 0, "0" } do
      assert.has_error(function() c:readFrom(bad) end, "dsh.subprocess: readFrom: " .. subprocess.OFFSET_MESSAGE)
    end
  end)

  it("holds an incomplete trailing sequence back until it completes", function()
    local c = subprocess.collector(100)
    c:push("a\228\189") -- 'a' and the first two bytes of 你
    assert.same({ text = "a", nextOffset = 1, lossy = false }, c:readFrom(0))
    assert.equal(3, c.total)
    c:push("\160b")
    assert.same({ text = "a你b", nextOffset = 5, lossy = false }, c:readFrom(0))
    assert.same({ text = "你b", nextOffset = 5, lossy = false }, c:readFrom(1))
    -- an offset inside a code point starts at the next boundary
    assert.same({ text = "b", nextOffset = 5, lossy = false }, c:readFrom(2))
  end)

  it("starts a cut tail on a code-point boundary", function()
    local c = subprocess.collector(4)
    c:push("a你好") -- 7 bytes; the last 4 would start inside 你
    assert.same({ text = "好", nextOffset = 7, lossy = true }, c:readFrom(0))
    local one = subprocess.collector(2)
    one:push("你")
    assert.same({ text = "", nextOffset = 3, lossy = true }, one:readFrom(0))
  end)

  it("releases a cut-off sequence at the end of the stream, and counts gaps", function()
    local c = subprocess.collector(10)
    c:push("x\240\159")
    c:finish()
    assert.same({ text = "x\240\159", nextOffset = 3, lossy = false }, c:readFrom(0))
    local g = subprocess.collector(10)
    g:push("ab")
    g:skip(5)
    g:push("cd")
    assert.same({ text = "cd", nextOffset = 9, lossy = true }, g:readFrom(0))
    assert.same({ text = "d", nextOffset = 9, lossy = false }, g:readFrom(8))
  end)

  it("never holds invalid bytes", function()
    assert.equal(0, output.incomplete_suffix("a\255"))
    assert.equal(0, output.incomplete_suffix("\128\128\128"))
    assert.equal(1, output.incomplete_suffix("a\240"))
    assert.equal(3, output.incomplete_suffix("a\240\159\152"))
    assert.equal(0, output.incomplete_suffix("a\240\159\152\128"))
  end)
end)

describe("dsh.subprocess pipe", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("delivers bytes in order, then end of stream or the failure", function()
    helpers.run(function()
      local p = subprocess.pipe()
      p:push("ab")
      p:push("")
      p:push("c")
      p:finish()
      assert.equal("abc", p:read_all())
      local q = subprocess.pipe()
      q:push("x")
      q:finish({ code = "SUBPROCESS_LOST" })
      assert.equal("x", q:read())
      local s, err = q:read()
      assert.is_nil(s)
      assert.equal("SUBPROCESS_LOST", err.code)
    end)
  end)

  it("holds the producer back while the reader lags, and frees it on close", function()
    helpers.run(function()
      local async = require "dsh.async"
      local p = subprocess.pipe()
      local chunk = string.rep("x", 100000)
      local pushed = 0
      local producer = async.run(function()
        for _ = 1, 10 do
          p:push(chunk)
          pushed = pushed + 1
        end
      end)
      async.sleep(10)
      assert.is_true(pushed < 10)
      assert.equal(chunk, p:read())
      p:close()
      producer:await()
      assert.equal(10, pushed)
      assert.is_nil(p:read())
    end)
  end)
end)

describe("dsh.subprocess scrub", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("drops KEY, PASSWORD, SECRET, TOKEN anywhere and DSH_ at the start, in any case", function()
    for _, name in ipairs { "API_KEY", "npm_token", "My_Password", "SECRETS", "dsh_stale", "DSH_X",
      "monkey" } do
      assert.is_true(subprocess.scrubbed(name), name)
    end
    for _, name in ipairs { "PATH", "HOME", "KEEP", "FOO-BAR", "X_DSH_Y", "TOKE" } do
      assert.is_false(subprocess.scrubbed(name), name)
    end
  end)

  it("applies the explicit env after the scrub", function()
    local env = subprocess.compose_env(
      { PATH = "/bin", NPM_TOKEN = "s", DSH_STALE = "s", KEEP = "v" },
      { TOKEN_EXPLICIT = "t", DSH_EXPLICIT = "d", ["FOO-BAR"] = "f" })
    assert.same({ PATH = "/bin", KEEP = "v", TOKEN_EXPLICIT = "t", DSH_EXPLICIT = "d", ["FOO-BAR"] = "f" },
      env)
  end)

  it("is one definition, which subprocess-e2b encodes for dshd and for the stock-envd wrapper", function()
    assert.same({ contains = { "KEY", "PASSWORD", "SECRET", "TOKEN" }, prefixes = { "DSH_" } },
      require("dsh.providers.subprocess_e2b.native").env_scrub())
    assert.equal("[Dd][Ss][Hh]_*|*[Kk][Ee][Yy]*|*[Pp][Aa][Ss][Ss][Ww][Oo][Rr][Dd]*"
      .. "|*[Ss][Ee][Cc][Rr][Ee][Tt]*|*[Tt][Oo][Kk][Ee][Nn]*",
      require("dsh.providers.subprocess_e2b.compat").scrub_case_pattern())
    assert.has_error(function() subprocess.scrub_rules.contains = {} end,
      "dsh.subprocess: scrub_rules is read-only")
  end)

  it("reads this process's environment as it is now (dsh.core.sysutil.environ)", function()
    local sys = require "dsh.core.sysutil"
    assert.equal(os.getenv("PATH"), sys.environ().PATH)
    assert.is_nil(sys.environ().DSH_SPEC_ENVIRON)
    sys.setenv("DSH_SPEC_ENVIRON", "seen")
    local env = sys.environ()
    sys.setenv("DSH_SPEC_ENVIRON", nil)
    assert.equal("seen", env.DSH_SPEC_ENVIRON)
  end)
end)
