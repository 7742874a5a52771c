#!/usr/bin/env bash
# scale.py --only split: a dataset split over two agents on this machine (mpirun as the PMIx
# server, one copy of each shard), the local directories on disk. Times the agents' start to both
# ready, a first and a second pass in random order over every file on both "nodes" at once
# (through the library), and the teardown (SIGTERM to both agents until their local directories are
# empty, nothing is mounted and no agent is left). Prints one JSON line. Run as root (munge up).
# Usage: split_disk.sh BUILD DATASET FSBENCH LIST WORK ARM [AGENT OPTION...]
set -euo pipefail
B=$1 DS=$2 FSB=$3 LIST=$4 W=$5 ARM=$6
shift 6
RD=/dev/shm/fanstore-split.$$
mkdir -p "$W"
now() { date +%s.%N; }
agents() { pgrep -f "fanstore-agent --dataset $DS" >/dev/null; }
cleanup() { pkill -KILL -f "fanstore-agent --dataset $DS" 2>/dev/null || true; rm -rf "$RD".*; }
trap cleanup EXIT
sync
echo 3 >/proc/sys/vm/drop_caches
t0=$(now)
# --enable-recovery: mpirun must not kill one agent while the other still removes its files.
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --enable-recovery \
  --mca orte_abort_on_non_zero_status 0 -np 2 "$B/bin/fanstore-agent" --dataset "$DS" \
  --local-dir "$W/ld%r" --run-dir "$RD.%r" --mount /fanstore/split --replicas 1 --quiet "$@" >"$W/agents.log" 2>&1 &
mp=$!
ready() { grep -q '"state":"ready"' "$RD.$1/status.json" 2>/dev/null; }
for _ in $(seq 3000); do ready 0 && ready 1 && break; agents || break; sleep 0.1; done
if ! { ready 0 && ready 1; }; then
  cat "$W/agents.log" >&2
  exit 1
fi
t_ready=$(now)
pass() {  # pass NAME: every file on both nodes at once
  local pids=()
  for r in 0 1; do
    LD_PRELOAD=$B/lib/libfanstore_preload.so FANSTORE_MOUNT=/fanstore/split FANSTORE_TABLE=$RD.$r/table \
      FANSTORE_SOCKET=$RD.$r/agent.sock "$FSB" read /fanstore/split "$LIST" 1 >"$W/$1.$r" &
    pids+=($!)
  done
  wait "${pids[@]}"
}
pass p1
t_p1=$(now)
on_disk=$(find "$W/ld0" -path "$W/ld0/data" -prune -o -type f -print | wc -l)
pass p2
t_p2=$(now)
# The agents themselves (status.json's pid), not mpirun, whose command line names them too: it
# would kill them while they remove their files.
pid() { /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' "$RD.$1/status.json"; }
kill -TERM "$(pid 0)" "$(pid 1)"
# What is left in the two local directories (gone, or empty, once the agents are done).
left() { { find "$W/ld0" "$W/ld1" -mindepth 1 -maxdepth 1 2>/dev/null || true; } | wc -l; }
for _ in $(seq 6000); do
  if ! agents && [[ $(left) == 0 ]] && ! grep -q " $W/" /proc/self/mountinfo; then break; fi
  sleep 0.1
done
t_clean=$(now)
wait "$mp" 2>/dev/null || true
left=$(left)
/usr/bin/python3 - "$ARM" "$t0" "$t_ready" "$t_p1" "$t_p2" "$t_clean" "$on_disk" "$left" "$W" <<'PY'
import json, sys
arm, t0, tr, t1, t2, tc, on_disk, left, w = sys.argv[1:10]
t0, tr, t1, t2, tc = map(float, (t0, tr, t1, t2, tc))
p = {k: [json.load(open(f"{w}/{k}.{r}")) for r in (0, 1)] for k in ("p1", "p2")}
print(json.dumps({"arm": arm, "ready": tr - t0, "first_epoch": t1 - t0, "pass1": [x["seconds"] for x in p["p1"]],
                  "pass2": [x["seconds"] for x in p["p2"]], "files": p["p1"][0]["files"],
                  "hashes": sorted({x["hash"] for v in p.values() for x in v}),
                  "errors": sum(x["errors"] for v in p.values() for x in v), "teardown": tc - t2,
                  "node0_files_on_disk": int(on_disk), "left": int(left)}))
PY
