--- dsh.app.poc.lsp: `make poc`'s language-server steps of the reference's live
-- composition (§6.2 B 6-8) on the composed context's ctx.lsp, with real
-- clangd running in the sandbox: hover and definition at exact UTF-16
-- positions past CJK, accents and emoji in a file named with a space and a #,
-- a source swapped for a symlink to /etc/hosts right before the read, and a
-- source one byte over the reader's 4000000-byte limit.
local C = require "dsh.app.poc.check"
local lsp = require "dsh.lsp"

local M = {}
local check, ok_or = C.check, C.ok_or

M.SERVERS = {
  clangd = { command = "clangd", args = { "--log=error" }, extensionToLanguage = { [".c"] = "c" },
    shutdownTimeoutMs = 1000, killGraceMs = 500 },
}

local FILE = "multibyte # file.c"
local SOURCE = table.concat({
  '/* 你好 café 🙂 */ static int square_area(int side) { return side * side; }',
  'int total(void) { const char *t = "你好 café 🚀"; return square_area(3) + (t[0] == 0); }',
  "",
}, "\n")

local function query(state, req)
  req.workspaceRoot = state.ctx.e2b.cwd
  return state.ctx.lsp:query(req)
end

--- The steps, {label, title, fn} each; state.ctx is the composed context.
function M.steps(state)
  return {
    { "6", "hover and definition across multibyte text (clangd in the sandbox)", function()
      ok_or(state.ctx.fs:writeText(FILE, SOURCE))
      local call = lsp.position.from_index(SOURCE, (SOURCE:find("square_area(3)", 1, true)))
      local decl = lsp.position.from_index(SOURCE, (SOURCE:find("square_area", 1, true)))
      local h, err = query(state, { operation = "hover", filePath = FILE, position = call })
      ok_or(h, err, "hover")
      local contents = type(h.hover) == "table" and tostring(h.hover.contents) or ""
      check(contents:find("square_area", 1, true) and contents:find("int side", 1, true), "hover was %s",
        C.show(contents))
      local d, derr = query(state, { operation = "goToDefinition", filePath = FILE, position = call })
      ok_or(d, derr, "goToDefinition")
      local range = d.locations and d.locations[1] and d.locations[1].range
      check(range and range.start.line == 0 and range.start.character == decl.character
        and range["end"].character == decl.character + #"square_area",
        "the definition's range was %s", range and string.format("%d:%d-%d:%d", range.start.line,
          range.start.character, range["end"].line, range["end"].character) or "missing")
      check(d.locations[1].uri == lsp.uri.from_path(state.ctx.e2b.cwd .. "/" .. FILE), "the uri was %s",
        tostring(d.locations[1].uri))
      return string.format("hover at 1:%d names square_area(int side); definition 0:%d-0:%d (UTF-16; byte %d)",
        call.character, range.start.character, range["end"].character, SOURCE:find("square_area", 1, true) - 1)
    end },
    { "7", "a source swapped for a symlink right before the read is refused", function()
      ok_or(state.ctx.fs:writeText("swapped.c", "int x;\n"))
      local swap_err
      state.ctx.lsp:injectFault("beforeRead", function(path)
        state.ctx.lsp:injectFault("beforeRead", nil)
        local r, err = state.ctx.bash:run { command = "rm -- '" .. path .. "' && ln -s /etc/hosts '" .. path .. "'" }
        if not r or r.exitCode ~= 0 then swap_err = tostring(err or r.stderr.text) end
      end)
      local v, err = query(state, { operation = "hover", filePath = "swapped.c",
        position = { line = 0, character = 4 } })
      state.ctx.lsp:injectFault("beforeRead", nil)
      check(swap_err == nil, "the swap failed: %s", tostring(swap_err))
      check(v == nil and err and err.code == "LSP_INVALID_SOURCE" and err.message:find("opened safely", 1, true),
        "the query gave %s", tostring(v and "a result" or err))
      return err.code .. ": " .. err.message
    end },
    { "8", "a source over the 4000000-byte limit is refused", function()
      local sb = ok_or(state.ctx.e2b:getSandbox())
      ok_or(sb.envd:write_file(state.ctx.e2b.cwd .. "/big.c", ("a"):rep(4000001)))
      local v, err = query(state, { operation = "hover", filePath = "big.c", position = { line = 0, character = 0 } })
      check(v == nil and err and err.code == "LSP_INVALID_SOURCE"
        and err.message == 'source "big.c" is 4000001 bytes, over the 4000000-byte limit',
        "the query gave %s", tostring(v and "a result" or err))
      return err.message
    end },
  }
end

return M
