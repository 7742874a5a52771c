#!/usr/bin/env bash
# output_test (label `integration`): `fanstore run --output DIR` (issue 29), with real clients, as
# the test user fsalice; fsbob is the other user on the node. The command writes to
# $FANSTORE_OUTPUT on local storage; each finished file is drained to DIR in the background and is
# never seen there half-written. Cases: torch.save to a temporary name and os.replace (only the
# final name goes), coreutils, an output-only run (no dataset), the parallel file system
# unreachable for a while (retried) and to the end (named, kept locally, exit 1), kill -9 in the
# middle of a drain (no partial file under a final name), a full local disk (ENOSPC at once),
# and another user (reads nothing).
# Usage: output_test.sh BUILD_DIR
# shellcheck disable=SC2016  # $FANSTORE_OUTPUT is expanded by the command's shell
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib.sh"
B=$(cd "$1" && pwd)
F="$B/bin/fanstore"
if [[ $(id -u) -ne 0 ]]; then echo "output_test: needs root (test users)"; exit 1; fi
ensure_users fsalice fsbob
T=$(mktmp)
chmod 0755 "$T"
cleanup() {
  umount "$T/small" 2>/dev/null
  umount "$T/pfsfull" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
mkdir -m 0755 "$T/pfs" "$T/small" "$T/local" "$T/pfsfull"
chown fsalice: "$T/pfs" "$T/local"
as_alice() { runuser -u fsalice -- env TMPDIR="$T/local" "$@"; }
PY=/usr/bin/python3

echo "== torch.save to a temporary name, os.replace, coreutils; output only"
cat >"$T/train.py" <<'PYEOF'
import os, torch
out = os.environ["FANSTORE_OUTPUT"]
os.makedirs(os.path.join(out, "ckpt"), exist_ok=True)
for epoch in range(3):
    model = {"w": torch.full((256, 256), float(epoch)), "epoch": epoch}
    tmp = os.path.join(out, "ckpt", "model.pt.tmp")
    torch.save(model, tmp)
    os.replace(tmp, os.path.join(out, "ckpt", "model.pt"))
with open(os.path.join(out, "log.txt"), "w") as f:
    f.write("done\n")
PYEOF
chmod 0644 "$T/train.py"
out=$(as_alice "$F" run --output "$T/pfs/run1" -- bash -c \
  "$PY $T/train.py && seq 100000 > \$FANSTORE_OUTPUT/numbers.txt && cp \$FANSTORE_OUTPUT/numbers.txt \$FANSTORE_OUTPUT/copy.txt && stat -c %a \$FANSTORE_OUTPUT" 2>&1)
rc=$?
check "the run succeeds (exit $rc)" test $rc -eq 0
check "its output directory is private (0700)" grep -qx 700 <<<"$out"
check "the last checkpoint is on the parallel file system" \
  test "$(as_alice $PY -c "import torch; print(int(torch.load('$T/pfs/run1/ckpt/model.pt')['epoch']))" 2>&1)" = 2
check "the temporary name never went there" test ! -e "$T/pfs/run1/ckpt/model.pt.tmp"
check "coreutils' files are there, whole" cmp -s "$T/pfs/run1/copy.txt" <(seq 100000)
check "no temporary copy is left" test -z "$(find "$T/pfs/run1" -name '.*.fanstore-*')"
check "the manifest lists each file with its size" $PY -c "
import json, os, sys
m = json.load(open('$T/pfs/run1/.fanstore-output.json'))
want = {'ckpt/model.pt', 'log.txt', 'numbers.txt', 'copy.txt'}
sys.exit(0 if set(m['files']) == want and not m['not_drained'] and all(
    m['files'][f]['size'] == os.path.getsize('$T/pfs/run1/' + f) for f in want) else 1)"
check "the local output directory is gone" test -z "$(ls -A "$T/local")"
check "the files have the user's umask" test "$(stat -c %a "$T/pfs/run1/log.txt")" = 644

echo "== the parallel file system unreachable for a while"
as_alice touch "$T/pfs/down"  # nothing can be made below a file
( sleep 2; rm -f "$T/pfs/down" ) &
out=$(as_alice "$F" run --output "$T/pfs/down/run2" -- bash -c 'echo late > $FANSTORE_OUTPUT/a; sleep 1' 2>&1)
rc=$?
wait
check "retried until it was back: the run succeeds (exit $rc: $out)" test $rc -eq 0
check "and the file is there" test "$(cat "$T/pfs/down/run2/a" 2>&1)" = late

echo "== the parallel file system full for a while"
mount -t tmpfs -o size=4m,mode=0755 pfsfull "$T/pfsfull"
chown fsalice: "$T/pfsfull"
as_alice bash -c "head -c 2M /dev/urandom > $T/local/w.src"
as_alice bash -c "head -c 8M /dev/zero > $T/pfsfull/filler" 2>/dev/null
( sleep 4; rm -f "$T/pfsfull/filler" ) &
out=$(as_alice "$F" run --output "$T/pfsfull/run7" -- bash -c \
  "cp $T/local/w.src \$FANSTORE_OUTPUT/w; sleep 2; '$F' stats --json" 2>&1)
rc=$?
wait
check "retried until there was room: the run succeeds (exit $rc)" test $rc -eq 0
check "meanwhile fanstore stats named the file and why" grep -q '"last_error": *"w: .*No space left on device' <<<"$out"
check "and counted it pending" grep -q '"files_pending": *1' <<<"$out"
check "the file is there, whole" cmp -s "$T/pfsfull/run7/w" "$T/local/w.src"
check "no temporary copy is left" test -z "$(find "$T/pfsfull" -name '.w.fanstore-*')"
rm -f "$T/local/w.src"

echo "== unreachable to the end: named, kept, exit 1"
as_alice touch "$T/pfs/gone"
out=$(as_alice "$F" run --output "$T/pfs/gone/run3" --drain-timeout 2 -- bash -c 'echo kept > $FANSTORE_OUTPUT/lost.txt' 2>&1)
rc=$?
check "exit 1 (got $rc)" test $rc -eq 1
check "the file is named, with why" grep -q "lost.txt: .*Not a directory" <<<"$out"
keep=$(sed -n 's/.*did not reach .* within 2 s; they stay on .* in \(.*\):$/\1/p' <<<"$out")
check "and stays in the local directory it names ($keep)" test "$(cat "$keep/lost.txt" 2>&1)" = kept

echo "== kill -9 of the agent in the middle of a drain"
as_alice bash -c "head -c 400M /dev/urandom > $T/local/big.src"
as_alice "$F" run --output "$T/pfs/run4" -- bash -c "cp $T/local/big.src \$FANSTORE_OUTPUT/big; sleep 60" &
run=$!
for _ in $(seq 600); do
  [[ -n $(find "$T/pfs/run4" -name '.big.fanstore-*' 2>/dev/null) ]] && break
  sleep 0.05
done
tmpcopy=$(find "$T/pfs/run4" -name '.big.fanstore-*' 2>/dev/null | head -1)
check "a temporary copy was being written" test -n "$tmpcopy"
check "another user cannot read it ($(stat -c %a "$tmpcopy" 2>&1))" \
  bash -c "! runuser -u fsbob -- head -c 1 '$tmpcopy' >/dev/null 2>&1"
pkill -KILL -u fsalice -f "fanstore-agent.*--output $T/pfs/run4" 2>/dev/null
pkill -u fsalice -f "sleep 60" 2>/dev/null
wait "$run"
rc=$?
check "no partial file under the final name" bash -c "[[ ! -e '$T/pfs/run4/big' ]] || cmp -s '$T/pfs/run4/big' '$T/local/big.src'"
check "the run fails: its output did not all drain (exit $rc)" test $rc -ne 0
check "what was written stays on local storage" bash -c "cmp -s $T/local/fanstore-output.*/big '$T/local/big.src'"
rm -rf "$T/local/big.src" "$T"/local/fanstore-output.*

echo "== a full local disk"
mount -t tmpfs -o size=8m,mode=1777 small "$T/small"
out=$(timeout 120 runuser -u fsalice -- env TMPDIR="$T/small" "$F" run --output "$T/pfs/run5" --drain-timeout 5 -- \
  bash -c 'head -c 16M /dev/zero > $FANSTORE_OUTPUT/too-big' 2>&1)
rc=$?
check "the writer gets ENOSPC (exit $rc)" grep -q "No space left on device" <<<"$out"
check "nothing hangs (not stopped by the 120 s guard)" test $rc -ne 124

echo "== another user"
out=$(as_alice "$F" run --output "$T/pfs/run6" -- bash -c \
  "echo secret > \$FANSTORE_OUTPUT/s; runuser -u fsbob -- cat \$FANSTORE_OUTPUT/s 2>&1; true" 2>&1)
check "fsbob cannot read the local output directory" grep -q "Permission denied\|authentication failure\|may not" <<<"$out"
ls_out=$(runuser -u fsbob -- ls "$T/local" 2>&1)
check "nor list the user's local directories ($ls_out)" test -z "$(runuser -u fsbob -- find "$T/local" -mindepth 2 2>/dev/null)"
finish
