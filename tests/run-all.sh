#!/usr/bin/env bash
# The README's second command: install everything, build from scratch, and pass every test:
# unit, integration, fuzzing, real-Slurm end-to-end and the quick benchmark. Then the unit
# tests again under ASan+UBSan (clang). Run as root on Debian 12. CI calls exactly this.
#   --no-asan   skip the sanitizer pass (faster local iteration)
set -euo pipefail
cd "$(dirname "$0")/.."
asan=1
[[ "${1:-}" == "--no-asan" ]] && asan=0
start=$(date +%s)

echo "== installing dependencies"
tests/install-deps.sh

echo "== building (RelWithDebInfo) in build/"
rm -rf build
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2 2>&1 | grep -vE '^\[ *[0-9]+%\]' || true
test -x build/bin/fanstore

rc=0
echo "== tests (all suites)"
ctest --test-dir build --output-on-failure --timeout 900 || rc=1

if [[ $asan -eq 1 ]]; then
  echo "== unit tests and fuzzing under ASan+UBSan (clang) in build-asan/"
  rm -rf build-asan
  CC=clang CXX=clang++ cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DFANSTORE_ENABLE_ASAN=ON \
    -DFANSTORE_ENABLE_UBSAN=ON -DFANSTORE_ENABLE_FUZZ=ON >/dev/null
  cmake --build build-asan -j2 2>&1 | grep -vE '^\[ *[0-9]+%\]' || true
  ctest --test-dir build-asan --output-on-failure -L 'unit|fuzz|asan' || rc=1
fi
echo "== all done in $(( $(date +%s) - start )) s: $([[ $rc -eq 0 ]] && echo PASSED || echo FAILED)"
exit $rc
