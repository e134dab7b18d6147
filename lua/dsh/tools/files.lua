--- dsh.tools.files: the model-facing file tools over ctx.fs: read, write,
-- edit, list.
--
-- Paths are absolute or relative to ctx.fs's working directory (the
-- workspace). The tools keep, per context, the version of each file the model
-- last read or wrote (state.versions, keyed by the file's resolved path), and
-- use the seam's guards with it, so a model never overwrites what it has not
-- seen: write to an existing file it has not read fails (createIfAbsent, then
-- FS_NOT_OBSERVED), and write or edit of a file that changed since it read it
-- fails (replaceIfVersion / the edit's version, then FS_STALE_VERSION). Each
-- tool is {name, description, parameters, run(ctx, args, opts)}; run returns
-- text, nil, data or nil, err (the seam's FS_* codes; the registry renders
-- them, with a hint, for the model).
local errors = require "dsh.errors"
local input = require "dsh.tools._input"

local M = {}

M.DEFAULT_LIMIT = 2000       -- lines read returns when the model gives no limit
M.MAX_LINE_CHARS = 2000      -- bytes of one line read shows before cutting it
M.MAX_LIST_ENTRIES = 1000    -- entries list shows
M.MAX_READ_BYTES = 262144    -- text read returns (about; whole lines)

local PATH = { type = "string", description = "The file's path, absolute or relative to the workspace." }

-- nil, or an INVALID_ARGUMENT failure for a path no file can have.
local function bad_path(tool, path)
  if not path:find("%S") then return errors.new("INVALID_ARGUMENT", tool .. ": path must not be empty") end
  if path:find("%z") then return errors.new("INVALID_ARGUMENT", tool .. ": path must not contain a NUL byte") end
  return nil
end

-- The remembered versions of ctx (opts.state is the registry's per-context table).
local function versions(opts)
  local st = opts and opts.state
  if not st then return {} end
  st.versions = st.versions or {}
  return st.versions
end

local function key_of(fs, path)
  local r = fs:resolve(path)
  return r and r.targetKey, r and r.displayPath
end

local function split_lines(text)
  local lines = {}
  for line in (text:gsub("\r\n", "\n")):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  local last = text:match("[^\n]*$")
  if last ~= "" then lines[#lines + 1] = last end
  return lines
end

-- Cut a line (s: its first bytes, len: its whole length) to max bytes on a
-- UTF-8 boundary.
local function cut_line(s, len, max)
  if len <= max then return s end
  local i = max + 1
  while i > 1 and s:byte(i) and s:byte(i) >= 0x80 and s:byte(i) < 0xC0 do i = i - 1 end
  return s:sub(1, i - 1) .. string.format("… [line cut: %d bytes]", len)
end

local function numbered(lines, first, last)
  local out = {}
  for i = first, last do
    out[#out + 1] = string.format("%6d\t%s", i, cut_line(lines[i], #lines[i], M.MAX_LINE_CHARS))
  end
  return table.concat(out, "\n")
end

M.read = {
  name = "read",
  description = "Read a text file of the workspace. Lines are shown numbered (the number, a tab, then the "
    .. "line as it is in the file); by default the first " .. M.DEFAULT_LIMIT .. " lines, offset and limit "
    .. "read another range. Read a file before you write or edit it.",
  parameters = input.schema({
    path = PATH,
    offset = { type = "integer", minimum = 1, description = "The 1-based line to start at (default 1)." },
    limit = { type = "integer", minimum = 1, description = "How many lines to read (default "
      .. M.DEFAULT_LIMIT .. ")." },
  }, { "offset", "limit" }),
}

-- Stream the file, keeping only lines first..last (each at most
-- MAX_LINE_CHARS bytes and their whole length) while the kept text stays
-- within MAX_READ_BYTES, and count every line. Returns the stream's
-- {displayPath, targetKey, version}, the kept lines and the count.
local function read_lines(fs, path, first, last, opts)
  local s, err = fs:readTextStream(path, { signal = opts and opts.signal })
  if not s then return nil, err end
  local kept, bytes, n = {}, 0, 0
  local cur, cur_len, cr = {}, 0, false
  local function wanted() return n + 1 >= first and n + 1 <= last and bytes <= M.MAX_READ_BYTES end
  local function finish()
    n = n + 1
    if n >= first and n <= last and bytes <= M.MAX_READ_BYTES then
      local text = table.concat(cur)
      if cr then -- the CR of a CRLF line is not shown
        cur_len = cur_len - 1
        if #text > cur_len then text = text:sub(1, cur_len) end
      end
      kept[#kept + 1] = { text = text, len = cur_len, n = n }
      bytes = bytes + math.min(cur_len, M.MAX_LINE_CHARS) + 8
    end
    cur, cur_len, cr = {}, 0, false
  end
  local ok, perr = s:each(function(piece)
    local pos = 1
    while pos <= #piece do
      local nl = piece:find("\n", pos, true)
      local seg = piece:sub(pos, (nl or #piece + 1) - 1)
      local room = M.MAX_LINE_CHARS + 8 - cur_len
      if wanted() and room > 0 then cur[#cur + 1] = seg:sub(1, room) end
      cur_len = cur_len + #seg
      if #seg > 0 then cr = seg:byte(-1) == 13 end
      if nl then finish() end
      pos = nl and nl + 1 or #piece + 1
    end
  end)
  if not ok then return nil, perr end
  if cur_len > 0 then finish() end
  return s, kept, n
end

function M.read.run(ctx, args, opts)
  local perr = bad_path("read", args.path)
  if perr then return nil, perr end
  local first = args.offset or 1
  local last = first + (args.limit or M.DEFAULT_LIMIT) - 1
  local s, kept, total = read_lines(ctx.fs, args.path, first, last, opts)
  if not s then return nil, kept end
  versions(opts)[s.targetKey] = s.version
  local data = { path = s.displayPath, version = s.version, totalLines = total, startLine = 0, endLine = 0 }
  if total == 0 then return "(empty file)", nil, data end
  if first > total then
    return nil, errors.new("INVALID_ARGUMENT", string.format(
      "read: offset %d is past the end of the file (%d lines)", first, total))
  end
  local out = {}
  for i, l in ipairs(kept) do out[i] = string.format("%6d\t%s", l.n, cut_line(l.text, l.len, M.MAX_LINE_CHARS)) end
  local shown_last = kept[#kept].n
  data.startLine, data.endLine = first, shown_last
  local text = table.concat(out, "\n")
  if first > 1 or shown_last < total then
    text = text .. string.format("\n[lines %d-%d of %d%s%s]", first, shown_last, total,
      shown_last < last and shown_last < total and string.format("; output limit of %d bytes", M.MAX_READ_BYTES)
        or "", shown_last < total and string.format("; offset %d reads on", shown_last + 1) or "")
  end
  return text, nil, data
end

M.write = {
  name = "write",
  description = "Write a text file of the workspace, replacing it whole (missing parent directories are "
    .. "made). An existing file must have been read first, and must not have changed since; to change part "
    .. "of a file, use edit.",
  parameters = input.schema({
    path = PATH,
    content = { type = "string", description = "The file's whole new content." },
  }, {}),
}

function M.write.run(ctx, args, opts)
  local perr = bad_path("write", args.path)
  if perr then return nil, perr end
  local fs = ctx.fs
  local key, display = key_of(fs, args.path)
  local known = key and versions(opts)[key]
  local w, err = fs:writeText(args.path, args.content, { signal = opts and opts.signal,
    createIfAbsent = not known or nil, replaceIfVersion = known or nil })
  if not w then return nil, err end
  if key then versions(opts)[key] = w.version end
  local n = #split_lines(args.content)
  return string.format("%s %s (%d line%s, %d bytes)", w.operation == "create" and "Created" or "Updated",
    display or args.path, n, n == 1 and "" or "s", #args.content), nil,
    { path = display or args.path, operation = w.operation, version = w.version }
end

M.edit = {
  name = "edit",
  description = "Edit a text file of the workspace by exact string replacement: old_string (copied exactly "
    .. "from the file, whitespace and indentation included, without read's line numbers) is replaced by "
    .. "new_string. old_string must occur exactly once, unless replace_all is true; add surrounding lines to "
    .. "make it unique. Read the file first.",
  parameters = input.schema({
    path = PATH,
    old_string = { type = "string", description = "The exact text to replace." },
    new_string = { type = "string", description = "The text to put in its place." },
    replace_all = { type = "boolean", description = "Replace every occurrence (default false)." },
  }, { "replace_all" }),
}

-- The lines around the first change in after, numbered (at most 12 lines).
local function excerpt(after, new_string)
  local at = after:find(new_string, 1, true)
  if not at or new_string == "" then return nil end
  local lines = split_lines(after)
  local first = select(2, after:sub(1, at - 1):gsub("\n", "")) + 1
  local last = first + select(2, new_string:gsub("\n$", ""):gsub("\n", ""))
  first, last = math.max(1, first - 2), math.min(#lines, last + 2)
  if last - first >= 12 then last = first + 11 end
  if first > last then return nil end
  return numbered(lines, first, last)
end

function M.edit.run(ctx, args, opts)
  local perr = bad_path("edit", args.path)
  if perr then return nil, perr end
  local fs = ctx.fs
  if args.old_string == args.new_string then
    return nil, errors.new("INVALID_ARGUMENT", "edit: old_string and new_string are the same")
  end
  local key, display = key_of(fs, args.path)
  local e, err = fs:editText(args.path, { oldString = args.old_string, newString = args.new_string,
    replaceAll = args.replace_all, version = key and versions(opts)[key] or nil }, { signal = opts and opts.signal })
  if not e then return nil, err end
  if key then versions(opts)[key] = e.version end
  local text = string.format("Edited %s: %d replacement%s.", display or args.path, e.replacements,
    e.replacements == 1 and "" or "s")
  local shown = excerpt(e.after, args.new_string:gsub("\r\n", "\n"))
  if shown then text = text .. "\n" .. shown end
  return text, nil, { path = display or args.path, version = e.version, replacements = e.replacements }
end

M.list = {
  name = "list",
  description = "List a directory of the workspace: one entry a line, directories ending in /, files with "
    .. "their size. Without path, the workspace itself.",
  parameters = input.schema({
    path = { type = "string", description = "The directory, absolute or relative to the workspace (default: "
      .. "the workspace)." },
  }, { "path" }),
}

function M.list.run(ctx, args, opts)
  local fs = ctx.fs
  local path = args.path or fs.cwd
  local perr = bad_path("list", path)
  if perr then return nil, perr end
  local entries, err = fs:listDir(path, { signal = opts and opts.signal })
  if not entries then return nil, err end
  local _, display = key_of(fs, path)
  if #entries == 0 then return "(empty directory)", nil, { path = display or path, entries = entries } end
  local out = {}
  for i, e in ipairs(entries) do
    if i > M.MAX_LIST_ENTRIES then
      out[#out + 1] = string.format("[%d more entries not shown]", #entries - M.MAX_LIST_ENTRIES)
      break
    end
    if e.type == "directory" then
      out[#out + 1] = e.name .. "/"
    elseif e.type == "file" then
      out[#out + 1] = string.format("%s (%d bytes)", e.name, e.size or 0)
    else
      out[#out + 1] = e.name .. " (" .. e.type .. ")"
    end
  end
  return table.concat(out, "\n"), nil, { path = display or path, entries = entries }
end

M.order = { "read", "write", "edit", "list" }

return M
