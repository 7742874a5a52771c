#!/usr/bin/env bash
# slurm_scancel (2-node ports cluster): scancel while both agents are staging (held there by the
# agents' test pause): the job ends within seconds, the batch script never runs, and no process,
# /dev/shm entry, node-local directory or socket of it remains on any node.
#
# Usage: scancel.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR ports). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# status_state UID JOB NODE: the state in that node's agent status file ("" if there is none).
status_state() {
  sed -n 's/.*"state" *: *"\([a-z]*\)".*/\1/p' "/dev/shm/fanstore.$1.$2.$3/status.json" 2>/dev/null
}

main() {
  need_cluster ports
  local src=$PFS/scancel ds=$PFS/scancel.fs jd j uid state="" deadline t0 n staging
  jd=$(job_dir)
  must_not_run_script "$jd"
  uid=$(uid_of)
  if ! asu "$FS_BIN/fanstore" info "$ds" >/dev/null 2>&1; then
    rm -rf "$src" "$ds"
    mkdir -p "$src"
    for ((n = 0; n < 4; n++)); do head -c 4194304 /dev/urandom >"$src/part$n.bin"; done
    chown -R "$TUSER:" "$src"
    pack_dataset "$src" "$ds" --shard-size 4M --level 0 || bad "pack $src"
    rm -rf "$src"
  fi
  # The agents hold in their stage-in for a minute (FANSTORE_TEST_PAUSE, which a cancel ends), so
  # that the cancel surely arrives while they stage, however fast this machine stages.
  j=$(asu sbatch --parsable -N2 -o "$jd/out.%j" --export=ALL,FANSTORE_TEST_PAUSE=staging:60000 \
    --fanstore="$ds" "$jd/job.sh" 2>&1) || { bad "sbatch: $j"; return; }
  deadline=$((SECONDS + 60))
  while ((SECONDS < deadline)); do  # until both nodes' agents are staging
    staging=0
    for n in node1 node2; do
      state=$(status_state "$uid" "$j" "$n")
      [[ $state == staging ]] && staging=$((staging + 1))
    done
    ((staging == 2)) && break
    sleep 0.05
  done
  ((staging == 2)) && ok "job $j: both agents are staging" || bad "job $j: the agents never both staged (node2: ${state:-no status})"
  t0=$(now)
  asroot scancel "$j"
  state=$(wait_job "$j")
  say "job $j ended $state $(elapsed "$t0") s after scancel"
  [[ $state == CANCELLED* ]] && ok "job $j cancelled" || bad "job $j ended $state"
  ! grep -q "must not run" "$jd/out.$j" 2>/dev/null && ok "the batch script never ran" || bad "the batch script ran"
  job_output "$jd/out.$j"
  check_clean "$j"
  say "cleanup complete $(elapsed "$t0") s after scancel"
}

main
finish
