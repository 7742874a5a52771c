#!/usr/bin/env bash
# slurm_netns4 (netns cluster; a 4-node job): distinct hostnames, node-local directories and run
# directories; md5 on all four nodes.
#
# Usage: netns4.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR netns). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  need_cluster netns
  local ds jd j st n uid
  ds=$(md5_dataset)
  jd=$(job_dir)
  uid=$(uid_of)
  expected_md5 "$PFS/tree" >"$jd/expected"
  cat >"$jd/job.sh" <<EOF
#!/bin/bash
srun -N4 --ntasks-per-node=1 bash -c '
  cd "\$FANSTORE_MOUNT" || exit 1
  while read -r sum f; do md5sum "\$f"; done < $jd/expected > $jd/md5.\$SLURMD_NODENAME
  d=$BASE/local/fanstore.$uid.\$SLURM_JOB_ID
  echo "NODE \$(hostname) \$SLURMD_NODENAME \$(cat $BASE/local/.node-name) \$(test -d \$d && echo staged) \$FANSTORE_TABLE"'
EOF
  chmod 0755 "$jd/job.sh"
  sbatch_job "$jd" -N4 --chdir="$jd" -o "$jd/out.%j" --fanstore="$ds" "$jd/job.sh" \
    || { bad "$JOB_STATE"; return; }
  j=$JOB st=$JOB_STATE
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "4-node netns job $j completed" || bad "job $j ended $st"
  for n in node1 node2 node3 node4; do
    grep -qx "NODE $n $n $n staged /dev/shm/fanstore.$uid.$j.$n/table" "$jd/out.$j" \
      && ok "$n: own hostname, own node-local directory holding the staged copy, own run directory" \
      || bad "$n: hostname / node-local directory / run directory"
    diff -q "$jd/expected" "$jd/md5.$n" >/dev/null 2>&1 && ok "$n: md5 of every file matches" || bad "$n: md5 mismatch"
  done
  check_clean "$j"
}

main
finish
