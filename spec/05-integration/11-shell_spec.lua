-- `dsh shell ID` through a real terminal: tmux (on a private socket) runs the
-- command in a pane of a given size; keys are typed with send-keys and the
-- screen is read with capture-pane. Raw mode, resizing, detaching with
-- Ctrl-], re-attaching with the scrollback replayed, and the exit status.
local helpers = require "helpers"
local proc = require "dsh.core.proc"
local sandbox = require "dsh.sandbox"

local SOCKET = "dsh-spec-" .. require("dsh.core.sysutil").random_hex(4)

local function run(argv)
  local p = assert(proc.spawn { argv = argv, env = { PATH = os.getenv("PATH") or "/usr/bin:/bin",
    TERM = "xterm-256color", HOME = os.getenv("HOME") or "/tmp" }, stdout = "pipe", stderr = "pipe" })
  local out = p:read_all()
  local st = p:wait()
  p:close()
  return st.exit_code, out
end

local function tmux(...)
  return run { "tmux", "-L", SOCKET, ... }
end

local function screen(target)
  local _, out = tmux("capture-pane", "-p", "-t", target)
  return out
end

local function wait_screen(target, text)
  return helpers.eventually(function() return screen(target):find(text, 1, true) end, 30000, 20)
end

-- The status a pane's command wrote to file, once it is all there (the
-- shell creates the file before echo writes to it).
local function status_of(file)
  return helpers.eventually(function()
    local s = helpers.read_file(file)
    return s and s:sub(-1) == "\n" and s
  end, 10000)
end

-- A pane running `dsh shell [flags] id`; its exit status goes to status_file.
local function pane(name, id, status_file, flags)
  local cmd = table.concat({
    "DSH_STATE_DIR=" .. os.getenv("DSH_STATE_DIR"), "DSH_BUILD_DIR=" .. helpers.build,
    "LUA_PATH='" .. package.path .. "'", helpers.root .. "/bin/dsh", "shell", flags or "", id,
  }, " ") .. "; echo $? > " .. status_file .. "; sleep 30"
  assert.equal(0, (tmux("new-session", "-d", "-s", name, "-x", "100", "-y", "30", cmd)))
end

setup(helpers.isolate_state)
teardown(function()
  helpers.run(function() tmux("kill-server") end)
  helpers.restore_state()
end)

describe("dsh shell", function()
  before_each(helpers.snapshot)
  after_each(helpers.assert_clean)

  it("attaches, resizes, detaches, re-attaches with the scrollback and exits with the shell's status", function()
    helpers.run(function()
      local dir = helpers.tmpdir()
      local sb = assert(sandbox.create { timeoutMs = 600000 })
      local id = sb.id
      sb:close()
      local ok, err = xpcall(function()
        pane("one", id, dir .. "/status1")
        assert.truthy(wait_screen("one", ":~$"), screen("one"))
        -- raw mode: the remote line editor echoes; Ctrl-C reaches the remote job
        tmux("send-keys", "-t", "one", "echo hello-$((6*7)); stty size", "Enter")
        assert.truthy(wait_screen("one", "hello-42\n30 100\n"), screen("one"))
        -- the job says when it runs (a ^C before could reach the shell's fork with its handlers)
        tmux("send-keys", "-t", "one", "sh -c 'echo job-$((6*7)); exec sleep 30'", "Enter")
        assert.truthy(wait_screen("one", "job-42"), screen("one"))
        tmux("send-keys", "-t", "one", "C-c")
        tmux("send-keys", "-t", "one", "echo after=$?", "Enter")
        assert.truthy(wait_screen("one", "after=130"), screen("one"))
        -- SIGWINCH resizes the remote terminal
        -- asked until the new size has crossed to the sandbox
        tmux("resize-window", "-t", "one", "-x", "120", "-y", "32")
        assert.truthy(helpers.eventually(function()
          tmux("send-keys", "-t", "one", "stty size", "Enter")
          return helpers.eventually(function() return screen("one"):find("32 120", 1, true) end, 500, 20)
        end, 30000), screen("one"))
        -- detach: the command ends with 0, the shell lives on
        tmux("send-keys", "-t", "one", "C-]")
        assert.truthy(status_of(dir .. "/status1"))
        assert.equal("0\n", helpers.read_file(dir .. "/status1"))
        assert.truthy(screen("one"):find("detached; the shell keeps running", 1, true))
        local c = assert(sandbox.connect(id))
        local tagged = 0
        for _, p in ipairs(assert(c.envd:list())) do
          if p.tag == "dsh-shell" then tagged = tagged + 1 end
        end
        c:close()
        assert.equal(1, tagged)
        -- re-attach: what was printed before is replayed
        pane("two", id, dir .. "/status2")
        assert.truthy(wait_screen("two", "after=130"), screen("two"))
        assert.truthy(screen("two"):find("hello-42", 1, true))
        tmux("send-keys", "-t", "two", "exit 5", "Enter")
        assert.truthy(status_of(dir .. "/status2"))
        assert.equal("5\n", helpers.read_file(dir .. "/status2"))
      end, debug.traceback)
      tmux("kill-server")
      assert(sandbox.kill(id))
      helpers.rm_rf(dir)
      if not ok then error(err, 0) end
    end)
  end)

  it("re-attaches after a program queried the terminal: nothing is typed into the shell; --cwd is not ignored",
    function()
      helpers.run(function()
        local dir = helpers.tmpdir()
        local sb = assert(sandbox.create { timeoutMs = 600000 })
        local id = sb.id
        sb:close()
        local ok, err = xpcall(function()
          pane("q1", id, dir .. "/status1")
          assert.truthy(wait_screen("q1", ":~$"), screen("q1"))
          -- the program asks for the cursor position and the device attributes, and reads the answers
          tmux("send-keys", "-t", "q1", [[MARK=mark-42; printf '\033[6n\033[c'; read -rs -t 5 -d c a; echo asked-$?]],
            "Enter")
          assert.truthy(wait_screen("q1", "asked-0"), screen("q1"))
          tmux("send-keys", "-t", "q1", "C-]")
          assert.truthy(status_of(dir .. "/status1"))
          -- re-attach: the replay holds both queries again; tmux must not be made to answer them into the shell
          pane("q2", id, dir .. "/status2")
          assert.truthy(wait_screen("q2", "asked-0"), screen("q2"))
          tmux("send-keys", "-t", "q2", [[echo "M=$MARK"]], "Enter")
          assert.truthy(wait_screen("q2", "\nM=mark-42\n"), screen("q2"))
          assert.falsy(screen("q2"):find("not found", 1, true), screen("q2"))
          tmux("send-keys", "-t", "q2", "C-]")
          assert.truthy(status_of(dir .. "/status2"))
          -- --cwd with a detached shell: refused, saying what to do
          pane("q3", id, dir .. "/status3", "--cwd /tmp")
          assert.truthy(status_of(dir .. "/status3"))
          assert.equal("1\n", helpers.read_file(dir .. "/status3"))
          assert.truthy(wait_screen("q3", "--cwd applies to a new one only; add --new"), screen("q3"))
          -- with --new it starts a shell there
          pane("q4", id, dir .. "/status4", "--new --cwd /tmp")
          assert.truthy(wait_screen("q4", ":/tmp$"), screen("q4"))
          tmux("send-keys", "-t", "q4", "exit 3", "Enter")
          assert.truthy(status_of(dir .. "/status4"))
          assert.equal("3\n", helpers.read_file(dir .. "/status4"))
        end, debug.traceback)
        tmux("kill-server")
        assert(sandbox.kill(id))
        helpers.rm_rf(dir)
        if not ok then error(err, 0) end
      end)
    end)
end)
