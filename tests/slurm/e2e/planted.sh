#!/usr/bin/env bash
# slurm_planted (2-node ports cluster): F4, F12: another user plants files, a directory and symlinks
# under every name the next job of the test user will use (run directories, node-local directories,
# the launch directory), before it is submitted. The job must complete with correct data, no node
# may drain, and the planted objects must be moved aside, not deleted.
#
# Usage: planted.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR ports). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  need_cluster ports
  local ds jd j j0 uid st n planted=() p
  ds=$(md5_dataset)
  jd=$(job_dir)
  uid=$(uid_of)
  j0=$(asu sbatch --parsable -N1 -o /dev/null --wrap true 2>&1) || { bad "sbatch: $j0"; return; }
  wait_job "$j0" >/dev/null
  j=$((j0 + 1))
  runuser -u fsbob -- bash -c "
    mkdir -p /dev/shm/fsbob-trap && chmod 0777 /dev/shm/fsbob-trap
    echo planted > /dev/shm/fanstore.$uid.$j.node1 && chmod 0666 /dev/shm/fanstore.$uid.$j.node1
    ln -s /dev/shm/fsbob-trap /dev/shm/fanstore.$uid.$j.node2
    echo planted > /dev/shm/fanstore.$uid && chmod 0666 /dev/shm/fanstore.$uid
    mkdir -m 0777 $(node_local node1)/fanstore.$uid.$j
    ln -s /etc $(node_local node2)/fanstore.$uid.$j" || { bad "fsbob could not plant"; return; }
  planted=("/dev/shm/fanstore.$uid.$j.node1" "/dev/shm/fanstore.$uid.$j.node2" "/dev/shm/fanstore.$uid"
    "$(node_local node1)/fanstore.$uid.$j" "$(node_local node2)/fanstore.$uid.$j")
  expected_md5 "$PFS/tree" >"$jd/expected"
  cat >"$jd/job.sh" <<EOF
#!/bin/bash
srun -N2 --ntasks-per-node=1 bash -c 'cd "\$FANSTORE_MOUNT" && while read -r s f; do md5sum "\$f"; done < $jd/expected > $jd/md5.\$SLURMD_NODENAME'
EOF
  chmod 0755 "$jd/job.sh"
  n=$(asu sbatch --parsable -N2 --chdir="$jd" -o "$jd/out.%j" --fanstore="$ds" "$jd/job.sh" 2>&1) || { bad "sbatch: $n"; return; }
  [[ $n == "$j" ]] || { bad "the job got id $n, not the predicted $j"; return; }
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "job $j completed despite everything fsbob planted" || bad "job $j ended $st"
  for n in node1 node2; do
    diff -q "$jd/expected" "$jd/md5.$n" >/dev/null 2>&1 && ok "$n: every file read correctly" || bad "$n: md5 mismatch or missing"
  done
  st=$(asroot sinfo -h -o '%n %T' | grep -E "drain|down" || true)
  [[ -z $st ]] && ok "no node drained" || bad "nodes drained: $st"
  for p in "${planted[@]}"; do
    if find "$(dirname "$p")" -maxdepth 1 -user fsbob -name "$(basename "$p")*" | grep -q .; then
      ok "planted $(basename "$p") moved aside or left alone, not deleted"
    else
      bad "planted $p is gone"
    fi
  done
  [[ $(cat /dev/shm/fsbob-trap/* 2>/dev/null | wc -c) -eq 0 && -z $(ls /dev/shm/fsbob-trap) ]] \
    && ok "nothing of the job went through fsbob's symlinks" || bad "the job wrote into fsbob's directory: $(ls /dev/shm/fsbob-trap)"
  grep -h "moved aside" "$BASE"/log/slurmd.*.log 2>/dev/null | grep -m2 "job $j" | sed 's/^/  log: /'
  check_clean "$j"
  for p in "${planted[@]}"; do find "$(dirname "$p")" -maxdepth 1 -user fsbob -name "$(basename "$p")*" -exec rm -rf {} +; done
  rm -rf /dev/shm/fsbob-trap
}

main
finish
