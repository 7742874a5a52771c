#!/usr/bin/env bash
# slurm_direct (2-node ports cluster): srun --fanstore (with --fanstore-mount, --fanstore-replicas)
# from a login shell; salloc --fanstore followed by two sruns that share one agent step.
#
# Usage: direct.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR ports). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  need_cluster ports
  local ds jd out st j
  ds=$(md5_dataset)
  jd=$(job_dir)
  # 1. srun --fanstore straight from a login shell: the allocation, the agents and the tasks in one go.
  #    With the optional --fanstore-mount and --fanstore-replicas.
  # shellcheck disable=SC2016  # the single-quoted script expands in the job's shell, not here.
  out=$(cd "$jd" && asu srun -N2 --ntasks-per-node=1 --fanstore="$ds" --fanstore-mount=/data/tree \
          --fanstore-replicas=all \
          bash -c 'echo "$SLURMD_NODENAME $SLURM_JOB_ID $FANSTORE_MOUNT $(md5sum < /data/tree/a/b/numbers.txt)"' 2>&1)
  st=$?
  indent '  | ' <<<"$out"
  local want
  want=$(md5sum <"$PFS/tree/a/b/numbers.txt")
  want=${want%% *}
  [[ $st -eq 0 && $(grep -c " /data/tree $want  -\$" <<<"$out") == 2 ]] \
    && ok "srun --fanstore --fanstore-mount=/data/tree from a login shell: both nodes read the dataset there" \
    || bad "srun --fanstore from a login shell (exit $st)"
  j=$(awk 'NR == 1 { print $2 }' <<<"$out")
  [[ -n $j ]] && check_clean "$j"

  # 2. salloc --fanstore, then two sruns: the first starts the agents, the second reuses them.
  # shellcheck disable=SC2016  # the single-quoted script expands in the job's shell, not here.
  out=$(cd "$jd" && asu salloc -N2 --fanstore="$ds" bash -c '
    srun -N2 --ntasks-per-node=1 bash -c "echo first \$SLURMD_NODENAME \$(md5sum < \$FANSTORE_MOUNT/a/b/numbers.txt)"
    srun -N1 bash -c "echo second \$SLURMD_NODENAME \$(md5sum < \$FANSTORE_MOUNT/a/b/numbers.txt)"
    echo "agent steps: $(squeue -h -s -j $SLURM_JOB_ID -o %j | grep -c fanstore-agent)"
    echo "job $SLURM_JOB_ID"' 2>&1)
  st=$?
  indent '  | ' <<<"$out"
  [[ $st -eq 0 && $(grep -c "^first node[12] $want" <<<"$out") == 2 && $(grep -c "^second node1 $want" <<<"$out") == 1 ]] \
    && ok "salloc --fanstore + srun, srun: every task read the dataset" || bad "salloc + srun (exit $st)"
  grep -qx "agent steps: 1" <<<"$out" && ok "the second srun reused the agents (one agent step)" \
    || bad "expected exactly one agent step"
  j=$(sed -n 's/^job //p' <<<"$out")
  [[ -n $j ]] && check_clean "$j"
}

main
finish
