#!/usr/bin/env bash
# slurm_scale (2-node ports cluster; not part of the test command: `tests/bench/run.sh --scale`
# runs it): sbatch -N2 --fanstore over imagenet1k (1,331,167 files), once with
# --fanstore-replicas=1 and once with all. A task on each node reads every file in random order;
# counts, bytes and a content checksum agree between the nodes and the two jobs, about 10 sampled files
# match `fanstore cat`; J1 and the teardown (job end to a clean node) are reported; nothing is
# left. Node-local directories are 10 GB tmpfs mounts, or with SCALE_LOCAL=disk the cluster's own,
# on disk (ext4 under /var/tmp here: each node's share is then an EROFS image, issue 31).
#
# Usage: scale.sh BUILD_DIR ARCHIVE.tar (mkimagenet.py 1k), with the cluster up (start.sh BUILD_DIR
# ports). Prints one JSON line per job ("scale-result: {...}") for scale.py.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ARCHIVE=$(realpath "$2")
JOB_TIMEOUT=900
SCALE_LOCAL=${SCALE_LOCAL:-tmpfs}

readall() {
  cat <<'EOF'
import hashlib, json, random, sys, time, zlib
mount, listing, out = sys.argv[1:4]
paths = open(listing).read().split("\n")[:-1]
random.Random(7).shuffle(paths)
t0 = time.perf_counter()
n = total = acc = 0
sample = {}
for p in paths:
    with open(mount + "/" + p, "rb") as f:
        data = f.read()
    n += 1
    total += len(data)
    acc = (acc + zlib.crc32(p.encode()) * (zlib.crc32(data) + 1)) % (1 << 64)
    if zlib.crc32(p.encode()) % 133117 == 0:  # about 10 files
        sample[p] = hashlib.md5(data).hexdigest()
json.dump({"files": n, "bytes": total, "checksum": acc, "seconds": time.perf_counter() - t0,
           "sample": sample}, open(out, "w"))
EOF
}

one_job() {  # one_job DS REPLICAS JOBDIR
  local ds=$1 r=$2 jd=$3 j st start stage first t_end clean_at left n
  j=$(cd "$jd" && asu env JD="$jd" sbatch --parsable -N2 --chdir="$jd" -o "$jd/out.%j" --export=ALL \
        --fanstore="$ds" --fanstore-replicas="$r" "$jd/job.sh" 2>&1) || { bad "sbatch failed: $j"; return; }
  st=$(wait_job "$j")
  [[ $st == COMPLETED ]] && ok "replicas=$r: 2-node job $j completed" || { bad "replicas=$r: job $j ended $st"; job_output "$jd/out.$j"; }
  # Teardown: from the end of the batch script to no trace of the job on either node (bounded).
  t_end=$(cat "$jd/end.$j" 2>/dev/null || now)
  clean_at=""
  for _ in $(seq 600); do
    st=$(asroot squeue -h -t all -j "$j" -o %T 2>/dev/null || true)
    if [[ $st != COMPLETING && $st != RUNNING ]] && [[ -z $(leftovers "$j") ]]; then clean_at=$(now); break; fi
    sleep 0.2
  done
  left=$(leftovers "$j")
  [[ -n $clean_at && -z $left ]] && ok "replicas=$r: job $j left nothing on any node" || bad "replicas=$r: job $j left: $left"
  for n in node1 node2; do
    [[ -s $jd/sum.$n.$j ]] && ok "replicas=$r: $n read $(jget "$(cat "$jd/sum.$n.$j")" "['files']") files" \
      || bad "replicas=$r: no result from $n"
  done
  start=$(job_start "$j")
  stage=$(grep -h "fanstore: user_init: job $j " "$BASE"/log/slurmd.*.log 2>/dev/null |
    sed -n 's/.*step batch on node1: agent ready after \([0-9.]*\) s.*/\1/p' | head -1)
  first=$(awk -v t0="$(date -d "$start" +%s.%N)" 'NR == 2 { printf "%.3f", $1 - t0 }' "$jd/first_read.$j" 2>/dev/null)
  "$PY" - "$r" "$j" "$jd" "${first:-null}" "${stage:-null}" "$t_end" "${clean_at:-0}" "$SCALE_LOCAL" <<'PY'
import json, sys
r, j, jd, first, stage, t_end, clean, local = sys.argv[1:9]
nodes = {}
for n in ("node1", "node2"):
    try:
        nodes[n] = json.load(open(f"{jd}/sum.{n}.{j}"))
    except OSError:
        pass
print("scale-result: " + json.dumps({
    "replicas": r, "job": j, "local": local,
    "copy": {n: ("image" if "as an EROFS image" in open(f"{jd}/stats.{n}.{j}").read() else "files")
             for n in nodes}, "j1_seconds": json.loads(first), "stage_in_seconds": json.loads(stage),
    "teardown_seconds": (float(clean) - float(t_end)) if float(clean) else None,
    "pass_seconds": {n: v["seconds"] for n, v in nodes.items()},
    "files": {n: v["files"] for n, v in nodes.items()}, "bytes": {n: v["bytes"] for n, v in nodes.items()},
    "checksum": {n: v["checksum"] for n, v in nodes.items()}, "samples": {n: v["sample"] for n, v in nodes.items()}}))
PY
}

main() {
  need_cluster ports
  local ds=$PFS/imagenet1k.fs jd out info files bytes sums p want got bad_samples=0
  if ! asu "$FS_BIN/fanstore" info "$ds" >/dev/null 2>&1; then
    rm -rf "$ds"
    "$FS_BIN/fanstore" pack -q --no-sync "$ARCHIVE" "$ds" && chown -R "$TUSER:" "$ds" || { bad "pack $ARCHIVE"; finish; exit 1; }
  fi
  info=$("$FS_BIN/fanstore" info --json "$ds")
  files=$(jget "$info" "['files']")
  bytes=$(jget "$info" "['raw_bytes']")
  jd=$(job_dir)
  "$FS_BIN/fanstore" ls "$ds" | grep -v '/$' >"$jd/files.list"
  readall >"$jd/readall.py"
  cat >"$jd/job.sh" <<'EOF'
#!/bin/bash
#SBATCH --job-name=fanstore-scale
date +%s.%N > "$JD/first_read.$SLURM_JOB_ID"
head -c 1 "$FANSTORE_MOUNT/val/ILSVRC2012_val_00000001.JPEG" > /dev/null
date +%s.%N >> "$JD/first_read.$SLURM_JOB_ID"
srun -N2 --ntasks-per-node=1 bash -c \
  'fanstore stats > "$JD/stats.$SLURMD_NODENAME.$SLURM_JOB_ID" 2>&1
   /usr/bin/python3 "$JD/readall.py" "$FANSTORE_MOUNT" "$JD/files.list" "$JD/sum.$SLURMD_NODENAME.$SLURM_JOB_ID"'
date +%s.%N > "$JD/end.$SLURM_JOB_ID"
EOF
  chmod 0755 "$jd/job.sh"
  chown -R "$TUSER:" "$jd"
  if [[ $SCALE_LOCAL == tmpfs ]]; then
    small_local node1 10G && small_local node2 10G || { bad "tmpfs node-local directories"; finish; exit 1; }
  fi
  for r in 1 all; do
    out=$(one_job "$ds" "$r" "$jd")
    echo "$out" | grep -v '^scale-result: ' | sed 's/^/  /'
    grep '^scale-result: ' <<<"$out"
    sums+=$'\n'"$(grep '^scale-result: ' <<<"$out" | sed 's/^scale-result: //')"
  done
  if [[ $SCALE_LOCAL == tmpfs ]]; then
    restore_local node1
    restore_local node2
  fi
  # Every node of both jobs read every file, the same bytes; sampled files match the dataset.
  "$PY" - "$files" "$bytes" "$sums" <<'PY' && ok "both jobs, both nodes: $files files, $bytes bytes, one checksum" || bad "results differ: $sums"
import json, sys
files, nbytes, lines = int(sys.argv[1]), int(sys.argv[2]), [l for l in sys.argv[3].splitlines() if l.strip()]
rs = [json.loads(l) for l in lines]
ok = len(rs) == 2 and all(len(r["files"]) == 2 for r in rs)
ok = ok and all(v == files for r in rs for v in r["files"].values())
ok = ok and all(v == nbytes for r in rs for v in r["bytes"].values())
ok = ok and len({v for r in rs for v in r["checksum"].values()}) == 1
sys.exit(0 if ok else 1)
PY
  p=$(grep -m1 . <<<"${sums#$'\n'}")
  while read -r path want; do
    got=$("$FS_BIN/fanstore" cat "$ds" "$path" | md5sum | cut -d' ' -f1)
    [[ $got == "$want" ]] || bad_samples=$((bad_samples + 1))
  done < <("$PY" -c "import json, sys; d = json.loads(sys.argv[1]); [print(k, v) for k, v in d['samples']['node1'].items()]" "$p")
  ((bad_samples == 0)) && ok "sampled files read in the job match fanstore cat of the dataset" \
    || bad "$bad_samples sampled files differ from the dataset"
}

main
finish
