-- What E2B users expect of the control plane, on both backends with one API
-- (issue 19 §4): dsh.providers.e2b.list (state and metadata filters),
-- ctx.e2b:info() and .info(cfg, id), ctx.e2b:metrics() and .metrics(cfg,
-- id) (the cloud: E2B's GET /sandboxes/{id}/metrics through the stand-in;
-- local: the sandbox's cgroups and files, dsh.sandbox.metrics), and the
-- command line's `dsh sandbox list` and `dsh sandbox metrics`.
local async = require "dsh.async"
local D = require "helpers.dshd"
local E = require "helpers.e2b"
local e2b = require "dsh.providers.e2b"
local helpers = require "helpers"
local lfs = require "lfs"
local limits = require "dsh.sandbox.limits"
local metrics = require "dsh.sandbox.metrics"
local proc = require "dsh.core.proc"
local sandbox = require "dsh.sandbox"
local state = require "dsh.sandbox.state"
local sys = require "dsh.core.sysutil"

local S

local ISO = "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d"

local BACKENDS = {
  {
    name = "local sandboxes", cloud = false,
    config = function(extra) return extra or {} end,
    list_cfg = function() return {} end,
    pause = function(id) assert(sandbox.pause(id)) end,
  },
  {
    name = "the E2B cloud (stand-in)", cloud = true,
    config = function(extra) return S:config(extra) end,
    list_cfg = function() return S:config {} end,
    pause = function(id) assert.equal(204, S:request("POST", "/sandboxes/" .. id .. "/pause").status) end,
  },
}

local function ids(list)
  local out = {}
  for _, s in ipairs(list) do out[#out + 1] = s.sandboxId end
  table.sort(out)
  return out
end

local function sorted(t)
  table.sort(t)
  return t
end

local function dsh(env_extra, ...)
  local env = { PATH = os.getenv("PATH"), HOME = os.getenv("HOME") or "/root", DSH_STATE_DIR = helpers.state_dir,
    DSH_BUILD_DIR = helpers.build, LUA_PATH = package.path, LUA_CPATH = package.cpath }
  for k, v in pairs(env_extra or {}) do env[k] = v end
  local p = assert(proc.spawn { argv = { helpers.root .. "/bin/dsh", ... }, env = env })
  local err_task = async.run(function() return p:read_all("stderr") end)
  local out = p:read_all()
  local err = err_task:await()
  local st = p:wait()
  p:wait_quiescent()
  p:close()
  return st.exit_code, out, err
end

describe("sandboxes as E2B users see them, on both backends", function()
  D.use_state()
  S = E.use_standin()

  for _, B in ipairs(BACKENDS) do
    describe("on " .. B.name, function()
      it("lists sandboxes with state and metadata, filtered as E2B filters", function()
        helpers.run(function()
          local suite = "inv" .. sys.random_hex(4)
          local a = helpers.start_context { { e2b, B.config { metadata = { suite = suite, role = "a" } } } }
          local b = helpers.start_context { { e2b, B.config { metadata = { suite = suite, role = "b" } } } }
          local ia, ib = a.e2b:sandboxId(), b.e2b:sandboxId()
          local ok, err = pcall(function()
            assert.same(sorted { ia, ib }, ids(assert(e2b.list(B.list_cfg(), { metadata = { suite = suite } }))))
            local only = assert(e2b.list(B.list_cfg(), { metadata = { suite = suite, role = "a" } }))
            assert.same({ ia }, ids(only))
            assert.same({ "running", { suite = suite, role = "a" }, B.cloud and "cloud" or "local" },
              { only[1].state, only[1].metadata, only[1].backend })
            assert.matches(ISO, only[1].startedAt)
            B.pause(ib)
            assert.same({ ib }, ids(assert(e2b.list(B.list_cfg(), { state = "paused", metadata = { suite = suite } }))))
            assert.same({ ia }, ids(assert(e2b.list(B.list_cfg(), { state = { "running" },
              metadata = { suite = suite } }))))
            assert.same({}, ids(assert(e2b.list(B.list_cfg(), { metadata = { suite = suite, role = "c" } }))))
            assert.has_error(function() e2b.list(B.list_cfg(), { state = "gone" }) end,
              'dsh.providers.e2b: list: query.state must be "running" or "paused", got gone')
          end)
          assert(a:dispose())
          assert(b:dispose())
          assert(ok, err)
        end)
      end)

      it("describes its sandbox: ctx.e2b:info() and info(cfg, id)", function()
        helpers.run(function()
          helpers.with_context({ { e2b, B.config { metadata = { k = "v" }, timeoutMs = 120000 } } }, function(ctx)
            local id = ctx.e2b:sandboxId()
            local info = assert(ctx.e2b:info())
            assert.same({ id, "running", { k = "v" }, "pause" }, { info.sandboxId, info.state, info.metadata,
              info.onTimeout })
            assert.matches(ISO, info.startedAt)
            if B.cloud then
              assert.same({ "base", "0.6.4", 2, 512, {} }, { info.templateId, info.envdVersion, info.cpuCount,
                info.memoryMB, info.envdMissing })
              assert.matches(ISO, info.endAt)
            else
              local lim = sandbox.limits_of(state.read_meta(id))
              assert.same({ lim.cpus, lim.memoryMb, true, 120000 }, { info.cpuCount, info.memoryMB, info.network,
                info.timeoutMs })
            end
            assert.same(info, assert(e2b.info(B.list_cfg(), id)))
            local none, err = e2b.info(B.list_cfg(), "zzzzzzzzzzzzzzzzzzzz")
            assert.is_nil(none)
            assert.same({ "not_found", "sandbox zzzzzzzzzzzzzzzzzzzz not found" }, { err.code, err.message })
          end)
        end)
      end)

      it("measures what it uses: disk grows with what is written, memory is in use", function()
        helpers.run(function()
          helpers.with_context({ { e2b, B.config {} } }, function(ctx)
            local id = ctx.e2b:sandboxId()
            local before = assert(ctx.e2b:metrics())
            local m0 = before[#before]
            local r = assert(ctx.e2b:exec { "/bin/sh", "-c", "head -c 2097152 /dev/urandom > /home/user/two-mib" })
            assert.equal(0, r.exit_code)
            local after = assert(ctx.e2b:metrics())
            local m = after[#after]
            assert.matches(ISO, m.timestamp)
            assert.is_true(math.abs(m.timestampUnix - os.time()) < 600)
            assert.is_true(m.diskUsed >= m0.diskUsed + 2097152, m.diskUsed .. " after, " .. m0.diskUsed .. " before")
            if B.cloud then
              assert.same({ 2, 512 * 1048576 }, { m.cpuCount, m.memTotal })
              assert.is_true(m.memUsed > 0)
              assert.is_true(m.cpuUsedPct >= 0 and m.cpuUsedPct <= 100)
            else
              local groups = state.read_runtime(id).cgroups
              assert.equal(sandbox.limits_of(state.read_meta(id)).cpus or limits.host().cpus, m.cpuCount)
              if limits.available().memory then
                assert.is_true(m.memUsed > 0, "no memory in use")
                assert.equal(sandbox.limits_of(state.read_meta(id)).memoryMb * 1048576, m.memTotal)
              else
                assert.is_nil(m.memUsed)
              end
              if metrics.cpu_ns(groups) then
                assert.is_true(m.cpuUsedPct >= 0 and m.cpuUsedPct <= 100)
              else
                assert.is_nil(m.cpuUsedPct) -- this host accounts no CPU time per sandbox: not a guess
              end
            end
            local again = assert(e2b.metrics(B.list_cfg(), id))
            assert.is_true(#again >= 1)
            local none, err = e2b.metrics(B.list_cfg(), "zzzzzzzzzzzzzzzzzzzz")
            assert.is_nil(none)
            assert.equal("not_found", err.code)
          end)
        end)
      end)

      it("shows the same on the command line: dsh sandbox list, dsh sandbox metrics", function()
        helpers.run(function()
          local env = B.cloud and { E2B_API_KEY = S.key, E2B_API_URL = S.api_url } or {}
          local flag = B.cloud and { "--cloud" } or {}
          local suite = "cli" .. sys.random_hex(4)
          helpers.with_context({ { e2b, B.config { metadata = { suite = suite } } } }, function(ctx)
            local id = ctx.e2b:sandboxId()
            local code, out, err = dsh(env, "sandbox", "list", "--metadata", "suite=" .. suite, unpack(flag))
            assert.same({ 0, "" }, { code, err })
            local header, row = out:match("^([^\n]*)\n([^\n]*)\n$")
            assert.matches("^ID%s+STATE%s+CREATED%s+METADATA$", header)
            assert.matches("^" .. id .. "%s+running%s+%d%d%d%d%-%d%d%-%d%dT[%d:.]+Z%s+suite=" .. suite .. "$", row)
            assert.same({ 0, "(no sandboxes)\n", "" }, { dsh(env, "sandbox", "list", "--state", "paused",
              "--metadata", "suite=" .. suite, unpack(flag)) })
            code, out, err = dsh(env, "sandbox", "metrics", id, unpack(flag))
            assert.same({ 0, "" }, { code, err })
            local mh, mrow = out:match("^([^\n]*)\n([^\n]*)\n")
            assert.matches("^TIME%s+CPUS%s+CPU%%%s+MEM%-USED%s+MEM%-TOTAL%s+DISK%-USED%s+DISK%-TOTAL$", mh)
            assert.matches(ISO, mrow)
            code, out, err = dsh(env, "sandbox", "metrics", "zzzzzzzzzzzzzzzzzzzz", unpack(flag))
            assert.same({ 1, "", "dsh: not_found: sandbox zzzzzzzzzzzzzzzzzzzz not found\n" }, { code, out, err })
          end)
          if B.cloud then
            local code, out, err = dsh({}, "sandbox", "list", "--cloud")
            assert.same({ 1, "", "dsh: configure apiKey or set E2B_API_KEY\n" }, { code, out, err })
          end
        end)
      end)
    end)
  end

  describe("dsh.sandbox.metrics reads both cgroup versions and counts disk as du does", function()
    local dir, saved
    before_each(function()
      dir = helpers.tmpdir()
      saved = metrics.CGROUP_ROOT
      metrics.CGROUP_ROOT = dir .. "/"
    end)
    after_each(function()
      metrics.CGROUP_ROOT = saved
      helpers.rm_rf(dir)
    end)

    local function put(path, text)
      sys.mkdir_p(path:match("^(.*)/[^/]*$"), "755")
      helpers.write_file(path, text)
    end

    it("cgroup v1: cpuacct.usage, memory.usage_in_bytes, memory.stat cache, an unlimited limit is nil", function()
      put(dir .. "/cpuacct/dsh-x/cpuacct.usage", "123456789\n")
      put(dir .. "/memory/dsh-x/memory.usage_in_bytes", "52428800\n")
      put(dir .. "/memory/dsh-x/memory.limit_in_bytes", "9223372036854771712\n")
      put(dir .. "/memory/dsh-x/memory.stat", "cache 4096\nrss 100\ntotal_cache 8192\n")
      local groups = { cpuacct = dir .. "/cpuacct/dsh-x", memory = dir .. "/memory/dsh-x" }
      assert.equal(123456789, metrics.cpu_ns(groups))
      assert.same({ 52428800, 8192 }, { metrics.memory(groups) })
      put(dir .. "/memory/dsh-x/memory.limit_in_bytes", "268435456\n")
      assert.same({ 52428800, 8192, 268435456 }, { metrics.memory(groups) })
    end)

    it("cgroup v2: cpu.stat usage_usec, memory.current, memory.max, memory.stat file", function()
      put(dir .. "/dsh-y/cpu.stat", "usage_usec 5000\nuser_usec 3000\nsystem_usec 2000\n")
      put(dir .. "/dsh-y/memory.current", "1048576\n")
      put(dir .. "/dsh-y/memory.max", "max\n")
      put(dir .. "/dsh-y/memory.stat", "anon 1\nfile 65536\n")
      local groups = { unified = dir .. "/dsh-y" }
      assert.equal(5000000, metrics.cpu_ns(groups))
      assert.same({ 1048576, 65536 }, { metrics.memory(groups) })
      put(dir .. "/dsh-y/memory.max", "134217728\n")
      assert.same({ 1048576, 65536, 134217728 }, { metrics.memory(groups) })
    end)

    it("a v1 cpu group without cpuacct, a missing group and one outside the cgroup root: nil", function()
      put(dir .. "/cpu/dsh-z/cpu.stat", "nr_periods 10\nnr_throttled 0\nthrottled_time 0\n")
      assert.is_nil(metrics.cpu_ns { cpu = dir .. "/cpu/dsh-z" })
      assert.is_nil(metrics.cpu_ns { cpuacct = dir .. "/nothing" })
      local outside = helpers.tmpdir()
      put(outside .. "/cpuacct.usage", "42\n")
      assert.is_nil(metrics.cpu_ns { cpuacct = outside })
      assert.is_nil(metrics.cpu_ns { cpuacct = dir .. "/../" .. outside:match("[^/]+$") })
      assert.same({}, { metrics.memory {} })
      helpers.rm_rf(outside)
    end)

    it("disk: allocated blocks, a hard link once, a symlink not followed; too many entries is nil", function()
      local home = dir .. "/home"
      put(home .. "/a/big", string.rep("x", 300000))
      put(home .. "/small", "y")
      assert(lfs.link(home .. "/a/big", home .. "/a/big-again"))
      assert(lfs.link("/usr", home .. "/usr-link", true))
      local p = assert(proc.spawn { argv = { "du", "-s", "-B1", home }, stdout = "pipe" })
      local du = tonumber(p:read_all():match("^(%d+)"))
      p:wait()
      p:close()
      local top = lfs.attributes(home).blocks * 512 -- du counts the directory itself too
      assert.equal(du - top, metrics.disk_used { home })
      local saved_max = metrics.MAX_DISK_ENTRIES
      metrics.MAX_DISK_ENTRIES = 3
      local ok, v = pcall(metrics.disk_used, { home })
      metrics.MAX_DISK_ENTRIES = saved_max
      assert(ok, v)
      assert.is_nil(v)
    end)
  end)
end)
