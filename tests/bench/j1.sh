#!/usr/bin/env bash
# J1 for the benchmark suite: on the test Slurm cluster (2 nodes, ports mode), the time from job
# start (slurmctld allocates the job) to the end of the batch script's first read under the mount,
# against the stage-in (the batch step's wait for its agent). Target: J1 <= stage-in + 1 s.
#
# Usage: j1.sh BUILD_DIR SAMPLES
# Uses the end-to-end harness of tests/slurm/e2e (start.sh ports, md5.sh, stop.sh), which measures J1
# in its md5 case. Prints one JSON line. Exits 3 with a reason on the last line when J1 cannot be
# measured here: not root, or the test cluster is already running (someone else's tests).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
slurm=$here/../slurm
build=$1
samples=${2:-1}
base=$(realpath -m "${FANSTORE_SLURM_BASE:-/var/tmp/fanstore-slurm}")

if [[ $(id -u) -ne 0 ]]; then echo "needs root (it starts the test Slurm cluster)"; exit 3; fi
if [[ ! -e $build/lib/spank_fanstore.so ]]; then echo "no SPANK plugin in $build/lib"; exit 3; fi
if "$slurm/cluster.sh" status --base "$base" >/dev/null 2>&1; then
  echo "the test Slurm cluster at $base is already running (another test or engineer is using it)"
  exit 3
fi
log=$(mktemp "${TMPDIR:-/tmp}/fanstore-j1.XXXXXX")
trap '"$slurm/e2e/stop.sh" "$build" >>"$log" 2>&1; rm -f "$log"' EXIT
if ! "$slurm/e2e/start.sh" "$build" ports >>"$log" 2>&1; then
  echo "cluster start failed: $(grep -m1 -iE 'fail|error' "$log" || tail -1 "$log")"
  exit 3
fi
firsts=() stages=()
for ((i = 0; i < samples; i++)); do
  out=$("$slurm/e2e/md5.sh" "$build" 2>&1)
  echo "$out" >>"$log"
  line=$(grep -m1 'J1: job start -> first read done' <<<"$out")
  if [[ -z $line ]]; then
    echo "the md5 job gave no J1 line: $(grep -m1 -E 'FAIL|could not' <<<"$out" || tail -1 <<<"$out")"
    exit 3
  fi
  firsts+=("$(sed -n 's/.*first read done: \([0-9.]*\) s.*/\1/p' <<<"$line")")
  stages+=("$(sed -n 's/.*agent): \([0-9.]*\) s.*/\1/p' <<<"$line")")
done
/usr/bin/python3 - "${firsts[*]}" "${stages[*]}" <<'PY'
import json, statistics, sys
f = [float(x) for x in sys.argv[1].split()]
s = [float(x) for x in sys.argv[2].split()]
fm, sm = statistics.median(f), statistics.median(s)
print(json.dumps({"first_read_seconds": fm, "stage_in_seconds": sm, "budget_seconds": sm + 1.0,
                  "samples": [{"first_read_seconds": a, "stage_in_seconds": b} for a, b in zip(f, s)],
                  "note": f"2-node ports-mode cluster, tests/slurm/e2e/md5.sh job (small tree dataset); job start = "
                          f"slurmctld's allocation, stage-in = the batch step's wait for its agent; median of {len(f)}"}))
PY
