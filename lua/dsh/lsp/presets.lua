--- dsh.lsp.presets: ready configurations for common language servers.
--
--   servers = { clangd = {}, py = { preset = "pyright" },
--               ts = { preset = "typescript", command = "/opt/ts/bin/typescript-language-server" } }
--
-- A server config names a preset with `preset` (or is called like one and
-- gives no command); every key it sets replaces the preset's. Each preset
-- has the command and its arguments, the extensions it serves with their
-- language ids, the marker files that make a directory a project root (the
-- nearest one from a file up to the workspace is the server's root), the
-- settings answered to workspace/configuration (by section) and sent once
-- as workspace/didChangeConfiguration, and `install`: what to install when
-- the command is missing (the message of the missing server says it).
-- docs/language-servers.md describes each one's settings.
local schema = require "dsh.schema"

local M = {}

local C_EXT = { [".c"] = "c", [".h"] = "c", [".cc"] = "cpp", [".cpp"] = "cpp", [".cxx"] = "cpp",
  [".hpp"] = "cpp", [".hh"] = "cpp", [".hxx"] = "cpp" }

M.clangd = {
  command = "clangd", args = { "--log=error" }, extensionToLanguage = C_EXT,
  rootMarkers = { "compile_commands.json", "compile_flags.txt", ".clangd" },
  install = "the clangd package (Debian: apt-get install clangd)",
}

M.pyright = {
  command = "pyright-langserver", args = { "--stdio" },
  extensionToLanguage = { [".py"] = "python", [".pyi"] = "python" },
  rootMarkers = { "pyrightconfig.json", "pyproject.toml", "setup.py", "setup.cfg", "requirements.txt" },
  configuration = { python = { analysis = { autoSearchPaths = true, useLibraryCodeForTypes = true,
    diagnosticMode = "openFilesOnly" } } },
  organizeImportsCommand = "pyright.organizeimports", -- it offers no source.organizeImports action
  -- it takes in new and removed files a moment later, and logs "Found 3 source files" then
  changeMessages = { "source file" },
  install = "the npm package pyright (npm install -g pyright)",
}

M.pylsp = {
  command = "pylsp", args = {},
  extensionToLanguage = { [".py"] = "python", [".pyi"] = "python" },
  rootMarkers = { "pyproject.toml", "setup.py", "setup.cfg", "requirements.txt" },
  configuration = { pylsp = { plugins = { pycodestyle = { enabled = false }, mccabe = { enabled = false },
    pyflakes = { enabled = true } } } },
  install = "python-lsp-server (Debian: apt-get install python3-pylsp; or pip install python-lsp-server)",
}

M.typescript = {
  command = "typescript-language-server", args = { "--stdio" },
  extensionToLanguage = { [".ts"] = "typescript", [".tsx"] = "typescriptreact", [".mts"] = "typescript",
    [".cts"] = "typescript", [".js"] = "javascript", [".jsx"] = "javascriptreact", [".mjs"] = "javascript",
    [".cjs"] = "javascript" },
  rootMarkers = { "tsconfig.json", "jsconfig.json", "package.json" },
  -- tsserver hears of changes from the client's watch (dsh's) instead of watching files itself
  initializationOptions = { tsserver = { useClientFileWatcher = true } },
  -- but drops a change to a file it made no watcher for yet (while the project loads): a changed
  -- file is also shown to it once, which makes it read the file again
  reopenChanged = true,
  -- it publishes syntax, semantic and suggestion diagnostics one after the other, unversioned
  diagnosticsQuietMs = 500,
  install = "the npm packages typescript-language-server and typescript "
    .. "(npm install -g typescript-language-server typescript)",
}

M.gopls = {
  command = "gopls", args = {}, extensionToLanguage = { [".go"] = "go" },
  rootMarkers = { "go.work", "go.mod" },
  configuration = { gopls = {} },
  install = "gopls and the go command (Debian: apt-get install gopls golang-go)",
}

M.bash = {
  command = "bash-language-server", args = { "start" },
  extensionToLanguage = { [".sh"] = "shellscript", [".bash"] = "shellscript" },
  rootMarkers = {},
  configuration = { bashIde = { backgroundAnalysisMaxFiles = 500 } },
  -- it takes no watched-file notifications: a changed script is shown to it again
  reopenChanged = true,
  -- it reports no progress; its log says when the workspace's scripts were analysed
  readyMessages = { "BackgroundAnalysis: Completed", "BackgroundAnalysis: skipping", "BackgroundAnalysis: stopped",
    "BackgroundAnalysis: failed" },
  install = "the npm package bash-language-server (npm install -g bash-language-server; "
    .. "Debian's shellcheck adds diagnostics)",
}

M["rust-analyzer"] = {
  command = "rust-analyzer", args = {}, extensionToLanguage = { [".rs"] = "rust" },
  rootMarkers = { "Cargo.toml", "rust-project.json" },
  configuration = { ["rust-analyzer"] = {} },
  install = "rust-analyzer (rustup component add rust-analyzer; Debian 12 has no package)",
}

--- Preset names, sorted.
function M.names()
  local out = {}
  for k, v in pairs(M) do
    if type(v) == "table" then out[#out + 1] = k end
  end
  table.sort(out)
  return out
end

local copy = schema.copy

--- A fresh copy of preset `name`, or nil.
function M.get(name)
  local p = type(name) == "string" and rawget(M, name)
  if type(p) ~= "table" then return nil end
  return copy(p)
end

return M
