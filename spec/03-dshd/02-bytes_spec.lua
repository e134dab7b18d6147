-- Bytes stay bytes between the host and a sandbox's dshd: UTF-8 split across
-- data events arrives raw and reassembles exactly (dsh.core.utf8.stream on the
-- host), and all 256 byte values survive /files (octet-stream, multipart,
-- streamed) and stdin/stdout/stderr. One sandbox for the file.
local D = require "helpers.dshd"
local helpers = require "helpers"
local sha256 = require "dsh.core.sha256"
local sys = require "dsh.core.sysutil"
local utf8 = require "dsh.core.utf8"

local TEXT = "h\u{e9}llo \u{4f60}\u{597d} \u{1f642}" -- "héllo 你好 🙂": 2-, 3- and 4-byte characters

local ALL = {}
for i = 0, 255 do ALL[#ALL + 1] = string.char(i) end
ALL = table.concat(ALL)
local ALL_REV = ALL:reverse()

-- A bash script printing s one byte per write, pausing between bytes.
local function trickle_script(s)
  local parts = {}
  for i = 1, #s do parts[#parts + 1] = string.format("printf '\\%03o'; sleep 0.005", s:byte(i)) end
  return table.concat(parts, "; ")
end

describe("dshd bytes", function()
  local S = D.use_sandbox()

  describe("multibyte output split across chunks", function()
    for _, mode in ipairs { "pipe", "pty" } do
      it("arrives as raw bytes and reassembles exactly (" .. mode .. ")", function()
        helpers.run(function()
          local c = S:test_client()
          assert.equal(18, #TEXT)
          local p = assert(c:start { cmd = "/bin/bash", args = { "-c", trickle_script(TEXT) },
            pty = mode == "pty" and { rows = 24, cols = 80 } or nil })
          local stream = utf8.stream()
          local raw, text, chunks, cut_inside = {}, {}, 0, 0
          while true do
            local ev = assert(p:next())
            if ev.type == "end" then
              assert.equal(0, ev.exit_code)
              break
            end
            assert.equal(mode == "pty" and "pty" or "stdout", ev.stream)
            chunks = chunks + 1
            raw[#raw + 1] = ev.data
            text[#text + 1] = assert(stream:feed(ev.data))
            if stream:pending() > 0 then cut_inside = cut_inside + 1 end
          end
          text[#text + 1] = assert(stream:finish())
          assert.equal(TEXT, table.concat(raw))
          assert.equal(TEXT, table.concat(text))
          -- the bytes came in many events, and events ended inside characters
          assert.is_true(chunks >= 10, "only " .. chunks .. " data events")
          assert.is_true(cut_inside >= 3, "no data event ended inside a character")
          p:close()
          c:close()
        end)
      end)
    end
  end)

  describe("/files", function()
    it("keeps all 256 byte values (octet-stream), on disk and read back", function()
      helpers.run(function()
        local c = S:test_client()
        local data = ALL .. ALL_REV .. ALL:rep(4)
        local info = assert(c:write_file("/home/user/bin/all.bin", data))
        assert.same({ path = "/home/user/bin/all.bin", name = "all.bin", type = "file" }, info)
        assert.equal(data, assert(c:read_file("/home/user/bin/all.bin")))
        assert.equal(data, helpers.read_file(S:home() .. "/bin/all.bin"))
        local p = assert(c:start { cmd = "sha256sum", args = { "bin/all.bin" } })
        assert.equal(sha256.hex(data) .. "  bin/all.bin\n", assert(p:wait()).stdout)
        p:close()
        assert(c:remove("/home/user/bin"))
        c:close()
      end)
    end)

    it("keeps binary parts of a multipart upload, even ones that look like boundaries", function()
      helpers.run(function()
        local c = S:test_client()
        local tricky = "\r\n--" .. ALL .. "\r\n------dsh-\r\n\r\n" .. ALL_REV .. "--\r\n"
        local list = assert(c:write_files {
          { path = "/tmp/mp/a.bin", data = tricky },
          { path = "/tmp/mp/b.bin", data = ALL },
          { path = "/tmp/mp/empty.bin", data = "" },
        })
        assert.same({ "/tmp/mp/a.bin", "/tmp/mp/b.bin", "/tmp/mp/empty.bin" },
          { list[1].path, list[2].path, list[3].path })
        assert.equal(tricky, assert(c:read_file("/tmp/mp/a.bin")))
        assert.equal(ALL, assert(c:read_file("/tmp/mp/b.bin")))
        assert.equal("", assert(c:read_file("/tmp/mp/empty.bin")))
        assert(c:remove("/tmp/mp"))
        c:close()
      end)
    end)

    it("streams a large binary file up and down unchanged", function()
      helpers.run(function()
        local c = S:test_client()
        local data = sys.random_bytes(9 * 1024 * 1024 + 7) -- above the client's streaming threshold
        assert(c:write_file("/tmp/big.bin", data))
        local r = assert(c:open_file("/tmp/big.bin"))
        assert.equal(#data, r.size)
        local h, n, chunks = sha256.new(), 0, 0
        while true do
          local chunk, err = r:read()
          assert.is_nil(err)
          if not chunk then break end
          h:update(chunk)
          n = n + #chunk
          chunks = chunks + 1
        end
        r:close()
        assert.equal(#data, n)
        assert.is_true(chunks > 1)
        assert.equal(sha256.hex(data), h:hex())
        assert(c:remove("/tmp/big.bin"))
        c:close()
      end)
    end)
  end)

  describe("stdin and stdout", function()
    it("keep all 256 byte values through cat, on stdout and on stderr", function()
      helpers.run(function()
        local c = S:test_client()
        for _, case in ipairs { { "cat", "stdout" }, { "cat >&2", "stderr" } } do
          local p = assert(c:start { cmd = "/bin/bash", args = { "-c", case[1] }, stdin = true })
          -- sent in pieces that cut through the data anywhere
          local data = ALL .. TEXT .. ALL_REV
          for _, cut in ipairs { { 1, 1 }, { 2, 100 }, { 101, 257 }, { 258, 260 }, { 261, #data } } do
            assert(c:send_stdin(p.pid, data:sub(cut[1], cut[2])))
          end
          assert(c:close_stdin(p.pid))
          local r = assert(p:wait())
          assert.equal(0, r.exit_code)
          assert.equal(data, r[case[2]])
          assert.equal("", r[case[2] == "stdout" and "stderr" or "stdout"])
          p:close()
        end
        c:close()
      end)
    end)

    it("carry megabytes of random bytes through cat exactly", function()
      helpers.run(function()
        local c = S:test_client()
        local data = sys.random_bytes(6 * 1024 * 1024)
        local p = assert(c:start { cmd = "cat", stdin = true })
        for i = 1, #data, 1024 * 1024 do assert(c:send_stdin(p.pid, data:sub(i, i + 1024 * 1024 - 1))) end
        assert(c:close_stdin(p.pid))
        local h, n = sha256.new(), 0
        while true do
          local ev = assert(p:next())
          if ev.type == "end" then
            assert.equal(0, ev.exit_code)
            break
          end
          h:update(ev.data)
          n = n + #ev.data
        end
        assert.equal(#data, n)
        assert.equal(sha256.hex(data), h:hex())
        p:close()
        c:close()
      end)
    end)
  end)
end)
