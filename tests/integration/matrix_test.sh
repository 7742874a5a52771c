#!/usr/bin/env bash
# The real-client matrix (issue 15): matrix.py's cases (reads, errors, every write that could
# bypass the library, static binaries, exec, dlopen, the mount's parent) run against FanStore
# (`fanstore run --kernel-view`, the library and the kernel-visible view together, as Slurm jobs
# have them) and against a read-only bind mount of the same tree, and must give the same output,
# exit status and errno, case by case. In both unpack modes (lazy with the background pass held
# back, so that every file is unpacked by its first open), as root and as an unprivileged user.
# Usage: matrix_test.sh BUILD_DIR (as root; skipped otherwise)
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
B=$(cd "$1" && pwd)
F="$B/bin/fanstore"
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
[[ $EUID -eq 0 && -c /dev/fuse ]] || { echo "matrix_test: skipped: needs root and /dev/fuse"; exit 77; }
ensure_users fsalice
T=$(mktmp)
chmod 0755 "$T"
disk=$(TMPDIR=/var/tmp mktmp)  # the image's local directory: on a disk, not tmpfs
FUSE_MODE=$(stat -c %a /dev/fuse)
cleanup() {
  local m
  for m in "$T"/ref-*; do mountpoint -q "$m" && umount "$m"; done
  chmod "$FUSE_MODE" /dev/fuse
  rm -rf "$T" "$disk"
}
trap cleanup EXIT
cd "$T" || exit 1
# Unprivileged users reach the view through a user namespace of their own, which needs
# /dev/fuse usable by users (Debian's default, 0666; not on every test machine).
chmod 0666 /dev/fuse

echo "== the tree: make_tree's awkward cases, code (a script, a library, a C extension), a hard link,"
echo "   a sparse file, a loop, 0000 entries, extended attributes, a large directory"
make_tree src 1
mkdir -p src/bin src/lib src/hard src/locked src/closed
# shellcheck disable=SC2016  # the script's own $1
printf '#!/bin/sh\necho "script ran: $1"\n' > src/bin/hello.sh && chmod 0755 src/bin/hello.sh
printf 'int fsdemo_answer(void) { return 42; }\n' > lib.c
gcc -shared -fPIC -o src/lib/libfsdemo.so lib.c
mkdir -p src/pkg
cat > ext.c <<'C'
#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "fsext", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_fsext(void) {
  PyObject* m = PyModule_Create(&def);
  if (m) PyModule_AddStringConstant(m, "origin", "a C extension from the dataset");
  return m;
}
C
# shellcheck disable=SC2046  # the include flags are several words
gcc -shared -fPIC $(python3-config --includes) -o "src/pkg/fsext$($PY -c \
  "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")" ext.c
printf 'linked\n' > src/hard/one && ln src/hard/one src/hard/two
truncate -s 1M src/sparse.bin && printf 'data' | dd of=src/sparse.bin bs=1 seek=524288 conv=notrunc status=none
ln -s loop src/loop
printf 'secret\n' > src/locked/secret && chmod 0000 src/locked/secret
printf 'inside\n' > src/closed/inside && chmod 0000 src/closed
mkdir src/big && for i in $(seq 300); do : > "src/big/a-file-with-a-long-name-$i"; done  # > 4 KiB
ln -s hello.txt src/a/link-to-hello
$PY - src <<'PY'
import os, sys
r = sys.argv[1]
os.setxattr(f"{r}/a/hello.txt", "user.label", b"n01440764")
os.setxattr(f"{r}/a/hello.txt", "user.empty", b"")
os.setxattr(f"{r}/a/b", "user.dir", b"\x00binary\xff")
os.setxattr(r, "user.root", b"top")
os.setxattr(f"{r}/hard/one", "user.label", b"linked")
PY
mkdir kv  # empty: the view's tmpfs holds the mount point

for user in root fsalice; do
  # The reference: the tree as this user owns it (FanStore reports the job user as the owner),
  # read-only.
  # Packed from that copy: its ctimes and directory sizes are the ones the reference shows.
  cp -a src "src-$user" && chown -R -h "$user:" "src-$user"
  "$F" pack "src-$user" "ds-$user.fs" -q && chmod -R a+rX "ds-$user.fs"
  mkdir "ref-$user" "work-$user"
  mount --bind "src-$user" "ref-$user" && mount -o remount,bind,ro "ref-$user"
  chown "$user:" "work-$user"
  as() { (cd "$T/work-$user" && runuser -u "$user" -- env -i HOME=/tmp PATH=/usr/bin:/bin LANG=C.UTF-8 "$@"); }
  as $PY "$HERE/matrix.py" "$T/ref-$user" > "ref-$user.out" 2>&1
  cases=$(wc -l < "ref-$user.out")
  modes=(eager lazy)
  [[ $user == root ]] && modes+=(image)  # the kernel-native path: root, a disk-backed local directory
  for mode in "${modes[@]}"; do
    how=(--unpack "$mode")
    [[ $mode == image ]] && how=(--image yes --local-dir "$disk")
    # shellcheck disable=SC2016  # the command's own arguments
    as env FANSTORE_TEST_UNPACK_DELAY_MS=600000 "$F" run "$T/ds-$user.fs" "${how[@]}" --kernel-view \
      --mount "$T/kv/ds" -- sh -c '"$0" "$1" "$2" && "$3" stats >&2' $PY "$HERE/matrix.py" "$T/kv/ds" "$F" \
      > "fs-$user-$mode.out" 2> "fs-$user-$mode.err"
    if [[ $mode == image ]]; then
      # Opened through the kernel's EROFS, a file's descriptor is EROFS's: file-backed EROFS
      # refuses O_DIRECT, and the image keeps no holes; and the kernel-visible view is the image
      # itself, so a static binary's `ls -l` shows EROFS's directory sizes and block counts
      # (docs/design.md, issue 31).
      known='(O_DIRECT read and F_GETFL|SEEK_DATA/SEEK_HOLE, sparse file|static busybox ls -lan):'
      check "$user, image: fanstore stats says the local copy was an EROFS image" \
        grep -q "shards, as an EROFS image)" "fs-$user-$mode.err"
      other=$(diff "ref-$user.out" "fs-$user-$mode.out" | grep '^[<>]' | grep -vE "^[<>] $known")
      if [[ -z $other ]]; then
        ok "$user, image: only the three known cases differ (O_DIRECT, holes, ls -l's sizes)"
      else
        bad "$user, image: cases that differ besides the known three (< read-only bind mount, > FanStore):"$'\n'"$other"
      fi
      continue
    fi
    if diff -q "ref-$user.out" "fs-$user-$mode.out" >/dev/null; then
      ok "$user, $mode: all $cases cases as on a read-only bind mount"
    else
      bad "$user, $mode: cases that differ (< read-only bind mount, > FanStore):"$'\n'"$(diff "ref-$user.out" "fs-$user-$mode.out" | grep '^[<>]')"
      grep -v "^fanstore" "fs-$user-$mode.err" | head -5
    fi
  done
  check "$user: the reference tree is unchanged" diff -r --no-dereference "src" "src-$user"
done
check "nothing left: no FUSE mount, the view's parent empty" \
  bash -c "! grep -q fuse.fanstore /proc/self/mountinfo && test -z \"\$(ls -A '$T/kv')\""
finish
