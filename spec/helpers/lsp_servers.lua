--- Real language servers in one real local sandbox per spec file
-- (spec/07-language-servers): the servers scripts/install-deps installs
-- (Debian: clangd, python3-pylsp, gopls; npm, by scripts/install-lsp-servers:
-- pyright, typescript-language-server, bash-language-server, run by the
-- project's Node).
--
--   local S = require "helpers.lsp_servers"
--   describe("pyright", function()
--     local W = S.world("pyright")        -- in setup: sandbox, ctx.fs, ctx.lsp with that server
--     it("...", function() S.run(function()
--       W.write("lib.py", "...")           -- through ctx.fs
--       W.sh("printf x > lib.py")          -- through Bash in the workspace
--       local r = W.q("hover", "main.py", "größe(", { ... })  -- position of a needle in the file's text
--     end) end)
--   end)
--
-- The world lives for the describe block: setup starts it, teardown
-- disposes it and checks that nothing it made is left (no live object, no
-- process group, no fd); tests use files of their own in the one workspace.
local D = require "helpers.dshd"
local helpers = require "helpers"
local lsp = require "dsh.lsp"
local node = require "dsh.node"
local sys = require "dsh.core.sysutil"

local M = {}

--- The directory scripts/install-lsp-servers installed into, or nil.
function M.npm_dir()
  local env = os.getenv("DSH_LSP_DIR")
  local list = {}
  if env and env ~= "" then list[1] = env end
  list[#list + 1] = "/usr/local/lib/dsh/lsp"
  local home = os.getenv("HOME")
  if home then list[#list + 1] = home .. "/.local/lib/dsh/lsp" end
  for _, d in ipairs(list) do
    if d and sys.exists(d .. "/node_modules/pyright/package.json") then return d end
  end
  return nil
end

local NPM = {
  pyright = { "pyright/langserver.index.js", "--stdio" },
  typescript = { "typescript-language-server/lib/cli.mjs", "--stdio" },
  bash = { "bash-language-server/out/cli.js", "start" },
}

-- A local sandbox sees the host's /usr read-only at the same path.
local function visible(path)
  return path:sub(1, 5) == "/usr/"
end

--- The server config of preset `kind` as the sandbox runs it.
function M.server(kind, extra)
  local s = { preset = kind }
  local npm = NPM[kind]
  if npm then
    local dir = assert(M.npm_dir(), "the npm language servers are not installed: run scripts/install-lsp-servers")
    local bin = assert(node.bin(), "the project's Node is not installed: run scripts/install-node")
    assert(visible(dir) and visible(bin), "the npm language servers and Node must be under /usr (root installs) "
      .. "for local sandboxes to see them; found " .. dir .. " and " .. bin)
    s.command, s.args = bin, { dir .. "/node_modules/" .. npm[1], npm[2] }
  end
  for k, v in pairs(extra or {}) do s[k] = v end
  return s
end

--- In a describe block: one sandbox with ctx.fs, ctx.bash's subprocess and
--- ctx.lsp running the servers {[id] = server config} (or one preset name).
function M.world(servers)
  if type(servers) == "string" then servers = { [servers] = M.server(servers) } end
  local env = getfenv(2) -- busted's setup and teardown live in the calling spec's environment
  local W = {}
  env.setup(function()
    helpers.isolate_state()
    helpers.snapshot()
    helpers.run(function()
      W.ctx = helpers.start_context {
        { require "dsh.providers.e2b", {} }, require "dsh.providers.subprocess_e2b", require "dsh.providers.fs_e2b",
        lsp.provider, { require "dsh.providers.lsp_e2b", { servers = servers } },
      }
      W.ws = W.ctx.e2b.cwd
      W.lsp = W.ctx.lsp
    end)
  end)
  env.teardown(function()
    if W.ctx then helpers.run(function() assert(W.ctx:dispose()) end) end
    W.ctx = nil
    helpers.assert_clean()
    helpers.restore_state()
  end)

  --- Write rel (in the workspace) through ctx.fs.
  function W.write(rel, text)
    assert(W.ctx.fs:writeText(W.ws .. "/" .. rel, text))
  end

  --- The text of rel through ctx.fs.
  function W.read(rel)
    return assert(W.ctx.fs:readText(W.ws .. "/" .. rel)).text
  end

  --- Run a shell command in the workspace (as Bash would): its stdout; fails on a non-zero status.
  function W.sh(cmd, stdin)
    local r = assert(W.ctx.e2b:exec({ "bash", "-c", cmd }, { cwd = W.ws, stdin = stdin }))
    assert(r.exit_code == 0, "`" .. cmd .. "` failed: " .. tostring(r.stderr))
    return r.stdout
  end

  --- The position of the n-th occurrence of needle in rel's text (offset
  --- adds UTF-16 units).
  function W.at(rel, needle, n, offset)
    local text = W.read(rel)
    local i = 0
    for _ = 1, n or 1 do i = assert(text:find(needle, i + 1, true), needle .. " not in " .. rel) end
    local p = lsp.position.from_index(text, i)
    p.character = p.character + (offset or 0)
    return p
  end

  --- A query: op on rel, at needle (a string: its first occurrence; a
  --- table: a position; nil: none), with more request fields.
  function W.q(op, rel, needle, more)
    local req = { operation = op, filePath = rel, workspaceRoot = more and more.workspaceRoot or W.ws }
    if type(needle) == "string" then req.position = W.at(rel, needle) elseif needle then req.position = needle end
    for k, v in pairs(more or {}) do
      if k ~= "workspaceRoot" then req[k] = v end
    end
    return W.lsp:query(req, { timeoutMs = 120000 })
  end

  --- Diagnostics of rel once settled (a ceiling of 60 s).
  function W.diagnostics(rel, more)
    local r = assert(W.q("diagnostics", rel, nil, { waitMs = 60000, workspaceRoot = more and more.workspaceRoot }))
    return r
  end

  --- The messages of rel's diagnostics, sorted, one string.
  function W.messages(rel, more)
    local r = W.diagnostics(rel, more)
    local out = {}
    for _, d in ipairs(r.diagnostics) do out[#out + 1] = d.message end
    table.sort(out)
    return table.concat(out, "\n"), r
  end

  --- The workspace paths of a location result, "file:line:col" (1-based), sorted.
  function W.places(r)
    local out = {}
    for _, l in ipairs(r.locations) do
      local p = lsp.uri.to_path(l.uri)
      local rel = p and p:sub(1, #W.ws + 1) == W.ws .. "/" and p:sub(#W.ws + 2) or p
      out[#out + 1] = string.format("%s:%d:%d", rel, l.range.start.line + 1, l.range.start.character + 1)
    end
    table.sort(out)
    return out
  end

  --- The most file descriptors one process of server id's groups holds
  --- now (its servers' process groups in the sandbox), and how many processes.
  function W.max_fds(id)
    local most, procs = 0, 0
    for _, inst in pairs(W.lsp._by_id[id]._pool) do
      local out = W.sh("for p in $(pgrep -g " .. inst._h.pid .. "); do ls /proc/$p/fd | wc -l; done")
      for n in out:gmatch("%d+") do
        procs = procs + 1
        most = math.max(most, tonumber(n))
      end
    end
    return most, procs
  end

  --- In a describe block: a test that the server's processes stay within a
  --- sandbox's limits (RLIMIT_NOFILE about 600 per process): at most 300 fds.
  function W.within_limits(id)
    env.it("runs within the sandbox's limits (at most 300 open files per process)", function()
      M.run(function()
        local most, procs = W.max_fds(id)
        assert(procs > 0, "no process of " .. id .. " found")
        assert(most <= 300, id .. " holds " .. most .. " fds in one process")
      end)
    end)
  end

  return W
end

--- Run fn as a task (tests in a shared world check leaks once, in teardown).
M.run = helpers.run
M.D = D

return M
