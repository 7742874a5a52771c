#!/usr/bin/env bash
# Hostile input to the `fanstore` command line (issue 14): stats files whose JSON is mistyped
# (crashed with an uncaught exception), a symlink chain that leaves the tree through another
# link (F16), a setuid file (F17) and manifests with hostile sizes (F6). Each must end with a
# clear message or a safe result, never a crash, in bounded memory. Shards with hostile sizes
# are crafted in format/hostile_test.cc (they need XXH3 and zstd framing).
# Usage: hostile_dataset.sh BUILD_DIR
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib.sh"
F="$(cd "$1" && pwd)/bin/fanstore"
T=$(mktmp)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1

# no_crash NAME COMMAND...: exit 0 or 1 (never a signal), a message when 1, peak RSS <= 64 MiB.
no_crash() {
  local name=$1; shift
  /usr/bin/time -f %M -o rss "$@" >stdout 2>err
  local rc=$? kb
  kb=$(tail -1 rss)
  if [[ $rc -gt 1 ]]; then bad "$name: exit $rc: $(grep -v 'Command' err | head -3)"; return; fi
  if [[ $rc -eq 1 ]] && ! grep -q '^fanstore: ' err; then bad "$name: exit 1 without a message"; return; fi
  if [[ $kb -gt $((64 * 1024)) ]]; then bad "$name: peak RSS $((kb / 1024)) MiB"; return; fi
  ok "$name (exit $rc$( [[ $rc -eq 1 ]] && echo ": $(grep '^fanstore: ' err | head -1 | cut -c1-100)"))"
}

echo "== stats files with mistyped counters"
printf '{"node": 5, "rank": "x", "opens": [1, 2], "bytes": 7}\n' > s1
no_crash "a number where the node name goes" "$F" stats s1
printf '{"node": "n1", "opens": 5, "bytes": "x", "bytes_staged": {"a": 1}}\n{"node": [], "opens": {"local": "many"}}\n' > s2
no_crash "counters of the wrong types" "$F" stats s2
no_crash "the same as JSON" "$F" stats --json s2
printf '[1, 2]\n' > s3
expect_fail "a line that is not an object" 1 "not a line of agent counters" "$F" stats s3
printf '{"node": "n\xff\xfe"}\n' > s4
expect_fail "a node name that is not UTF-8" 1 "not a line of agent counters" "$F" stats s4

echo "== a symlink chain that leaves the tree (F16)"
mkdir -p src/x src/y
printf 'f\n' > src/y/f
ln -s . src/x/up
ln -s up/../.. src/x/esc      # each link alone looks contained; together they climb out
ln -s up/../y src/x/ok
"$F" pack src ds.fs -q --no-sync 2>pack.err
check "pack warns about the escaping link" grep -q "x/esc.*outside the dataset through other symlinks" pack.err
check "the escaping link is not stored" bash -c "! '$F' ls ds.fs | grep -qx x/esc"
check "the contained chain is stored" bash -c "'$F' ls ds.fs | grep -qx x/ok"
"$F" extract ds.fs tree -q
check "extract restores the contained chain" test "$(cat tree/x/ok/f)" = f
check "extract creates no escaping link" test ! -e tree/x/esc -a ! -L tree/x/esc

echo "== setuid and setgid files (F17)"
mkdir -p su/bin
printf '#!/bin/sh\necho hi\n' > su/bin/tool
chmod 6755 su/bin/tool
"$F" pack su su.fs -q --no-sync
"$F" extract su.fs su.out -q
check "extract strips setuid and setgid" test "$(stat -c %a su.out/bin/tool)" = 755
mkdir -p priv && printf 'secret\n' > priv/s && chmod 700 priv
(umask 022 && "$F" pack priv priv.fs -q --no-sync)
check "a private tree packs into a private dataset" \
  test "$(stat -c %a priv.fs) $(stat -c %a priv.fs/manifest.json priv.fs/shard-00000.fsd | sort -u)" = "700 600"

echo "== manifests with hostile sizes (F6)"
fresh() { rm -rf bad.fs; cp -r ds.fs bad.fs; }
fresh; truncate -s 200M bad.fs/manifest.json
no_crash "a 200 MiB manifest" "$F" verify bad.fs
check "  names the file and the limit" grep -q "manifest.json is too large.*at most" err
fresh; python3 -c "print('[' + '0,' * 10000000 + '0]')" > bad.fs/manifest.json
no_crash "ten million values" "$F" verify bad.fs
check "  names the manifest" grep -q "manifest.json: more than" err
fresh; python3 -c "print('[' * 200000 + ']' * 200000)" > bad.fs/manifest.json
no_crash "200,000 nested arrays" "$F" info bad.fs
check "  says it is nested too deep" grep -q "nested deeper" err
fresh; sed -i 's/"shards": \[/"shards": [{"file": "x", "bytes": 99999999999999, "files": 1, "xxh3": "0000000000000000"},/' bad.fs/manifest.json
no_crash "a shard the size of a disk" "$F" verify bad.fs
check "  names the shard" grep -q "missing shard\|x: " err
finish
