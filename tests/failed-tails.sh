#!/usr/bin/env bash
# failed-tails.sh BUILD_DIR: the last lines of each test that failed in BUILD_DIR's last ctest run,
# printed at the end of tests/run-all.sh, where a log cut to its head and tail still shows them.
set -euo pipefail
dir=${1:?usage: failed-tails.sh BUILD_DIR}
failed=$dir/Testing/Temporary/LastTestsFailed.log
log=$dir/Testing/Temporary/LastTest.log
[[ -s $failed && -f $log ]] || exit 0
while IFS=: read -r _ name; do
  echo "-- $name (failed; the last 25 lines of its output):"
  awk -v t="Testing: $name" '
    index($0, t) && substr($0, index($0, t) + length(t)) == "" { found = 1; next }
    found && /^Output:/ { out = 1; next }
    out && /^<end of output>/ { exit }
    out { print }' "$log" | tail -n 25
done <"$failed"
