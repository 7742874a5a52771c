# shellcheck shell=bash
# Shared helpers for FanStore's shell tests. Source it; set FANSTORE_BIN_DIR first or pass
# the build directory as $1 to the test.
set -uo pipefail

FAILURES=0
CHECKS=0
TEST_NAME=${TEST_NAME:-$(basename "$0" .sh)}

ok()   { CHECKS=$((CHECKS + 1)); echo "  ok   $*"; }
bad()  { CHECKS=$((CHECKS + 1)); FAILURES=$((FAILURES + 1)); echo "  FAIL $*" >&2; }
# check "description" command...   passes when the command succeeds
check() { local d=$1; shift; if "$@"; then ok "$d"; else bad "$d"; fi; }
# expect_fail "description" EXPECTED_RC "pattern in stderr" command...
expect_fail() {
  local d=$1 rc_want=$2 pat=$3; shift 3
  local err rc
  err=$("$@" 2>&1 >/dev/null); rc=$?
  if [[ $rc -eq $rc_want ]] && grep -qE -- "$pat" <<<"$err"; then
    ok "$d (exit $rc: $(head -c 160 <<<"$err" | head -1))"
  else
    bad "$d: exit $rc (want $rc_want), stderr: $err (want /$pat/)"
  fi
}
# indent PREFIX: prints its input with PREFIX before every line.
indent() { awk -v p="$1" '{ print p $0 }'; }
finish() {
  echo "$TEST_NAME: $((CHECKS - FAILURES))/$CHECKS checks passed"
  [[ $FAILURES -eq 0 ]]
}
mktmp() { mktemp -d "${TMPDIR:-/tmp}/fanstore-$TEST_NAME.XXXXXX"; }

# A tree with the awkward cases: nested and empty directories, non-ASCII names, a symlink,
# an empty file, compressible and incompressible files, and optionally a large file.
# flip_byte FILE OFFSET: inverts the byte at OFFSET, so that it changes whatever it was (writing a
# fixed byte into random data left it unchanged 1 time in 256).
flip_byte() {
  local byte
  byte=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  # shellcheck disable=SC2059  # the format is the escaped byte
  printf "\\x$(printf %02x $((byte ^ 255)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
make_tree() {
  local dir=$1 big_mb=${2:-0}
  mkdir -p "$dir/a/b/c" "$dir/empty" "$dir/also empty/inner" "$dir/données/élève"
  printf 'hello\n' > "$dir/a/hello.txt"
  : > "$dir/a/empty.txt"
  seq 1 20000 > "$dir/a/b/numbers.txt"
  head -c 300000 /dev/urandom > "$dir/a/b/c/random.bin"
  printf 'ünïcödé\n' > "$dir/données/élève/naïve.txt"
  printf 'space\n' > "$dir/a/with space.txt"
  for i in $(seq 1 30); do head -c $((i * 700)) /dev/urandom > "$dir/a/b/s$i.dat"; done
  ln -s b/numbers.txt "$dir/a/link-to-numbers"
  ln -s a/b "$dir/dirlink"
  chmod 0600 "$dir/a/hello.txt"
  chmod 0750 "$dir/a/b"
  touch -d '2020-02-03 04:05:06.789' "$dir/a/hello.txt"
  if [[ $big_mb -gt 0 ]]; then head -c $((big_mb * 1048576)) /dev/urandom > "$dir/big.bin"; fi
}

# Root-only helpers for tests that need MUNGE and the two unprivileged test users (the same
# users the Slurm test cluster creates).
ensure_munge() {
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    runuser -u munge -- /usr/sbin/munged --force
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  munge -n | unmunge >/dev/null
}
ensure_users() {
  local u
  for u in "$@"; do id "$u" >/dev/null 2>&1 || useradd -m -s /bin/bash "$u"; done
}

# asan_runtime LIB: the ASan runtime LIB links against ("" for a normal build). A sanitizer build
# of the preload library only loads into other programs with that runtime preloaded first.
asan_runtime() { ldd "$1" 2>/dev/null | grep -o '/[^ ]*libasan[^ ]*' | head -1; }
