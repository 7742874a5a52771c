#!/usr/bin/env bash
# FanStore benchmark suite: every workload of BENCHMARKS.md against its baseline, side by side.
#
#   tests/bench/run.sh [--quick] [--out DIR] [--build DIR] [--cache DIR] [--only R1,M2,...]
#                      [--skip-j1] [--no-docs]
#
#   --quick      small datasets and fewer rounds (under 2 minutes): checks that every workload
#                runs and gives sane numbers (non-zero, the same data read in both arms); never
#                fails on a ratio. This is what ctest runs (label bench).
#   --out DIR    where results.json, benchmarks.md and the plots go
#                (default BUILD/bench, or BUILD/bench-quick with --quick)
#   --build DIR  the FanStore build directory (default: $FANSTORE_BUILD, else ./build)
#   --cache DIR  generated datasets, kept between runs and keyed by their parameters
#                (default: $FANSTORE_BENCH_CACHE, else /var/tmp/fanstore-bench-cache)
#   --no-docs    a full run regenerates docs/benchmarks.md and docs/bench/*.png; this skips it
#   --scale      instead of the suite: the ImageNet-scale runs of scale.py (1.33M files and 14.2M
#                entries, about 20 minutes and 15 GB of memory); results-scale.json and scale.md
#                in OUT, and with docs, docs/bench/scale.md (a section of docs/benchmarks.md)
#   --scale-out  instead of the suite: scaleout.py on the netns test cluster at 2 to 64 nodes (N1-N6,
#                3 runs each, about 25 minutes), then scaleout_model.py's fit, 64-node check and
#                predictions; results-scaleout.json and scaleout.md in OUT, and with docs in
#                docs/bench/ (a section of docs/benchmarks.md); --nodes 2,4 and --runs 1 make a
#                short one (pass --no-docs with them)
#
# Needs the packages of tests/install-deps.sh; run as root (sshd for the remote file system
# stand-in, mpirun --allow-run-as-root). Results: OUT/results.json (every raw sample, the
# medians, ratios and the machine), OUT/benchmarks.md and OUT/bench/*.png.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
quick=0 out="" build="${FANSTORE_BUILD:-$repo/build}" cache="${FANSTORE_BENCH_CACHE:-/var/tmp/fanstore-bench-cache}"
docs=1 pass=() scale=0 scaleout=0 scaleout_args=()
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --out) out=$2; shift ;;
    --build) build=$2; shift ;;
    --cache) cache=$2; shift ;;
    --only) pass+=(--only "$2"); shift ;;
    --skip-j1) pass+=(--skip-j1) ;;
    --no-docs) docs=0 ;;
    --scale) scale=1 ;;
    --scale-out) scaleout=1 ;;
    --nodes|--runs) scaleout_args+=("$1" "$2"); shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
build=$(cd "$build" && pwd) || { echo "run.sh: no build directory (use --build)" >&2; exit 2; }
for f in bin/fanstore bin/fanstore-agent lib/libfanstore_preload.so; do
  [[ -e $build/$f ]] || { echo "run.sh: $build/$f missing: build FanStore first" >&2; exit 2; }
done
missing=()
for c in cc /usr/bin/python3 sshfs /usr/sbin/sshd ssh-keygen fusermount mpirun strace hyperfine zstd tar; do
  command -v "$c" >/dev/null || missing+=("$c")
done
/usr/bin/python3 -c 'import torch, torchvision, PIL, numpy, matplotlib' 2>/dev/null || missing+=(python3-torch/torchvision/pil/matplotlib)
if ((${#missing[@]})); then
  echo "run.sh: missing ${missing[*]}: run tests/install-deps.sh" >&2
  exit 2
fi
# The datasets are cached between runs, so the cache must be this user's alone (the default is in
# world-writable /var/tmp).
# shellcheck source=../own_dir.sh
source "$here/../own_dir.sh"
own_dir "$cache" || exit 2
if [[ -z $out ]]; then out=$build/bench; ((quick)) && out=$build/bench-quick; fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
mode=(); ((quick)) && mode=(--quick)

# The C helper: generators and the timed loops.
cc -O2 -Wall -Wextra -o "$out/fsbench" "$here/fsbench.c" -lxxhash -lzstd -lm

start=$(date +%s)
rc=0
# published NAME WHAT: after a run that wrote OUT/results-NAME.json, its report (the command
# after WHAT, which writes OUT/NAME.md); with docs, both copied to docs/bench/ and
# docs/benchmarks.md regenerated (report.py appends NAME.md). Exits with the run's status.
published() {
  local name=$1 what=$2
  shift 2
  if ((rc == 0)); then
    "$@" || rc=1
    if ((docs && rc == 0)); then
      cp "$out/results-$name.json" "$out/$name.md" "$repo/docs/bench/"
      /usr/bin/python3 "$here/report.py" "$repo/docs/bench/results.json" --md "$repo/docs/benchmarks.md" --plots "$repo/docs/bench" || rc=1
      echo "run.sh: regenerated docs/bench/$name.md and docs/benchmarks.md"
    fi
  fi
  echo "run.sh: $what run $( ((rc == 0)) && echo passed || echo FAILED) in $(($(date +%s) - start)) s; results in $out"
  exit $rc
}
if ((scaleout)); then
  /usr/bin/python3 "$here/scaleout.py" --out "$out" --build "$build" "${scaleout_args[@]}" || rc=$?
  # With the published side-by-side runs of the large exchange (scaleout.py --exchange-via peers,pmix).
  exchange=()
  for f in "$repo"/docs/bench/results-exchange-*.json; do [[ -f $f ]] && exchange+=(--exchange "$f"); done
  published scaleout scale-out /usr/bin/python3 "$here/scaleout_model.py" "$out/results-scaleout.json" --md "$out/scaleout.md" "${exchange[@]}"
fi
if ((scale)); then
  /usr/bin/python3 "$here/scale.py" --out "$out" --build "$build" --fsbench "$out/fsbench" --cache "$cache" || rc=$?
  published scale scale /usr/bin/python3 "$here/report.py" "$out/results-scale.json" --scale --md "$out/scale.md"
fi
/usr/bin/python3 "$here/bench.py" "${mode[@]}" --out "$out" --build "$build" --fsbench "$out/fsbench" \
  --cache "$cache" "${pass[@]}" || rc=$?
if [[ -f $out/results.json ]]; then
  /usr/bin/python3 "$here/report.py" "$out/results.json" --md "$out/benchmarks.md" --plots "$out/bench" || rc=1
  if ((docs && !quick && rc == 0)) && [[ -z ${pass[*]-} ]]; then
    mkdir -p "$repo/docs/bench"
    /usr/bin/python3 "$here/report.py" "$out/results.json" --md "$repo/docs/benchmarks.md" --plots "$repo/docs/bench" \
      --results-copy "$repo/docs/bench/results.json"
    echo "run.sh: regenerated docs/benchmarks.md and docs/bench/"
  fi
fi
echo "run.sh: $( ((quick)) && echo quick || echo full) run $( ((rc == 0)) && echo passed || echo FAILED) in $(($(date +%s) - start)) s; results in $out"
exit $rc
