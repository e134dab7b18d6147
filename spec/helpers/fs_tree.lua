--- Trees for the tree-transfer specs: a bash script that makes a tree with
-- everything a transfer gets wrong (names of odd bytes and lengths, empty and
-- read-only directories, symlinks of every kind, a hard link, modes, times,
-- a large random file), and a manifest of a tree (every entry's name, kind,
-- mode, link count, time, link text and content digest), computed by the
-- same script wherever the tree is, so two trees are equal when their
-- manifests are. Both run with bash and coreutils only.
local M = {}

--- bash -c M.MAKE _ <dir> <big file bytes>
M.MAKE = [==[
set -e
mkdir -p "$1"; cd "$1"
printf 'plain\n' > plain.txt
: > empty.txt
printf 'a\0b\0\377\376\n' > binary.bin
mkdir -p 'sp ace/tab	dir' "$(printf 'new\nline dir')" empty-dir
p=deep; for i in $(seq 1 20); do p="$p/d$i"; done; mkdir -p "$p"
printf long > "$p/$(printf 'L%.0s' $(seq 1 150))"
printf ctrl > "$(printf 'odd-\001-\033-\177')"
printf latin1 > "$(printf 'latin1-\351\377')"
printf utf8 > 'ünïcødé-名前.txt'
printf dash > -dash-first
printf quote > "quote'\"\\back"
printf star > '*star?'
printf nul-in-name-impossible > "$(printf 'n%.0s' $(seq 1 200))"
printf in-sub > 'sp ace/tab	dir/inner'
ln -s plain.txt rel-link
ln -s nowhere dangling-link
ln -s /etc/hostname abs-link
ln -s deep dir-link
ln plain.txt hard-link
mkdir ro-dir; printf inside > ro-dir/inside
mkdir sticky-dir
head -c "$2" /dev/urandom > big.bin
touch -d @1000000000 plain.txt
touch -h -d @1100000000 rel-link
chmod 600 empty.txt; chmod 750 binary.bin; chmod 444 plain.txt; chmod 700 empty-dir; chmod 1777 sticky-dir
chmod 555 ro-dir
]==]

--- bash -c M.MANIFEST _ <dir>: the manifest's sha256 on the first line, then the manifest.
M.MANIFEST = [==[
cd "$1" || exit 2
m=$(find . -mindepth 1 -print0 | LC_ALL=C sort -z | while IFS= read -r -d '' p; do
  if [ -L "$p" ]; then printf '%s\tl %s\n' "$p" "$(readlink -- "$p")"
  elif [ -d "$p" ]; then printf '%s\td %s\n' "$p" "$(stat -c %a -- "$p")"
  elif [ -f "$p" ]; then printf '%s\tf %s %s\n' "$p" "$(stat -c '%a %h %Y' -- "$p")" "$(sha256sum < "$p" | cut -c1-64)"
  else printf '%s\to\n' "$p"; fi
done)
printf '%s\n' "$m" | sha256sum | cut -c1-64
printf '%s\n' "$m"
]==]

--- The digest and the manifest from a runner's output.
function M.parse(out)
  return out:match("^(%x+)\n(.*)$")
end

return M
