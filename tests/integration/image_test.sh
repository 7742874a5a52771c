#!/usr/bin/env bash
# The kernel-native read path (issue 31) on this machine: a dataset written as an EROFS image by
# FanStore (`fanstore extract --erofs`) and mounted by the kernel, and `fanstore run` staging
# the dataset as such an image, mounted under its local directory, as root on a disk-backed
# local directory, with files everywhere else. Needs root and a kernel that mounts EROFS from a
# file (6.12+); skipped (77) otherwise. Usage: image_test.sh BUILD_DIR
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
F="$1/bin/fanstore"
[[ $(id -u) == 0 ]] || { echo "image_test: needs root (mount); skipped"; exit 77; }
# The local directories go to a disk: where /tmp is tmpfs, /var/tmp.
disk=/tmp
[[ $(stat -f -c %T /tmp) == tmpfs ]] && disk=/var/tmp
T=$(TMPDIR=$disk mktmp)
M="$T/mnt"
cleanup() {
  [[ -n "${MPI_PID:-}" ]] && kill "$MPI_PID" 2>/dev/null
  pkill -f "fanstore-agent --dataset $T/" 2>/dev/null
  sleep 0.3
  grep " $T/" /proc/self/mountinfo | awk '{print $5}' | xargs -r -n1 umount -l 2>/dev/null
  umount -l "$M" 2>/dev/null
  rm -rf "$T" /dev/shm/fanstore-imagetest.$$.*
}
trap cleanup EXIT
cd "$T" || exit 1
erofs_mounts() { grep -c " - erofs " /proc/self/mountinfo; }
before=$(erofs_mounts)

make_tree src 5
ln src/a/b/numbers.txt src/a/numbers-again.txt  # a hard link
"$F" pack -q src ds.fs --shard-size 100K
# Directories' sizes are their file system's own.
manifest() { (cd "$1" && find . \( -type d -printf '%p %y %m %T@\n' \) -o -printf '%p %y %m %s %T@ %l\n' | sort); }
hashes() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }

echo "== fanstore extract --erofs, mounted by the kernel"
out=$("$F" extract --erofs ds.fs img); rc=$?
check "extract --erofs succeeds and says so" test $rc -eq 0 -a -n "$(grep 'to the image' <<<"$out")"
check "the image is two files, private" test "$(stat -c '%a' img/image.erofs img/data.blob | sort -u)" = 600
mkdir "$M"
if ! /usr/bin/python3 - "$T/img" "$M" <<'PY'; then
import ctypes, sys
libc = ctypes.CDLL("libc.so.6", use_errno=True)
img, mnt = sys.argv[1:3]
if libc.mount(f"{img}/image.erofs".encode(), mnt.encode(), b"erofs", 1 | 2 | 4, f"device={img}/data.blob".encode()):
    sys.exit(f"mount: errno {ctypes.get_errno()}")
PY
  echo "image_test: this kernel mounts no EROFS image from a file; skipped"
  exit 77
fi
check "the kernel serves every name and byte" diff -r --no-dereference src "$M"
check "modes, sizes, mtimes and link targets match" diff <(manifest src) <(manifest "$M")
check "content hashes match" diff <(hashes src) <(hashes "$M")
check "the hard link is one inode with two names" \
  test "$(stat -c '%i %h' "$M/a/b/numbers.txt")" = "$(stat -c '%i %h' "$M/a/numbers-again.txt")"
check "it is read-only" bash -c "! touch '$M/a/new' 2>/dev/null"
umount "$M"
expect_fail "extract --erofs into a non-empty directory" 2 "not empty" "$F" extract --erofs ds.fs img

echo "== fanstore run stages it as an image (root, disk-backed local directory)"
run() { "$F" run --local-dir "$T/local" "$@"; }
mkdir local
# shellcheck disable=SC2016  # expanded by the command's shell
probe='grep -q "/data .* - erofs " /proc/self/mountinfo && echo IMAGE; diff -r --no-dereference "$0" "$FANSTORE_MOUNT" && echo SAME'
out=$(run ds.fs -- sh -c "$probe" "$T/src" 2>&1)
check "the data root is an EROFS mount during the run" grep -q IMAGE <<<"$out"
check "every file reads the same through the library" grep -q SAME <<<"$out"
# shellcheck disable=SC2016  # expanded by the command's shell
out=$(run ds.fs -- sh -c 'cd "$FANSTORE_MOUNT" && find . -type f -print0 | sort -z | xargs -0 sha256sum' 2>&1)
check "content hashes through the library match" diff <(hashes src) <(grep '  \./' <<<"$out")
# The warm walk reads the node's files ahead and drops the blob's pages behind it: the share is
# then in memory once, in the image's files.
# shellcheck disable=SC2016  # expanded by the command's shell
resident='res() { r=$(fincore -nb -o RES "$1") || exit 1; echo $((r)); }
b=$(echo "$0"/fanstore-local.*/image/data.blob); [ -f "$b" ] || exit 1
for _ in $(seq 100); do [ "$(res "$b")" = 0 ] && break; sleep 0.2; done
echo "blob $(res "$b") file $(res "$(echo "$0"/fanstore-local.*/data)/a/b/numbers.txt")"'
out=$(run ds.fs -- sh -c "$resident" "$T/local" 2>&1)
check "after the warm walk the blob has no page in memory and the files have theirs" \
  grep -qx "blob 0 file $((($(stat -c %s src/a/b/numbers.txt) + 4095) / 4096 * 4096))" <<<"$out"
check "no mount is left after the run" test "$(erofs_mounts)" = "$before"
check "the local directory is emptied" test -z "$(ls -A local)"
out=$(run --image no ds.fs -- sh -c "$probe" "$T/src" 2>&1)
check "--image no: files, no image" bash -c "grep -q SAME <<<'$out' && ! grep -q IMAGE <<<'$out'"
out=$("$F" run --local-dir /dev/shm ds.fs -- sh -c "$probe" "$T/src" 2>&1)
check "a tmpfs local directory: files, no image" bash -c "grep -q SAME <<<'$out' && ! grep -q IMAGE <<<'$out'"
# Root of a user namespace: the agent tries the image, the kernel refuses EROFS there (EPERM),
# and the share is unpacked as files instead, its indexes read again (the blob released them).
if unshare -Urm true 2>/dev/null; then
  out=$(unshare -Urm "$F" run -v --local-dir "$T/local" ds.fs -- sh -c "$probe" "$T/src" 2>&1)
  check "the kernel refuses the image: files instead, every byte the same" \
    bash -c "grep -q 'unpacking the files instead' <<<'$out' && grep -q SAME <<<'$out' && ! grep -q IMAGE <<<'$out'"
  check "and the local directory is emptied" test -z "$(ls -A local)"
fi

echo "== a disk formatted with fewer inodes than the share has files: the image needs two"
truncate -s 64M few.img && mkfs.ext4 -q -F -b 4096 -I 256 -N 96 few.img && mkdir few
if mount -o loop few.img few 2>/dev/null; then
  free=$(df --output=iavail few | tail -1 | tr -d ' ')
  out=$("$F" run --local-dir "$T/few" ds.fs -- sh -c "$probe" "$T/src" 2>&1)
  check "an image with $free free inodes for $(find src | wc -l) entries" \
    bash -c "grep -q IMAGE <<<'$out' && grep -q SAME <<<'$out'"
  out=$("$F" run --image no --local-dir "$T/few" ds.fs -- true 2>&1)
  check "files there are refused before any is made, naming the inodes" \
    grep -qE 'has [0-9]+ free inodes; .* needs [0-9]+' <<<"$out"
  check "and nothing is left there" test -z "$(find few -mindepth 1 -maxdepth 1 ! -name lost+found)"
  umount few || umount -l few  # the run's detached cleanup may still hold it a moment
else
  echo "skip: no loop device to mount a small ext4 on"
fi

echo "== two agents split the dataset: the other's files are fetched into the image"
# Two agents as root (mpirun as the PMIx server), one copy of each shard: each node's image
# names every file, and what the peer holds is written into its extent of the blob as it
# arrives (the prefetch's streams, or an open's fetch): no file per fetched file.
ensure_munge
RD=/dev/shm/fanstore-imagetest.$$
mkdir split
split_run() {  # split_run NAME AGENT-OPTION...: starts the agents, reads, stops them
  local name=$1; shift
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 "$B/bin/fanstore-agent" \
    --dataset "$T/ds.fs" --local-dir "$T/split/$name%r" --run-dir "$RD.$name%r" --mount /fanstore/split \
    --replicas 1 --quiet "$@" >"agents-$name.log" 2>&1 &
  MPI_PID=$!
  ready() { grep -q '"state":"ready"' "$RD.$name$1/status.json" 2>/dev/null; }
  for _ in $(seq 100); do ready 0 && ready 1 && break; sleep 0.1; done
  check "$name: both agents are ready" bash -c "ready() { grep -q ready $RD.$name\$1/status.json; }; ready 0 && ready 1" || cat "agents-$name.log"
  client() { env LD_PRELOAD="$ASAN_RT $B/lib/libfanstore_preload.so" ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 \
    FANSTORE_MOUNT=/fanstore/split FANSTORE_TABLE="$RD.${name}0/table" FANSTORE_SOCKET="$RD.${name}0/agent.sock" "$@"; }
  local sum
  # shellcheck disable=SC2016  # expanded by the command's shell
  sum='cd "$FANSTORE_MOUNT" && find . -type f -print0 | sort -z | xargs -0 sha256sum'
  for pass in first second; do
    check "$name: every file reads right through agent 0 ($pass pass)" diff <(hashes src) <(client sh -c "$sum" | grep '  \./')
  done
  check "$name: agent 0's data root is its image" grep -q "$T/split/${name}0/data .* - erofs " /proc/self/mountinfo
  check "$name: no fetched file is a file of its own (cache: $(find "$T/split/${name}0/cache" -type f | wc -l))" \
    test -z "$(ls -A "$T/split/${name}0/cache")"
  check "$name: agent 0's local directory holds the image's files and nothing per file" \
    test "$(find "$T/split/${name}0" -path "$T/split/${name}0/data" -prune -o -type f -print | wc -l)" -le 3
  # The agents' own stop, by their pids: not mpirun's (its command line names them too), whose
  # forwarded SIGTERM may come with a SIGKILL on its heels.
  local pids
  pids=$(cat "$RD.${name}0/status.json" "$RD.${name}1/status.json" | grep -o '"pid":[0-9]*' | cut -d: -f2)
  # shellcheck disable=SC2086  # two pids
  kill -TERM $pids; wait "$MPI_PID" 2>/dev/null; MPI_PID=
  check "$name: no mount is left" test "$(erofs_mounts)" = "$before"
  check "$name: the local directories are removed or empty" \
    test -z "$(find "$T/split" -mindepth 2 -print -quit 2>/dev/null)"
}
B=$1
ASAN_RT=$(asan_runtime "$B/lib/libfanstore_preload.so")
split_run prefetch
split_run onopen --no-prefetch

echo "== the agent killed mid-run"
# shellcheck disable=SC2016  # expanded by the command's shell
out=$(run ds.fs -- sh -c 'pkill -9 -x fanstore-agent; sleep 0.3; diff -r --no-dereference "$0" "$FANSTORE_MOUNT" && echo SAME' "$T/src" 2>&1)
check "reads go on through the image" grep -q SAME <<<"$out"
check "the run detaches the image it left" test "$(erofs_mounts)" = "$before"
check "and empties the local directory" test -z "$(ls -A local)"

echo "== fanstore run itself killed"
"$F" run --local-dir "$T/local" ds.fs -- sleep 67 >/dev/null 2>&1 &
for _ in $(seq 1 100); do grep -q "$T/local/.* - erofs " /proc/self/mountinfo && break; sleep 0.1; done
check "the image is mounted" grep -q "$T/local/.* - erofs " /proc/self/mountinfo
kill -9 $!
wait $! 2>/dev/null
pkill -9 -f "^sleep 67$" 2>/dev/null  # the killed run's command
# The agent unmounts and removes its files when its run dies (PR_SET_PDEATHSIG), although a
# live run removes them itself (--leave-local-dir); the next run removes what is left when
# the agent died too.
for _ in $(seq 1 50); do [ -z "$(find local -type f)" ] && break; sleep 0.1; done
check "its agent removed the staged files" test -z "$(find local -type f)"
run ds.fs -- true
check "no mount is left" test "$(erofs_mounts)" = "$before"
check "the local directory is empty" test -z "$(ls -A local)"

echo "== fanstore run and its agent both killed"
"$F" run --local-dir "$T/local" ds.fs -- sleep 67 >/dev/null 2>&1 &
for _ in $(seq 1 100); do grep -q "$T/local/.* - erofs " /proc/self/mountinfo && break; sleep 0.1; done
pkill -STOP -x fanstore-agent  # stopped, it cannot clean up when its run dies
kill -9 $!
wait $! 2>/dev/null
pkill -9 -x fanstore-agent
pkill -9 -f "^sleep 67$" 2>/dev/null  # the killed run's command
sleep 0.3
check "the image stays mounted" grep -q "$T/local/.* - erofs " /proc/self/mountinfo
run ds.fs -- true 2>err.txt
check "the next run removes what they left" grep -q "removed what a killed run left" err.txt
check "no mount is left" test "$(erofs_mounts)" = "$before"
check "the local directory is empty" test -z "$(ls -A local)"
finish
