#!/usr/bin/env bash
# slurm_bigindex (2-node ports cluster): a dataset of 60,000 files with long random names, split
# over both nodes (--fanstore-replicas=1), so that each agent's first-round blob in the metadata
# exchange is about 5.5 MB, more than Slurm's PMIx fences carry safely: the step daemon's default
# store crashes on a value above about 4 MB, and the ring deadlocks, now and then, when both nodes
# forward big contributions at once (docs/design.md, "PMIx fence"). The fence carries pointers and
# the agents gather the indexes over their peer service (agent/gather.h), as both nodes' stats
# say. The job completes, both nodes list every name and read every file, and nothing is left.
#
# Usage: bigindex.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR ports). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# make_long_names DIR: 60,000 files of 64 bytes in 30 directories, each name 240 random characters
# (the same every time).
make_long_names() {
  /usr/bin/python3 - "$1" <<'PY'
import os, random, sys
root, rng = sys.argv[1], random.Random(31)
alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
for i in range(60000):
    d = os.path.join(root, "d%02d" % (i % 30))
    os.makedirs(d, exist_ok=True)
    name = "".join(rng.choice(alphabet) for _ in range(240))
    with open(os.path.join(d, name), "wb") as f:
        f.write(rng.randbytes(64))
PY
}

main() {
  need_cluster ports
  local src=$PFS/longnames240 ds=$PFS/longnames240.fs jd j st n
  if [[ ! -d $src ]]; then
    make_long_names "$src.tmp" && mv "$src.tmp" "$src" || { bad "make $src"; return; }
    chown -R -h "$TUSER:" "$src"
  fi
  pack_dataset "$src" "$ds" --shard-size 1M || { bad "pack $src"; return; }
  jd=$(job_dir)
  (cd "$src" && find . -type f | LC_ALL=C sort | xargs cat | md5sum) >"$jd/expected"
  cat >"$jd/job.sh" <<'EOF2'
#!/bin/bash
srun -N2 --ntasks-per-node=1 bash -c '
  cd "$FANSTORE_MOUNT" || exit 1
  find . -type f | LC_ALL=C sort | xargs cat | md5sum > "$JD/sum.$SLURMD_NODENAME"
  fanstore stats > "$JD/stats.$SLURMD_NODENAME" 2>&1'
EOF2
  chmod 0755 "$jd/job.sh"
  j=$(asu env JD="$jd" sbatch --parsable -N2 -o "$jd/out.%j" --export=ALL --fanstore="$ds" \
        --fanstore-replicas=1 "$jd/job.sh" 2>&1) || { bad "sbatch failed: $j"; return; }
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "job $j completed" || bad "job $j ended $st"
  for n in node1 node2; do
    [[ -s $jd/sum.$n ]] && cmp -s "$jd/expected" "$jd/sum.$n" \
      && ok "$n: all 60,000 files listed and read, their bytes match the source" \
      || bad "$n: the files under the mount differ from the source: $(cat "$jd/sum.$n" 2>&1)"
  done
  say "$(grep -h "metadata exchange" "$jd"/stats.node* 2>/dev/null | tr '\n' ' ')"
  local lines gathered
  lines=$(cat "$jd"/stats.node* 2>/dev/null | grep -c "metadata exchange")
  gathered=$(cat "$jd"/stats.node* 2>/dev/null | grep -c "indexes gathered over the peer service")
  [[ $lines -ge 2 && $gathered == "$lines" ]] && ok "the agents gathered the indexes over the peer service" ||
    bad "the indexes did not all travel over the peer service: $(grep -h "metadata exchange" "$jd"/stats.node* 2>&1)"
  check_clean "$j"
}

main
finish
