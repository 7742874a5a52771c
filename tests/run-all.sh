#!/usr/bin/env bash
# The README's second command: install everything, build from scratch, and pass every test:
# unit, integration, real-Slurm end-to-end, lint (shellcheck over every script) and the quick
# benchmark; then the unit tests and the interceptor/agent integration tests under ASan+UBSan, the
# agent's unit tests (peer service included) under TSan, and a fuzzing run of the format and
# peer-request parsers (clang libFuzzer). Run as root on Debian 12. CI calls exactly this.
#   --no-asan   skip the sanitizer pass (faster local iteration)
set -euo pipefail
cd "$(dirname "$0")/.."
asan=1
[[ "${1:-}" == "--no-asan" ]] && asan=0
start=$(date +%s)
# phase NAME: a heading with the seconds since the start, so that a CI log shows where time goes.
phase() { echo "== $* (at $(($(date +%s) - start)) s)"; }
# Every build keeps line tables only (-g1): backtraces and sanitizer reports still name files and
# lines, and a file compiles 15-30% faster than with full debug information.
san_flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG=-g1 -DCMAKE_CXX_FLAGS_DEBUG=-g1)

phase "installing dependencies"
tests/install-deps.sh

phase "building (RelWithDebInfo, line tables) in build/"
rm -rf build
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" >/dev/null
cmake --build build -j2 2>&1 | grep -vE '^\[ *[0-9]+%\]' || true
test -x build/bin/fanstore

rc=0
# The unit tests and the lints run two at a time (the cases of one unit-test binary one after the
# other: see fanstore_add_gtest); every other suite alone, since they time real daemons and share
# the test cluster.
parallel='^(unit|lint)$'
phase "unit tests and lints, two at a time"
ctest --test-dir build --output-on-failure --timeout 900 -j2 -L "$parallel" || rc=1
phase "the quick benchmark, alone on the machine"
ctest --test-dir build --output-on-failure --timeout 900 -L '^bench$' || rc=1

# san_builds: the sanitizer builds (ASan+UBSan, TSan's agent_test, the fuzzers), one after the other;
# each marks its directory (.built) when it is done.
san_builds() {
  rm -rf build-asan build-tsan build-fuzz
  cmake -S . -B build-asan "${san_flags[@]}" -DFANSTORE_ENABLE_ASAN=ON -DFANSTORE_ENABLE_UBSAN=ON >/dev/null &&
    cmake --build build-asan -j2 && touch build-asan/.built &&
    cmake -S . -B build-tsan "${san_flags[@]}" -DFANSTORE_ENABLE_TSAN=ON >/dev/null &&
    cmake --build build-tsan -j2 --target agent_test && touch build-tsan/.built &&
    CC=clang CXX=clang++ cmake -S . -B build-fuzz "${san_flags[@]}" -DFANSTORE_ENABLE_ASAN=ON \
      -DFANSTORE_ENABLE_UBSAN=ON -DFANSTORE_ENABLE_FUZZ=ON -DFANSTORE_FUZZ_PACKER="$PWD/build/bin/fanstore" >/dev/null &&
    cmake --build build-fuzz -j2 --target format_fuzz peer_fuzz tree_fuzz && touch build-fuzz/.built
}
# built DIR: waits until the sanitizer builds have built DIR (true), or stopped without it (false).
built() {
  while [[ ! -e $1/.built ]] && kill -0 "$san_pid" 2>/dev/null; do sleep 1; done
  [[ -e $1/.built ]] || { echo "the sanitizer builds stopped before $1 was built: see build/sanitizer-builds.log"; false; }
}
if [[ $asan -eq 1 ]]; then
  # The sanitizer builds run beside the suites that follow, at the lowest CPU and I/O priority:
  # the serial suites mostly wait on daemons (they took about 20% longer beside the builds, which
  # got about one core). The compilers' temporary files go to a directory of the builds' own, not
  # /tmp, which tests watch.
  mkdir -p build/san-tmp
  (
    renice -n 19 -p "$BASHPID" >/dev/null || true
    ionice -c 3 -p "$BASHPID" || true
    TMPDIR=$PWD/build/san-tmp san_builds
  ) >build/sanitizer-builds.log 2>&1 &
  san_pid=$!
fi
phase "integration, security, Slurm and packaging, one at a time (the sanitizer builds beside them)"
ctest --test-dir build --output-on-failure --timeout 900 -LE '^(unit|lint|bench)$' || rc=1

if [[ $asan -eq 1 ]]; then
  phase "unit tests and the preload, serving and peer tests under ASan+UBSan (gcc) in build-asan/"
  # Two at a time: the three `asan` tests (one after the other, RESOURCE_LOCK) beside the unit tests.
  if built build-asan; then ctest --test-dir build-asan --output-on-failure -j2 -L '^(unit|asan)$' || rc=1; else rc=1; fi
  phase "the agent's unit tests, peer service included, under TSan (gcc) in build-tsan/"
  if built build-tsan; then
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/bin/agent_test --gtest_brief=1 || rc=1
  else
    rc=1
  fi
  phase "fuzzing the format parsers (clang libFuzzer, ASan+UBSan) in build-fuzz/"
  # The three fuzzers at once: each runs for a fixed time, so one after the other would only wait.
  if built build-fuzz; then ctest --test-dir build-fuzz --output-on-failure -L fuzz -j3 || rc=1; else rc=1; fi
  wait "$san_pid" || true
  echo "-- the sanitizer builds' output (build/sanitizer-builds.log), without progress lines:"
  grep -vE '^\[ *[0-9]+%\]' build/sanitizer-builds.log || true
  rm -rf build/san-tmp
fi
if [[ $rc -ne 0 ]]; then
  phase "what failed"
  for b in build build-asan build-fuzz; do [[ -d $b ]] && tests/failed-tails.sh "$b"; done
fi
echo "== all done in $(( $(date +%s) - start )) s: $([[ $rc -eq 0 ]] && echo PASSED || echo FAILED)"
exit $rc
