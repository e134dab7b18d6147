--- dsh.fs.hosttree: a directory tree of this host as a tar stream, and a
-- tar stream made into a tree of this host (ctx.fs uploadTree and
-- downloadTree; fs-local's packTree and unpackTree).
--
-- walk() lists a tree (lstat: links are never followed; names sorted by
-- bytes; a file with other names in the tree is sent once, then as hard
-- links; sockets, FIFOs and devices are skipped and listed). source() turns
-- the list into tar chunks (dsh.fs._tar), reading each file as it goes.
--
-- extract() writes a tar stream it does not trust (it may come from a
-- sandbox): a member's name must be relative, without `..`, and it is never
-- written through a symlink — every directory on its way is a real one (made
-- here, or looked at with lstat), and the archive's own symlinks are made
-- last, after every file; a hard link must name a file this archive made.
-- Files are made afresh (exclusively, never following a link), what stood at
-- a name is replaced unless it is a directory; directory modes and times are
-- set at the end, deepest first, so a read-only directory still gets its
-- contents. Setuid and setgid bits are dropped: a tree from elsewhere never
-- makes a program that runs as this host's user (or root). Ownership is
-- never changed.
local bit = require "bit"
local errors = require "dsh.errors"
local hostfs = require "dsh.core.hostfs"
local lfs = require "lfs"
local tar = require "dsh.fs._tar"

local M = {}

M.CHUNK = 256 * 1024
M.PROGRESS_BYTES = 1024 * 1024 -- a long file reports its progress at least this often
M.MAX_PATH = 4095
local EEXIST = 17 -- open(O_EXCL) of a name that is taken

local E = function(code, msg) return errors.new(code, msg) end

local function io_error(err, what)
  local code = err.code == "not_found" and "FS_NOT_FOUND" or err.code == "permission_denied"
    and "FS_PERMISSION_DENIED" or "FS_IO_ERROR"
  return E(code, what .. ": " .. tostring(err.message))
end

local function aborted(signal)
  return signal and signal.aborted
end

-- Walking and sending ------------------------------------------------------------

---@class dsh.fs.TreeEntry
---@field rel string     path below the root ("" for the root itself)
---@field type string    "directory", "file", "symlink", "hardlink"
---@field mode integer
---@field size integer
---@field mtime integer
---@field link string|nil  a symlink's text, or the rel of a hard link's first name

--- The entries of the tree at root (a directory; root itself follows a
--- link), parents before children: entries, skipped (rel names), totals
--- {files=, bytes=}; or nil, err.
function M.walk(root)
  local st, err = hostfs.stat(root)
  if not st then return nil, io_error(err, root) end
  if st.type ~= "directory" then return nil, E("FS_NOT_DIRECTORY", '"' .. root .. '" is not a directory') end
  local out, skipped, seen = {}, {}, {}
  local totals = { files = 0, bytes = 0 }
  out[1] = { rel = "", type = "directory", mode = st.mode, size = 0, mtime = math.floor(tonumber(st.mtime)) }
  local function dir(rel)
    local names = {}
    local path = rel == "" and root or root .. "/" .. rel
    local ok, derr = pcall(function()
      for name in lfs.dir(path) do
        if name ~= "." and name ~= ".." then names[#names + 1] = name end
      end
    end)
    if not ok then
      local denied = tostring(derr):find("Permission denied", 1, true)
      return nil, E(denied and "FS_PERMISSION_DENIED" or "FS_IO_ERROR", tostring(derr))
    end
    table.sort(names)
    for _, name in ipairs(names) do
      local r = rel == "" and name or rel .. "/" .. name
      local p = root .. "/" .. r
      local s, serr = hostfs.lstat(p)
      if not s then return nil, io_error(serr, p) end
      local e = { rel = r, type = s.type, mode = s.mode, size = 0, mtime = math.floor(tonumber(s.mtime)) }
      if s.type == "directory" then
        out[#out + 1] = e
        local dok, err2 = dir(r)
        if not dok then return nil, err2 end
      elseif s.type == "symlink" then
        local target, lerr = hostfs.readlink(p)
        if not target then return nil, io_error(lerr, p) end
        e.link = target
        out[#out + 1] = e
      elseif s.type == "file" then
        local id = s.dev .. ":" .. s.ino
        if s.nlink > 1 and seen[id] then
          e.type, e.link = "hardlink", seen[id]
        else
          if s.nlink > 1 then seen[id] = r end
          e.size = s.size
          totals.files, totals.bytes = totals.files + 1, totals.bytes + s.size
        end
        out[#out + 1] = e
      else
        skipped[#skipped + 1] = r
      end
    end
    return true
  end
  local ok, derr = dir("")
  if not ok then return nil, derr end
  return out, skipped, totals
end

--- A source of tar chunks for the entries of root (from walk()): each call
--- returns the next chunk, nil at the end, or nil, err. progress(bytes,
--- files, rel) is called after each file and every PROGRESS_BYTES.
function M.source(root, entries, progress, signal)
  local i, f, left, cur = 0, nil, 0, nil
  local bytes, files, since = 0, 0, 0
  local done = false
  return function()
    if done then return nil end
    if aborted(signal) then return nil, E("FS_ABORTED", "upload aborted") end
    if f then
      if left > 0 then
        local chunk = f:read(math.min(M.CHUNK, left))
        if not chunk or #chunk == 0 then
          f:close()
          f = nil
          return nil, E("FS_IO_ERROR", '"' .. root .. "/" .. cur.rel .. '" shrank while it was being read')
        end
        left = left - #chunk
        bytes, since = bytes + #chunk, since + #chunk
        if since >= M.PROGRESS_BYTES and left > 0 then
          since = 0
          if progress then progress(bytes, files, cur.rel) end
        end
        return chunk
      end
      f:close()
      f = nil
      files, since = files + 1, 0
      if progress then progress(bytes, files, cur.rel) end
      local pad = tar.padding(cur.size)
      if pad ~= "" then return pad end
    end
    i = i + 1
    local e = entries[i]
    if not e then
      done = true
      return tar.TRAILER
    end
    cur = e
    local name = e.rel == "" and "./" or e.rel
    if e.type == "file" then
      local path = root .. "/" .. e.rel
      local fh, msg, errno = io.open(path, "rb")
      if not fh then
        return nil, E((errno == 13 or errno == 1) and "FS_PERMISSION_DENIED" or "FS_IO_ERROR", tostring(msg))
      end
      f, left = fh, e.size
    end
    return tar.header { name = name, type = e.type, mode = e.mode, size = e.size, mtime = e.mtime, link = e.link }
  end
end

--- src's chunks joined into pieces of at least size bytes (fewer, larger
--- writes for a tree of many small files); errors pass as they are.
function M.coalesce(src, size)
  local ended = false
  return function()
    if ended then return nil end
    local parts, n = {}, 0
    while n < size do
      local chunk, err = src()
      if chunk == nil then
        if err then return nil, err end
        ended = true
        break
      end
      parts[#parts + 1] = chunk
      n = n + #chunk
    end
    if n == 0 then return nil end
    return table.concat(parts)
  end
end

-- Extracting ------------------------------------------------------------------------

-- A member's name as a path below the root: "" for the root, or nil and why not.
local function member_path(name)
  local parts = {}
  for seg in name:gmatch("[^/]+") do
    if seg == ".." then return nil, "it goes up (..)" end
    if seg ~= "." then parts[#parts + 1] = seg end
  end
  if name:sub(1, 1) == "/" then return nil, "it is absolute" end
  local rel = table.concat(parts, "/")
  if #rel > M.MAX_PATH then return nil, "it is longer than " .. M.MAX_PATH .. " bytes" end
  return rel
end

local function parent_of(rel)
  return rel:match("^(.*)/[^/]*$") or ""
end

---@class dsh.fs.TreeSummary
---@field files integer
---@field directories integer
---@field symlinks integer
---@field hardlinks integer
---@field bytes integer       bytes of file data
---@field skipped string[]    members not made (devices, FIFOs, ...), by name

--- Make the tree the tar stream source() yields under dest (made with its
--- parents when missing). o: progress(bytes, files, rel), signal. Returns a
--- summary, or nil, err (a malformed or hostile stream is FS_IO_ERROR naming
--- the member; what was made before stays).
---@return dsh.fs.TreeSummary|nil, dsh.Error|nil
function M.extract(dest, source, o)
  o = o or {}
  local sum = { files = 0, directories = 0, symlinks = 0, hardlinks = 0, bytes = 0, skipped = {} }
  -- dest and its parents: made when missing; dest may be a link to a directory (the caller's choice)
  local acc = dest:sub(1, 1) == "/" and "" or "."
  for seg in dest:gmatch("[^/]+") do
    acc = acc .. "/" .. seg
    local st = hostfs.stat(acc)
    if not st then
      local ok, err = hostfs.mkdir(acc, 493)
      if not ok then return nil, io_error(err, acc) end
    elseif st.type ~= "directory" then
      return nil, E("FS_NOT_DIRECTORY", '"' .. acc .. '" is not a directory')
    end
  end
  local real = { [""] = true } -- directories below dest known to be real ones (made here, or lstat'd)
  local made = {} -- files this archive made (for hard links)
  local dirs, links = {}, {}
  local r = tar.reader(source)
  local function at(rel) return rel == "" and dest or dest .. "/" .. rel end
  local function bad(name, why)
    return nil, E("FS_IO_ERROR", string.format("refusing tar member %q: %s", name, why))
  end
  -- every directory on the way to rel's parent, a real one
  local function way(rel)
    local p = parent_of(rel)
    if real[p] then return true end
    local ok, err = way(p)
    if not ok then return nil, err end
    local st = hostfs.lstat(at(p))
    if not st then
      local mok, merr = hostfs.mkdir(at(p), 448)
      if not mok then return nil, io_error(merr, at(p)) end
    elseif st.type ~= "directory" then
      return nil, E("FS_IO_ERROR", '"' .. at(p) .. '" is a ' .. st.type .. "; nothing is written through it")
    end
    real[p] = true
    return true
  end
  -- room for a new entry at rel: whatever is there goes, unless it is a directory
  local function clear(rel, name)
    local st = hostfs.lstat(at(rel))
    if not st then return true end
    if st.type == "directory" then return bad(name, '"' .. at(rel) .. '" is a directory') end
    local ok, err = hostfs.unlink(at(rel))
    if not ok then return nil, io_error(err, at(rel)) end
    return true
  end
  local mask = o.keepSetid and 4095 or 1023 -- drop 04000 and 02000, keep the sticky bit
  while true do
    if aborted(o.signal) then return nil, E("FS_ABORTED", "download aborted") end
    local m, err = r:next()
    if m == nil then return nil, E(err.code or "FS_IO_ERROR", tostring(err.message)) end
    if m == false then break end
    local rel, why = member_path(m.name)
    if not rel then return bad(m.name, why) end
    local ok, werr = way(rel)
    if not ok then return nil, werr end
    local path = at(rel)
    if m.type == "directory" then
      if rel ~= "" then
        local st = hostfs.lstat(path)
        if st and st.type ~= "directory" then
          local uok, uerr = hostfs.unlink(path)
          if not uok then return nil, io_error(uerr, path) end
          st = nil
        end
        if not st then
          local mok, merr = hostfs.mkdir(path, 448)
          if not mok then return nil, io_error(merr, path) end
        end
        real[rel] = true
      end
      dirs[#dirs + 1] = { path = path, mode = bit.band(m.mode, mask), mtime = m.mtime, depth = #rel }
      sum.directories = sum.directories + 1
    elseif m.type == "file" then
      if rel == "" then return bad(m.name, "a file cannot be the tree's root") end
      -- made with its final mode (the descriptor writes whatever the mode); whatever
      -- stood at the name goes first (looked at only when the name is taken)
      local mode = bit.band(m.mode, mask)
      local w, cerr = hostfs.create_stream(path, mode)
      if not w and cerr.errno == EEXIST then
        ok, werr = clear(rel, m.name)
        if not ok then return nil, werr end
        w, cerr = hostfs.create_stream(path, mode)
      end
      if not w then return nil, io_error(cerr, path) end
      local since = 0
      while true do
        local piece, derr = r:data(M.CHUNK)
        if not piece then
          w:abort()
          return nil, E(derr.code or "FS_IO_ERROR", tostring(derr.message))
        end
        if piece == "" then break end
        local wok, wrerr = w:write(piece)
        if not wok then
          w:abort()
          return nil, io_error(wrerr, path)
        end
        sum.bytes, since = sum.bytes + #piece, since + #piece
        if since >= M.PROGRESS_BYTES and o.progress then
          since = 0
          o.progress(sum.bytes, sum.files, rel)
        end
        if aborted(o.signal) then
          w:abort()
          return nil, E("FS_ABORTED", "download aborted")
        end
      end
      local cok, clerr = w:close()
      if not cok then return nil, io_error(clerr, path) end
      hostfs.set_mtime(path, m.mtime)
      made[rel] = true
      sum.files = sum.files + 1
      if o.progress then o.progress(sum.bytes, sum.files, rel) end
    elseif m.type == "hardlink" then
      local target, twhy = member_path(m.link or "")
      if not target or target == "" then return bad(m.name, "its link target " .. (twhy or "is empty")) end
      if not made[target] then return bad(m.name, "it links to " .. target .. ", which this archive did not make") end
      ok, werr = clear(rel, m.name)
      if not ok then return nil, werr end
      local lok, lerr = hostfs.link(at(target), path)
      if not lok then return nil, io_error(lerr, path) end
      made[rel] = true
      sum.hardlinks = sum.hardlinks + 1
    elseif m.type == "symlink" then
      if rel == "" then return bad(m.name, "a link cannot be the tree's root") end
      if (m.link or "") == "" or #m.link > M.MAX_PATH then return bad(m.name, "its link text is empty or too long") end
      links[#links + 1] = { rel = rel, name = m.name, target = m.link, mtime = m.mtime }
    else
      sum.skipped[#sum.skipped + 1] = rel
    end
  end
  local dok, derr = r:drain()
  if not dok and derr then return nil, E(derr.code or "FS_IO_ERROR", tostring(derr.message)) end
  -- the archive's links, last: nothing above was written through one of them
  for _, l in ipairs(links) do
    local ok, werr = way(l.rel)
    if not ok then return nil, werr end
    ok, werr = clear(l.rel, l.name)
    if not ok then return nil, werr end
    local sok, serr = hostfs.symlink(l.target, at(l.rel))
    if not sok then return nil, io_error(serr, at(l.rel)) end
    hostfs.set_mtime(at(l.rel), l.mtime)
    sum.symlinks = sum.symlinks + 1
  end
  table.sort(dirs, function(a, b) return a.depth > b.depth end)
  for _, d in ipairs(dirs) do
    local ok, err = hostfs.chmod(d.path, d.mode)
    if not ok then return nil, io_error(err, d.path) end
    hostfs.set_mtime(d.path, d.mtime)
  end
  return sum
end

return M
