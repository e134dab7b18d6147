--- dsh.poc.lsp: `make poc`'s language-server steps, run on the poc's composed
-- context (state.ctx, with ctx.e2b, ctx.fs, ctx.subprocess and ctx.bash)
-- after its own steps and before disposal. Real clangd runs in the sandbox:
-- a file written through ctx.fs is what it analyses, positions are exact
-- UTF-16 columns past CJK and emoji, an edit made by Bash shows up in its
-- diagnostics, and a source that leads outside the workspace is refused.
local lsp = require "dsh.lsp"
local tool = require "dsh.tools.lsp"

local M = {}

local SOURCE = table.concat({
  "/* 面积 🙂 — CJK and emoji before the symbol */",
  "static int square_area(int side) { return side * side; }",
  'int total(void) { const char *t = "你好🚀"; return square_area(3) + (t[0] == 0); }',
  "",
}, "\n")

local function check(cond, fmt, ...)
  if not cond then error({ poc = string.format(fmt, ...) }, 0) end
end

local function ok_or(v, err, what)
  if v == nil then error({ poc = (what and what .. ": " or "") .. tostring(err) }, 0) end
  return v
end

--- The steps: {title, fn} each; fn returns a line to show or raises {poc = why}.
function M.steps(state)
  local function ws() return state.ctx.e2b.cwd end
  local function run(input)
    return ok_or(tool.run(state.ctx, input, { workspaceRoot = ws() }))
  end
  return {
    { "add ctx.lsp with clangd running in the sandbox", function()
      local ctx = state.ctx
      ctx:use(lsp.provider)
      ctx:use(require "dsh.providers.lsp_e2b", { servers = {
        clangd = { command = "clangd", args = { "--log=error" }, extensionToLanguage = { [".c"] = "c", [".h"] = "c" } },
      } })
      ok_or(ctx:start())
      return "servers: " .. table.concat(ctx.lsp:providers(), ", ") .. " (.c, .h)"
    end },
    { "clangd analyses what ctx.fs wrote, at exact UTF-16 columns", function()
      ok_or(state.ctx.fs:writeText("area.c", SOURCE))
      local call = lsp.position.from_index(SOURCE, (SOURCE:find("square_area(3)", 1, true)))
      local text = run { operation = "goToDefinition", file_path = "area.c", line = call.line + 1,
        character = call.character + 1 }
      check(text == "area.c:2:12: static int square_area(int side) { return side * side; }",
        "definition rendered as %q", text)
      local hover = run { operation = "hover", file_path = "area.c", line = call.line + 1,
        character = call.character + 1 }
      check(hover:find("static int square_area(int side)", 1, true), "hover was %q", hover)
      return string.format("call at 3:%d (UTF-16; byte column %d) -> %s", call.character + 1,
        SOURCE:find("square_area(3)", 1, true) - SOURCE:find("int total", 1, true) + 1, text:match("^[^:]+:%d+:%d+"))
    end },
    { "Bash breaks the file: diagnostics say so; ctx.fs repairs it", function()
      local r = ok_or(state.ctx.bash:run { command = "sed -i 's/side \\* side/side * sidee/' area.c" })
      check(r.exitCode == 0, "sed exited %s", tostring(r.exitCode))
      local broken = run { operation = "diagnostics", file_path = "area.c" }
      check(broken:find("error: Use of undeclared identifier 'sidee'", 1, true), "diagnostics were %q", broken)
      ok_or(state.ctx.fs:writeText("area.c", SOURCE))
      local fixed = run { operation = "diagnostics", file_path = "area.c" }
      check(fixed == "No diagnostics.", "after the repair: %q", fixed)
      for l in broken:gmatch("[^\n]+") do
        if l:match("^area%.c:%d+:%d+: error: ") then return l end
      end
      return broken
    end },
    { "a source that leads outside the workspace is refused", function()
      local r = ok_or(state.ctx.bash:run { command = "ln -sf /etc/hosts hosts.c" })
      check(r.exitCode == 0, "ln exited %s", tostring(r.exitCode))
      local v, err = tool.run(state.ctx, { operation = "hover", file_path = "hosts.c", line = 1, character = 1 },
        { workspaceRoot = ws() })
      check(v == nil and err and err.code == "LSP_INVALID_SOURCE", "got %s", tostring(v or err))
      return tool.render_error(err)
    end },
  }
end

return M
