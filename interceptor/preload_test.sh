#!/usr/bin/env bash
# Integration test of libfanstore_preload.so: serves a real directory tree at a virtual mount
# (every file staged locally, so no agent is needed) and runs unmodified programs against it:
# coreutils, tar, bash, Python with numpy/PIL/h5py, and a probe of libc calls. Results are
# compared with the same programs run on the source tree, and errors with a real read-only
# bind mount when the test runs as root.
#
#   preload_test.sh LIBFANSTORE_PRELOAD.SO FANSTORE-MKTABLE FANSTORE-PRELOAD-PROBE
#
# An AddressSanitizer build of the library is detected and the ASan runtime preloaded first.
set -u

LIB=$(realpath "$1")
MKTABLE=$2
PROBE=$3
PY=/usr/bin/python3  # Debian's python, with python3-numpy, -pil, -h5py

PRELOAD=$LIB
if asan=$(ldd "$LIB" | grep -o '/[^ ]*libasan[^ ]*'); then
  PRELOAD="$asan $LIB"
  export ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0
fi

WORK=$(mktemp -d /tmp/fanstore-preload-test.XXXXXX)
SRC=$WORK/src
MNT=$WORK/mnt/ds  # its parent exists; the mount itself does not
NL=$'\n'
TABLE=$WORK/table
RO=$WORK/ro
HOLD_PIDS=()
cleanup() {
  for p in "${HOLD_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  mountpoint -q "$RO" 2>/dev/null && umount "$RO"
  rm -rf "$WORK"
}
# mktable [OPTIONS] SRC TABLE: writes the table and stays alive as its stand-in agent (the
# interceptor refuses new opens once a table's agent is gone).
mktable() {
  local out="$WORK/mktable.$RANDOM"
  "$MKTABLE" --hold "$@" >"$out" &
  HOLD_PIDS+=($!)
  for _ in $(seq 200); do grep -q ready "$out" 2>/dev/null && return 0; sleep 0.05; done
  return 1
}
trap cleanup EXIT

failures=0
pass() { echo "ok   $1"; }
fail() {
  echo "FAIL $1"
  failures=$((failures + 1))
}
# check NAME CMD...: passes when CMD succeeds.
check() {
  local name=$1
  shift
  if "$@"; then pass "$name"; else fail "$name"; fi
}
# fs CMD...: runs CMD with the library active for $MNT.
fs() { env LD_PRELOAD="$PRELOAD" FANSTORE_MOUNT="$MNT" FANSTORE_TABLE="$TABLE" "$@"; }
# same NAME EXPECTED_FILE ACTUAL_FILE
same() {
  if diff -u "$2" "$3" >"$WORK/diff" 2>&1; then
    pass "$1"
  else
    fail "$1"
    head -40 "$WORK/diff"
  fi
}

# ---- The tree -------------------------------------------------------------------------------
mkdir -p "$SRC/a/b/c" "$SRC/empty" "$SRC/héllo wörld/日本" "$SRC/many" "$WORK/mnt"
echo hello >"$SRC/a/x.txt"
echo deep >"$SRC/a/b/c/deep.txt"
chmod 600 "$SRC/a/b/c/deep.txt"
: >"$SRC/a/empty.txt"
head -c 5000000 /dev/urandom >"$SRC/a/b/big.bin"
echo ü >"$SRC/héllo wörld/ünï.txt"
echo 本 >"$SRC/héllo wörld/日本/ファイル.txt"
for i in $(seq 1 300); do echo "sample $i" >"$SRC/many/s$i.txt"; done
ln -s a/b "$SRC/link"
ln -s a/x.txt "$SRC/linkfile"
ln -s nowhere "$SRC/dangling"
"$PY" - "$SRC" <<'EOF' || { echo "FAIL cannot create the Python data files"; exit 1; }
import sys, numpy as np, h5py
from PIL import Image
src = sys.argv[1]
np.save(src + '/a/arr.npy', np.arange(100000, dtype=np.float64))
Image.new('RGB', (64, 48), (200, 30, 90)).save(src + '/a/img.jpg', quality=90)
with h5py.File(src + '/a/data.h5', 'w') as f:
    f.create_dataset('x', data=np.arange(1000, dtype=np.int32).reshape(10, 100))
EOF
touch -h -d '2020-01-02 03:04:05.123456789' "$SRC/link"
mktable "$SRC" "$TABLE" || { echo "FAIL fanstore-mktable"; exit 1; }
cd "$WORK" || exit 1

# ---- Inert without configuration -----------------------------------------------------------
out=$(env -u FANSTORE_MOUNT -u FANSTORE_TABLE LD_PRELOAD="$PRELOAD" /bin/true 2>&1)
check "inert: no output and exit 0 without FANSTORE_*" test $? -eq 0 -a -z "$out"
out=$(env LD_PRELOAD="$PRELOAD" FANSTORE_MOUNT="$MNT" FANSTORE_TABLE="$TABLE" FANSTORE_DISABLE=1 \
  cat "$MNT/a/x.txt" 2>&1)
check "inert: FANSTORE_DISABLE=1" test "$out" = "cat: $MNT/a/x.txt: No such file or directory"
out=$(env LD_PRELOAD="$PRELOAD" FANSTORE_MOUNT="$MNT" FANSTORE_TABLE="$WORK/nope" /bin/true 2>&1)
check "inert: unreadable table, silent" test $? -eq 0 -a -z "$out"
out=$(fs /bin/echo hi 2>&1)
check "active: silent unless FANSTORE_LOG" test "$out" = hi

# ---- Data ------------------------------------------------------------------------------------
check "cat" test "$(fs cat "$MNT/a/x.txt")" = hello
(cd "$SRC" && find . -type f -print0 | sort -z | xargs -0 md5sum) >"$WORK/md5.src"
fs bash -c "cd '$MNT' && find . -type f -print0 | sort -z | xargs -0 md5sum" >"$WORK/md5.mnt"
same "md5sum of every file (cd, find, xargs, md5sum)" "$WORK/md5.src" "$WORK/md5.mnt"
check "cat of the large file" cmp "$SRC/a/b/big.bin" <(fs cat "$MNT/a/b/big.bin")
check "dd with skip" cmp <(dd if="$SRC/a/b/big.bin" bs=4096 skip=100 count=10 2>/dev/null) \
  <(fs dd if="$MNT/a/b/big.bin" bs=4096 skip=100 count=10 2>/dev/null)
check "cat through a symlinked directory" test "$(fs cat "$MNT/link/c/deep.txt")" = deep
check "other spellings of the mount: //, /./ and a trailing /" test \
  "$(fs cat "/$MNT//a/./x.txt" "${MNT%/ds}/./ds/a/x.txt" "${MNT%/ds}//ds//a/x.txt")" = "hello${NL}hello${NL}hello"
cat >"$WORK/rofs.py" <<'PY'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def err(rc):
    return "ok" if rc == 0 else os.strerror(ctypes.get_errno())
class Ts(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]
omit = (Ts * 2)(Ts(0, (1 << 30) - 2), Ts(0, (1 << 30) - 2))
f = sys.argv[1]
print(err(libc.remove(f.encode())), err(libc.remove((f + "-missing").encode())),
      err(libc.utimensat(-100, f.encode(), omit, 0)), err(libc.utimensat(-100, f.encode(), None, 0)))
PY
check "remove(), utimensat(UTIME_OMIT x2) and utimensat(now) as on a read-only mount" test \
  "$(fs /usr/bin/python3 "$WORK/rofs.py" "$MNT/a/x.txt")" = \
  "Read-only file system Read-only file system ok Read-only file system"
check "ls of the mount spelled with //" test "$(fs ls "/${MNT}/" | head -1)" = "$(fs ls "$MNT" | head -1)"
long=$MNT/$(printf 'a%.0s' $(seq 4100))
check "a path of PATH_MAX bytes or more: ENAMETOOLONG, as the kernel says" \
  bash -c "LD_PRELOAD='$PRELOAD' FANSTORE_MOUNT='$MNT' FANSTORE_TABLE='$TABLE' stat '$long' 2>&1 | grep -q 'File name too long'"
check "bash redirection from the mount" test "$(fs bash -c "read l < '$MNT/a/x.txt'; echo \$l")" = hello

# ---- Listings --------------------------------------------------------------------------------
# ls -laR modulo paths, directory sizes (file-system specific, and so column widths), "total"
# lines and the ".." of the top directory (its real parent).
normalize_ls() {
  sed "s|$1|ROOT|" | awk '
    /^total / { next }
    /^ROOT:$/ { top = 1 }
    /^$/ { top = 0 }
    top && / \.\.$/ { next }
    /^d/ { $5 = "-" }
    { $1 = $1; print }'
}
# shellcheck disable=SC2012  # ls's own output, through the interceptor, is what is compared.
ls -laR --time-style=full-iso "$SRC" | normalize_ls "$SRC" >"$WORK/ls.src"
fs ls -laR --time-style=full-iso "$MNT" | normalize_ls "$MNT" >"$WORK/ls.mnt"
same "ls -laR" "$WORK/ls.src" "$WORK/ls.mnt"
dirsize='s/^d \([0-7]*\) [0-9]*/d \1 -/'
(cd "$SRC" && find . -printf '%y %m %s %P %l\n' | sed "$dirsize" | sort) >"$WORK/find.src"
fs bash -c "cd '$MNT' && find . -printf '%y %m %s %P %l\n'" | sed "$dirsize" | sort >"$WORK/find.mnt"
same "find -printf (type, mode, size, name, target)" "$WORK/find.src" "$WORK/find.mnt"
(cd "$SRC" && find . -type f | sort) >"$WORK/f.src"
(fs find "$MNT" -type f | sed "s|^$MNT|.|" | sort) >"$WORK/f.mnt"
same "find -type f" "$WORK/f.src" "$WORK/f.mnt"
check "find -L follows the directory link" test "$(fs find -L "$MNT/link" -name deep.txt)" = "$MNT/link/c/deep.txt"
fs du -a "$MNT" >"$WORK/du.mnt" 2>"$WORK/du.err"
check "du -a runs cleanly" test $? -eq 0 -a ! -s "$WORK/du.err"
(cd "$SRC" && find . -type f -print0 | du -b --files0-from=- | sort -k2) >"$WORK/du.src"
fs bash -c "cd '$MNT' && find . -type f -print0 | du -b --files0-from=- | sort -k2" >"$WORK/dub.mnt"
same "du -b of every file" "$WORK/du.src" "$WORK/dub.mnt"
check "du -s counts every file" test "$(fs du -s --apparent-size -B1 "$MNT" | cut -f1)" -gt 5000000

# ---- Copies and archives ---------------------------------------------------------------------
fs cp -r "$MNT" "$WORK/copy" 2>"$WORK/cp.err"
check "cp -r out of the mount" test $? -eq 0 -a ! -s "$WORK/cp.err"
check "diff -r of the copy" diff -r --no-dereference "$SRC" "$WORK/copy"
fs cp -a "$MNT" "$WORK/copy-a" 2>"$WORK/cpa.err"
check "cp -a out of the mount" test $? -eq 0 -a ! -s "$WORK/cpa.err"
check "cp -a keeps mtimes" test "$(stat -c %Y "$WORK/copy-a/a/x.txt")" = "$(stat -c %Y "$SRC/a/x.txt")"
fs tar -cf "$WORK/t.tar" -C "$WORK/mnt" ds 2>"$WORK/tar.err"
check "tar -c -C parent ds: exit 0, no warning" test $? -eq 0 -a ! -s "$WORK/tar.err"
mkdir "$WORK/untar" && tar -xf "$WORK/t.tar" -C "$WORK/untar"
check "tar round trip" diff -r --no-dereference "$SRC" "$WORK/untar/ds"
fs tar -cf "$WORK/t2.tar" "$MNT" 2>"$WORK/tar2.err"
check "tar -c of the absolute mount: exit 0" test $? -eq 0
check "tar -c: no 'file changed as we read it'" bash -c "! grep -q 'changed as we read' '$WORK/tar2.err'"
check "tar lists every entry" test "$(tar -tf "$WORK/t2.tar" | wc -l)" -eq "$(find "$SRC" | wc -l)"

# ---- Names and attributes --------------------------------------------------------------------
check "stat matches the source" test "$(fs stat -c '%s %a %F %Y %h %U' "$MNT/a/b/big.bin")" = \
  "$(stat -c '%s %a %F %Y %h %U' "$SRC/a/b/big.bin")"
check "stat -L through a link" test "$(fs stat -L -c %s "$MNT/linkfile")" = 6
check "stat -f: no free space" test "$(fs stat -f -c %f "$MNT")" = 0
check "realpath" test "$(fs realpath "$MNT/link/c/../c/deep.txt")" = "$MNT/a/b/c/deep.txt"
check "realpath -e of a missing file fails" bash -c "! LD_PRELOAD='$PRELOAD' FANSTORE_MOUNT='$MNT' \
  FANSTORE_TABLE='$TABLE' realpath -e '$MNT/nope' 2>/dev/null"
check "readlink" test "$(fs readlink "$MNT/link")" = a/b
check "readlink -f" test "$(fs readlink -f "$MNT/linkfile")" = "$MNT/a/x.txt"
out=$(fs bash -c "cd '$MNT/a' && pwd && /bin/pwd && ls && cat x.txt && cd b/c && cat deep.txt && \
  ls ../../.. && cd '$MNT/héllo wörld/日本' && /bin/pwd && cat ファイル.txt && cd ../../.. && /bin/pwd")
expected="$MNT/a
$MNT/a
arr.npy
b
data.h5
empty.txt
img.jpg
x.txt
hello
deep
a
dangling
empty
héllo wörld
link
linkfile
many
$MNT/héllo wörld/日本
本
$WORK/mnt"
check "cd into the mount in bash -c (children inherit the directory)" test "$out" = "$expected"
check "relative paths from the directory above the mount" \
  test "$(fs bash -c "cd '$WORK/mnt' && cat ds/a/x.txt && ls -d ds/a && cd ds && /bin/pwd")" = "hello
ds/a
$MNT"

# A mount whose parent does not exist (the usual /fanstore/ds): tools that check every
# component (realpath, readlink -f, pathlib's strict resolve) see read-only directories there.
ABS=$WORK/absent/ds
absent() { env LD_PRELOAD="$PRELOAD" FANSTORE_MOUNT="$ABS" FANSTORE_TABLE="$TABLE" "$@"; }
check "absent parent: realpath" test "$(absent realpath "$ABS/link/c")" = "$ABS/a/b/c"
check "absent parent: readlink -f" test "$(absent readlink -f "$ABS/linkfile")" = "$ABS/a/x.txt"
check "absent parent: stat of the parent" test "$(absent stat -c '%F %a' "$WORK/absent")" = "directory 555"
check "absent parent: pathlib resolve(strict=True)" test "$(absent "$PY" -c \
  "import pathlib; print(pathlib.Path('$ABS/link/c').resolve(strict=True))")" = "$ABS/a/b/c"
check "absent parent: cd in bash" test "$(absent bash -c "cd '$ABS/a' && /bin/pwd && cat x.txt")" = "$ABS/a
hello"
check "absent parent: still absent" test ! -e "$WORK/absent"

# ---- Errors ------------------------------------------------------------------------------------
errs() { fs "$@" 2>&1 >/dev/null | sed "s|$MNT|M|g"; }
check "ENOENT" test "$(errs cat "$MNT/nope")" = "cat: M/nope: No such file or directory"
check "ENOTDIR" test "$(errs cat "$MNT/a/x.txt/y")" = "cat: M/a/x.txt/y: Not a directory"
check "EROFS: touch" test "$(errs touch "$MNT/new")" = "touch: cannot touch 'M/new': Read-only file system"
check "EROFS: touch existing" test "$(errs touch "$MNT/a/x.txt")" = \
  "touch: cannot touch 'M/a/x.txt': Read-only file system"
check "EEXIST: mkdir existing" test "$(errs mkdir "$MNT/a")" = "mkdir: cannot create directory ‘M/a’: File exists"
check "EROFS: mkdir" test "$(errs mkdir "$MNT/newdir")" = \
  "mkdir: cannot create directory ‘M/newdir’: Read-only file system"
check "EROFS: rm" test "$(errs rm "$MNT/a/x.txt")" = "rm: cannot remove 'M/a/x.txt': Read-only file system"
check "EROFS: rm -rf" bash -c "LD_PRELOAD='$PRELOAD' FANSTORE_MOUNT='$MNT' FANSTORE_TABLE='$TABLE' \
  rm -rf '$MNT/a' 2>&1 | grep -q 'Read-only file system' && test -f '$SRC/a/x.txt'"
check "EROFS: bash redirection" test "$(errs bash -c "echo x > '$MNT/a/x.txt'")" = \
  "bash: line 1: M/a/x.txt: Read-only file system"
check "the source is untouched" test "$(cat "$SRC/a/x.txt")" = hello

# The errno of every modifying call, against a real read-only bind mount when possible.
fs "$PROBE" "$MNT" errors >"$WORK/errors.mnt"
mkdir -p "$RO"
if mount --bind "$SRC" "$RO" 2>/dev/null && mount -o remount,bind,ro "$RO" 2>/dev/null; then
  "$PROBE" "$RO" errors >"$WORK/errors.ro"
  umount "$RO"
  same "errors equal a read-only bind mount's" "$WORK/errors.ro" "$WORK/errors.mnt"
else
  mountpoint -q "$RO" && umount "$RO"
  check "errors: EROFS for writes (no bind mount: not root)" grep -q '^mkdir new: EROFS$' "$WORK/errors.mnt"
  check "errors: EEXIST for an existing name" grep -q '^mkdir existing: EEXIST$' "$WORK/errors.mnt"
fi

# ---- libc, call by call -----------------------------------------------------------------------
"$PROBE" "$SRC" walk >"$WORK/probe.src"
check "probe on the source" test $? -eq 0
fs "$PROBE" "$MNT" walk >"$WORK/probe.mnt"
check "probe at the mount: no internal mismatch" test $? -eq 0
same "probe: nftw, ftw, scandir, glob, streams, descriptors, stdio, names" "$WORK/probe.src" "$WORK/probe.mnt"

# ---- Python --------------------------------------------------------------------------------
fs "$PY" - "$MNT" "$SRC" <<'EOF' >"$WORK/py.out" 2>&1
import errno, glob, hashlib, os, pathlib, sys
M, S = sys.argv[1], sys.argv[2]
rel = lambda root, paths: sorted(os.path.relpath(p, root) for p in paths)

assert open(M + '/a/x.txt').read() == 'hello\n'
for root, dirs, files in os.walk(S):
    for f in files:
        s = os.path.join(root, f)
        m = os.path.join(M, os.path.relpath(s, S))
        if os.path.islink(s) and not os.path.exists(s):
            continue
        with open(m, 'rb') as fh:
            data = fh.read()
            a, b = os.stat(m), os.fstat(fh.fileno())
            assert (a.st_dev, a.st_ino, a.st_size, a.st_mode, a.st_mtime_ns, a.st_ctime_ns, a.st_nlink) == \
                   (b.st_dev, b.st_ino, b.st_size, b.st_mode, b.st_mtime_ns, b.st_ctime_ns, b.st_nlink), m
        assert data == open(s, 'rb').read(), m
print('open/read/stat/fstat: ok')

assert sorted(e.name for e in os.scandir(M)) == sorted(os.listdir(S))
for e in os.scandir(M + '/a'):
    assert e.is_dir() == os.path.isdir(S + '/a/' + e.name) and e.stat().st_size == os.stat(S + '/a/' + e.name).st_size or e.is_dir()
walk = lambda top: sorted((os.path.relpath(r, top), sorted(d), sorted(f)) for r, d, f in os.walk(top))
assert walk(M) == walk(S)
assert sorted((os.path.relpath(r, M), sorted(d), sorted(f)) for r, d, f, _ in os.fwalk(M)) == walk(S)
print('scandir/walk/fwalk: ok')

assert rel(M, glob.glob(M + '/**/*', recursive=True)) == rel(S, glob.glob(S + '/**/*', recursive=True))
assert rel(M, glob.glob(M + '/many/s1*.txt')) == rel(S, glob.glob(S + '/many/s1*.txt'))
print('glob: ok')

p = pathlib.Path(M)
assert sorted(x.name for x in (p / 'a').iterdir()) == sorted(os.listdir(S + '/a'))
assert (p / 'link' / 'c' / 'deep.txt').read_text() == 'deep\n'
assert (p / 'link' / 'c').resolve() == p / 'a' / 'b' / 'c'
assert (p / 'a' / 'x.txt').is_file() and (p / 'empty').is_dir() and (p / 'dangling').is_symlink()
assert not (p / 'dangling').exists()
assert sorted(str(x.relative_to(p)) for x in p.rglob('*.txt')) == sorted(str(x.relative_to(S)) for x in pathlib.Path(S).rglob('*.txt'))
print('pathlib: ok')

os.chdir(M + '/a')
assert os.getcwd() == M + '/a' and open('x.txt').read() == 'hello\n' and os.path.isdir('b/c')
os.chdir('..')
assert os.getcwd() == M
os.chdir('/')
print('chdir/getcwd: ok')

for path, fn, err in [
    (M + '/nope', open, errno.ENOENT),
    (M + '/a/x.txt/y', os.stat, errno.ENOTDIR),
    (M + '/new', lambda p: open(p, 'w'), errno.EROFS),
    (M + '/a', os.mkdir, errno.EEXIST),
    (M + '/a/x.txt', os.unlink, errno.EROFS),
    (M + '/a/x.txt', lambda p: os.getxattr(p, 'user.x'), errno.ENODATA),
]:
    try:
        fn(path)
        raise AssertionError('no error for ' + path)
    except OSError as e:
        assert e.errno == err, (path, e)
assert os.listxattr(M + '/a/x.txt') == []
assert os.statvfs(M).f_flag & os.ST_RDONLY
print('errors: ok')

import numpy as np
arr = np.load(M + '/a/arr.npy', mmap_mode='r')
assert isinstance(arr, np.memmap) and arr.shape == (100000,) and float(arr.sum()) == float(np.arange(100000).sum())
assert np.array_equal(np.load(M + '/a/arr.npy'), np.load(S + '/a/arr.npy'))
print('numpy mmap: ok')

from PIL import Image
with Image.open(M + '/a/img.jpg') as im:
    im.load()
    assert im.size == (64, 48) and im.format == 'JPEG'
    assert list(im.getdata()) == list(Image.open(S + '/a/img.jpg').getdata())
print('PIL: ok')

import h5py
with h5py.File(M + '/a/data.h5', 'r') as f:
    x = f['x'][...]
    assert x.shape == (10, 100) and int(x.sum()) == sum(range(1000))
print('h5py: ok')
EOF
rc=$?
sed 's/^/     /' "$WORK/py.out"
check "python3: open, stat, scandir, walk, glob, pathlib, chdir, errors, numpy, PIL, h5py" test $rc -eq 0

# ---- Concurrency and process boundaries -------------------------------------------------------
fs "$PY" - "$MNT" <<'EOF' >"$WORK/thr.out" 2>&1
import os, sys, threading
M = sys.argv[1]
errors = []
def work():
    try:
        for i in range(1, 301):
            p = f'{M}/many/s{i}.txt'
            with open(p) as f:
                assert f.read() == f'sample {i}\n'
                assert os.fstat(f.fileno()).st_ino == os.stat(p).st_ino
    except Exception as e:
        errors.append(e)
threads = [threading.Thread(target=work) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
assert not errors, errors
pid = os.fork()
if pid == 0:
    os._exit(0 if open(M + '/a/x.txt').read() == 'hello\n' else 1)
assert os.waitpid(pid, 0)[1] == 0
import subprocess
assert subprocess.run(['cat', M + '/a/x.txt'], capture_output=True).stdout == b'hello\n'
fd = os.open(M + '/a/x.txt', os.O_RDONLY)
st = os.fstat(fd)
r = subprocess.run(['true'], close_fds=True)  # vfork + close_range in the child
assert os.fstat(fd).st_ino == st.st_ino, 'descriptor record lost across vfork'
print('threads, fork, subprocess: ok')
EOF
rc=$?
check "python3: threads, fork, subprocess" test $rc -eq 0 || cat "$WORK/thr.out"

# ---- Files held by other nodes: opens go to the agent -----------------------------------------
# A stand-in agent speaks the local protocol (common/proto.h): kOpen with the relative path,
# answered with a memfd holding the file, or an errno ("serve"), or never ("hang").
mktable --remote 'many/*' --remote 'a/b/big.bin' "$SRC" "$WORK/table-remote" || fail "mktable --remote"
cat >"$WORK/agent.py" <<'EOF'
import os, socket, struct, sys
sock_path, root, mode = sys.argv[1:4]
HDR = struct.Struct('<IIiI')
MAGIC = 0x46534c31
def recv_exact(c, n):
    buf = b''
    while len(buf) < n:
        chunk = c.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(sock_path)
srv.listen(64)
open(sock_path + '.ready', 'w').close()
held = []
accepts = 0
def serve(c):
    # Like the real agent: any number of requests on one connection, until the client closes it.
    try:
        while True:
            magic, op, _, n = HDR.unpack(recv_exact(c, HDR.size))
            rel = recv_exact(c, n).decode()
            try:
                data = open(os.path.join(root, rel), 'rb').read()
            except OSError as e:
                c.sendall(HDR.pack(MAGIC, op, e.errno, 0))
                continue
            fd = os.memfd_create('fanstore')
            os.write(fd, data)
            os.lseek(fd, 0, os.SEEK_SET)
            socket.send_fds(c, [HDR.pack(MAGIC, op, 0, 0)], [fd])
            os.close(fd)
    except (EOFError, OSError):
        pass
    finally:
        c.close()
import threading
while True:
    c, _ = srv.accept()
    accepts += 1
    with open(sock_path + '.accepts', 'w') as f:
        f.write(str(accepts))
    if mode == 'hang':
        held.append(c)
        continue
    threading.Thread(target=serve, args=(c,), daemon=True).start()
EOF
start_agent() {  # start_agent SOCKET MODE
  rm -f "$1" "$1.ready"
  "$PY" "$WORK/agent.py" "$1" "$SRC" "$2" &
  AGENT_PID=$!
  for _ in $(seq 200); do [ -e "$1.ready" ] && return; sleep 0.05; done
}
stop_agent() {
  kill "$AGENT_PID" 2>/dev/null
  wait "$AGENT_PID" 2>/dev/null
}
remote() { env LD_PRELOAD="$PRELOAD" FANSTORE_MOUNT="$MNT" FANSTORE_TABLE="$WORK/table-remote" "$@"; }

start_agent "$WORK/agent.sock" serve
export FANSTORE_SOCKET="$WORK/agent.sock"
check "remote open: content from the agent" test "$(remote cat "$MNT/many/s7.txt")" = "sample 7"
check "remote open: a large file" cmp "$SRC/a/b/big.bin" <(remote cat "$MNT/a/b/big.bin")
remote "$PY" - "$MNT" <<'EOF' >"$WORK/remote.out" 2>&1
import os, sys
M = sys.argv[1]
for i in (1, 150, 300):
    p = f'{M}/many/s{i}.txt'
    with open(p) as f:
        a, b = os.stat(p), os.fstat(f.fileno())
        assert (a.st_dev, a.st_ino, a.st_size, a.st_mode, a.st_mtime_ns, a.st_ctime_ns) == \
               (b.st_dev, b.st_ino, b.st_size, b.st_mode, b.st_mtime_ns, b.st_ctime_ns), p
        assert f.read() == f'sample {i}\n'
        assert os.get_inheritable(f.fileno()) is False  # Python opens with O_CLOEXEC
fd = os.open(M + '/many/s2.txt', os.O_RDONLY)
os.set_inheritable(fd, True)
assert os.get_inheritable(fd)
print('ok')
EOF
check "remote open: fstat equals stat, close-on-exec as asked" test "$(cat "$WORK/remote.out")" = ok ||
  cat "$WORK/remote.out"
remote "$PY" - "$MNT" "$WORK/agent.sock.accepts" <<'EOF' >"$WORK/remote2.out" 2>&1
import os, sys, threading
M, ACCEPTS = sys.argv[1:3]
accepts = lambda: int(open(ACCEPTS).read())
want = lambda i: f'sample {i}\n'
read = lambda i: open(f'{M}/many/s{i}.txt').read()
before = accepts()
assert all(read(i) == want(i) for i in range(1, 101))  # one process, 100 remote opens
assert accepts() - before == 1, f'{accepts() - before} connections for 100 sequential opens'
pid = os.fork()  # the child must not share the parent's kept connections
if pid == 0:
    ok = all(read(i) == want(i) for i in range(101, 201))
    os._exit(0 if ok else 1)
assert all(read(i) == want(i) for i in range(201, 301))
assert os.waitpid(pid, 0)[1] == 0, 'child read wrong data'
errors = []
def work(lo):
    if not all(read(i) == want(i) for i in range(lo, lo + 50)):
        errors.append(lo)
ts = [threading.Thread(target=work, args=(lo,)) for lo in (1, 51, 101, 151, 201, 251)]
[t.start() for t in ts]
[t.join() for t in ts]
assert not errors, errors
# The program closes every descriptor it does not know (as daemons do), then opens again.
os.closerange(3, 1024)
assert read(9) == want(9)
print('ok')
EOF
check "remote open: one kept connection for 100 opens; safe across fork, threads and closerange" \
  test "$(cat "$WORK/remote2.out")" = ok || cat "$WORK/remote2.out"
remote tar -cf "$WORK/remote.tar" -C "$WORK/mnt" ds 2>"$WORK/rtar.err"
check "remote open: tar -c without warnings" test $? -eq 0 -a ! -s "$WORK/rtar.err"
stop_agent

check "remote open, agent gone: EIO" test "$(remote cat "$MNT/many/s7.txt" 2>&1)" = \
  "cat: $MNT/many/s7.txt: Input/output error"
check "remote open, agent gone: local files still open" test "$(remote cat "$MNT/a/x.txt")" = hello
unset FANSTORE_SOCKET
check "remote open, no agent configured: EIO" test "$(remote cat "$MNT/many/s7.txt" 2>&1)" = \
  "cat: $MNT/many/s7.txt: Input/output error"
start_agent "$WORK/hang.sock" hang
t0=$(date +%s%N)
out=$(remote FANSTORE_SOCKET="$WORK/hang.sock" FANSTORE_OPEN_TIMEOUT_MS=300 cat "$MNT/many/s7.txt" 2>&1)
elapsed_ms=$((($(date +%s%N) - t0) / 1000000))
check "remote open, agent stuck: EIO after FANSTORE_OPEN_TIMEOUT_MS" \
  test "$out" = "cat: $MNT/many/s7.txt: Input/output error" -a "$elapsed_ms" -lt 5000
out=$(remote FANSTORE_SOCKET="$WORK/hang.sock" FANSTORE_OPEN_TIMEOUT_MS=300 FANSTORE_LOG=1 \
  cat "$MNT/many/s7.txt" 2>&1)
check "FANSTORE_LOG=1 explains the failure" grep -q 'receive failed: Connection timed out' <<<"$out"
stop_agent

echo
if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
