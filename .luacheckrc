std = "luajit"
max_line_length = 120
codes = true
exclude_files = { "build*/**", "**/node_modules/**", "lua/dsh/providers/**" }
files["spec/**/*.lua"] = { std = "+busted" }
