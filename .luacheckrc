std = "luajit"
max_line_length = 110
codes = true
exclude_files = { "build*/**", "node_modules/**" }
files["spec/**/*.lua"] = { std = "+busted" }
