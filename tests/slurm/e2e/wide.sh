#!/usr/bin/env bash
# slurm_wide (netns cluster, every node: 16 in the test command, up to 64 by hand): one job on all
# nodes with --fanstore-replicas=2. Every node reads every file in its own random order and checks
# its md5. Half way through, when every node has read half its files, the job kills the agents of
# ranks 2 and 3 (SIGKILL), the only two holders of some shards; every node, theirs included, reads
# the rest correctly, and then every file once more. The job's stats file has a line per surviving
# node, each of which read through its peers; nothing is left on any node.
#
# Usage: wide.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR netns [NODES]). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The reader each task runs: every file of EXPECTED, in an order seeded by the node, twice, with md5
# lines out for each pass; after half the first pass it says so (HALF) and waits for GO.
reader() {
  cat <<'EOF'
import hashlib, os, random, sys, time
expected, out, half, go, seed = sys.argv[1:6]
paths = [l.split(None, 1)[1].rstrip("\n") for l in open(expected)]
random.Random(seed).shuffle(paths)
for n in (1, 2):
    sums = {}
    for i, p in enumerate(paths):
        if n == 1 and i == len(paths) // 2:
            open(half, "w").close()
            while not os.path.exists(go):
                time.sleep(0.05)
        with open(p, "rb") as f:
            sums[p] = hashlib.md5(f.read()).hexdigest()
    with open(f"{out}.{n}", "w") as o:
        for p in sorted(sums):
            o.write(f"{sums[p]}  {p}\n")
EOF
}

main() {
  need_cluster netns
  local ds jd j st n nodes names killed stats line p fb remote
  nodes=$("$CLUSTER" env --base "$BASE" | sed -n 's/^NODES=//p')
  ((nodes >= 4)) || { bad "the cluster has $nodes nodes; this case needs at least 4"; return; }
  JOB_TIMEOUT=$((180 + 5 * nodes))
  ds=$(many_dataset)
  jd=$(job_dir)
  expected_md5 "$PFS/many" | LC_ALL=C sort -k2 >"$jd/expected"
  reader >"$jd/reader.py"
  cat >"$jd/job.sh" <<EOF
#!/bin/bash
srun -N$nodes --ntasks-per-node=1 bash -c 'cd "\$FANSTORE_MOUNT" && exec $PY $jd/reader.py $jd/expected $jd/md5.\$SLURMD_NODENAME $jd/half.\$SLURMD_NODENAME $jd/go \$SLURMD_NODENAME' &
until [ "\$(ls $jd | grep -c '^half\.')" = $nodes ]; do sleep 0.1; done
# Ranks 2 and 3 hold shard 2 alone (with shards 1 and 3 shared): their agents die with SIGKILL.
srun --overlap -N$nodes --ntasks-per-node=1 bash -c 's=\${FANSTORE_SOCKET%/*}/status.json
  r=\$(sed -n "s/.*\"rank\":\([0-9]*\).*/\1/p" \$s); p=\$(sed -n "s/.*\"pid\":\([0-9]*\).*/\1/p" \$s)
  if [ "\$r" = 2 ] || [ "\$r" = 3 ]; then kill -KILL "\$p" && echo "\$SLURMD_NODENAME"; fi' > $jd/killed
touch $jd/go
wait
EOF
  chmod 0755 "$jd/job.sh"
  sbatch_job "$jd" -N"$nodes" --chdir="$jd" -o "$jd/out.%j" --fanstore="$ds" \
    --fanstore-replicas=2 "$jd/job.sh" || { bad "$JOB_STATE"; return; }
  j=$JOB st=$JOB_STATE
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "$nodes-node job $j (--fanstore-replicas=2) completed" || bad "job $j ended $st"
  names=$(seq -f 'node%g' 1 "$nodes")
  killed=$(paste -sd' ' "$jd/killed" 2>/dev/null)
  [[ $(wc -w <<<"$killed") == 2 ]] && ok "half way through the first pass, the job killed the agents of ranks 2 and 3 ($killed)" \
    || bad "the job killed '$killed', not two agents"
  for p in 1 2; do
    n=0
    for line in $names; do
      diff -q "$jd/expected" "$jd/md5.$line.$p" >/dev/null 2>&1 && n=$((n + 1)) || bad "$line: md5 mismatch in pass $p"
    done
    ((n == nodes)) && ok "pass $p: every node read all $(wc -l <"$jd/expected") files in its own order, md5 correct ($n nodes)"
  done
  stats="$jd/fanstore-$j.stats"
  [[ $(grep -c . "$stats" 2>/dev/null) -ge $((nodes - 2)) ]] \
    && ok "the stats file has a line for each of the $((nodes - 2)) surviving agents ($(grep -c . "$stats"))" \
    || bad "stats file $stats: $(grep -c . "$stats" 2>/dev/null) lines"
  # Fetched on open, or prefetched (into the cache, or into the node's image on a disk, whose
  # files clients then open as local).
  remote=$("$PY" -c 'import json, sys; print(sum(1 for l in open(sys.argv[1]) if (lambda d: d["opens"]["remote"] + d["opens"]["cached"] + d["prefetch"]["files"])(json.loads(l)) > 0))' "$stats" 2>/dev/null)
  fb=$("$PY" -c 'import json, sys; print(sum(json.loads(l)["opens"]["fallback"] for l in open(sys.argv[1])))' "$stats" 2>/dev/null)
  [[ $remote == $((nodes - 2)) ]] && ok "every surviving node opened files through its peers (fetched or prefetched); $fb fallback opens" \
    || bad "$remote of $((nodes - 2)) nodes opened remote files"
  check_clean "$j"
}

main
finish
