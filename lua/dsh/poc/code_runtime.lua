--- make poc's Code Mode steps: on the poc's composed context, add
-- ctx.codeRuntime (code-runtime-e2b), then run a Lua program and a
-- TypeScript program in the sandbox whose binding calls are served here,
-- and show that a program cannot forge frames or leave processes behind.
local M = {}

local CODE = { computeMs = 1000, maxWallMs = 20000, maxOutputBytes = 65536, killGraceMs = 500,
  luaLibraries = { "io", "os" } }

local function fail(fmt, ...) error({ poc = string.format(fmt, ...) }, 0) end

-- Bindings over the same world: what the program reads is what ctx.fs wrote.
local function bindings(ctx)
  return { {
    global = "tools",
    functions = {
      readFile = function(path)
        local t, err = ctx.fs:readText(path)
        if not t then error(err.message, 0) end
        return t.text
      end,
      double = function(x) return x * 2 end,
    },
    errorClass = { name = "ToolCallError", memberNameProperty = "toolName" },
  } }
end

local function run(state, o)
  local r = state.ctx.codeRuntime:run(o)
  if r.error then fail("%s: %s", r.error.kind, r.error.message) end
  return r
end

--- The steps, in poc.lua's shape ({title, fn}); state.ctx is the started context.
function M.steps(state)
  return {
    { "add ctx.codeRuntime (Code Mode runners uploaded to the sandbox)", function()
      local ctx = state.ctx
      ctx:use(require "dsh.providers.code_runtime_e2b", CODE)
      local ok, err = ctx:start()
      if not ok then fail("%s", tostring(err)) end
      local r = run(state, { program = "return 1" })
      if r.value ~= 1 then fail("a first run returned %s", tostring(r.value)) end
      return "runners in " .. ctx.e2b.runtimeRoot .. ", languages lua, typescript, javascript"
    end },
    { "Code Mode, Lua: a program reads a file through a host binding", function()
      local r = run(state, { language = "lua", bindings = bindings(state.ctx), program = [[
        local text = tools.readFile("from-fs.txt")
        print("read " .. #text .. " bytes")
        return { text = text, doubled = tools.double(21) }]] })
      if not (r.value and r.value.text == "written-by-fs\n" and r.value.doubled == 42) then
        fail("unexpected value")
      end
      return string.format('logs ["%s"], value {text = "written-by-fs\\n", doubled = 42}', r.logs[1])
    end },
    { "Code Mode, TypeScript: the same in a Node worker thread", function()
      local r = state.ctx.codeRuntime:run { language = "typescript", bindings = bindings(state.ctx), program = [[
        const text: string = await tools.readFile("from-fs.txt");
        console.log(`read ${text.length} bytes`);
        try { await tools.readFile("missing.txt"); } catch (e) {
          console.log(e instanceof ToolCallError ? `ToolCallError from ${e.toolName}` : "untyped");
        }
        return { text, doubled: await tools.double(21) };]] }
      if r.error then
        if r.error.message:find("needs Node.js", 1, true) then
          return "skipped: " .. r.error.message .. " (run scripts/install-node)"
        end
        fail("%s: %s", r.error.kind, r.error.message)
      end
      if not (r.value and r.value.text == "written-by-fs\n" and r.value.doubled == 42) then fail("unexpected value") end
      return table.concat(r.logs, "; ")
    end },
    { "Code Mode: forged frames are logs; no process outlives a run", function()
      local r = run(state, { program = [[
        io.stdout:write("eyJ0eXBlIjoiZG9uZSIsInZhbHVlIjpbMV19\n") io.stdout:flush()
        os.execute("echo from-a-child; sleep 300 &")
        return "real result"]] })
      if r.value ~= "real result" then fail("the forged frame won: %s", tostring(r.value)) end
      local ps = state.ctx.e2b:exec { "/bin/bash", "-c", "ps -eo args=" }
      if not ps or ps.stdout:find("sleep 300", 1, true) or ps.stdout:find("code-runtime-", 1, true) then
        fail("a process survived the run")
      end
      return string.format('value "%s"; logs "%s"', r.value, (table.concat(r.logs):gsub("\n", "\\n")))
    end },
    { "Code Mode: CPU and output limits end runs with their kind", function()
      local cr = state.ctx.codeRuntime
      local kinds = {}
      for _, p in ipairs {
        "while true do end",
        "print(string.rep('x', 100000))",
      } do
        local r = cr:run { program = p }
        kinds[#kinds + 1] = r.error and r.error.kind or "none"
      end
      if kinds[1] ~= "timeout" or kinds[2] ~= "output-limit" then fail("kinds %s", table.concat(kinds, ",")) end
      return "busy loop -> timeout (computeMs 1000), 100 KB of output -> output-limit (64 KiB)"
    end },
  }
end

return M
