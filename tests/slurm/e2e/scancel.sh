#!/usr/bin/env bash
# slurm_scancel (2-node ports cluster): scancel while both agents are staging (384 MiB dataset, or
# 1152 MiB if that was too fast; FANSTORE_TEST_SCANCEL_MB overrides the sizes): the job ends within
# seconds and no process, /dev/shm entry, node-local directory or socket of it remains on any node.
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
  local src ds jd j uid state="" deadline t0 i n staging mb caught=0
  jd=$(job_dir)
  must_not_run_script "$jd"
  uid=$(uid_of)
  # The stage-in must last long enough to be caught: incompressible data, several shards. If the agents
  # are too fast for the first size, try again three times bigger.
  for mb in ${FANSTORE_TEST_SCANCEL_MB:-384 1152}; do
    src=$PFS/bulk$mb
    ds=$PFS/bulk$mb.fs
    if ! asu "$FS_BIN/fanstore" info "$ds" >/dev/null 2>&1; then
      rm -rf "$src" "$ds"
      mkdir -p "$src"
      for ((i = 0; i < 12; i++)); do head -c $((mb * 1048576 / 12)) /dev/urandom >"$src/part$i.bin"; done
      chown -R "$TUSER:" "$src"
      pack_dataset "$src" "$ds" --shard-size 32M --level 0 || bad "pack $src"
      rm -rf "$src"
    fi
    # For development stand-in agents that honour it: a marker that slows their stage-in.
    [[ -e $ds/FAKE_SLOW ]] || echo 30 >"$ds/FAKE_SLOW"
    j=$(asu sbatch --parsable -N2 -o "$jd/out.%j" --fanstore="$ds" "$jd/job.sh" 2>&1) || { bad "sbatch: $j"; return; }
    deadline=$((SECONDS + 60))
    while ((SECONDS < deadline)); do  # until both nodes' agents are staging
      staging=0
      for n in node1 node2; do
        state=$(status_state "$uid" "$j" "$n")
        [[ $state == staging ]] && staging=$((staging + 1))
        [[ $state == ready || $state == failed ]] && break 2
      done
      ((staging == 2)) && { caught=1; break; }
      sleep 0.01
    done
    t0=$(now)
    asroot scancel "$j"
    # The batch script waits for node1's agent. If that agent was ready as scancel returned, the
    # stage-in ended while the cancel was on its way, and the script may have started: not a catch.
    [[ $(status_state "$uid" "$j" node1) == ready ]] && caught=0
    state=$(wait_job "$j")
    say "job $j ($mb MiB dataset) ended $state $(elapsed "$t0") s after scancel"
    if ((caught)); then
      ok "job $j: scancel while the agents were staging on both nodes"
      break
    fi
    say "job $j: the stage-in of $mb MiB was over before the cancel could reach it"
    check_clean "$j"
  done
  ((caught)) || { bad "never caught the agents while staging (set FANSTORE_TEST_SCANCEL_MB to larger sizes)"; return; }
  [[ $state == CANCELLED* ]] && ok "job $j cancelled" || bad "job $j ended $state"
  ! grep -q "must not run" "$jd/out.$j" 2>/dev/null && ok "the batch script never ran" || bad "the batch script ran"
  job_output "$jd/out.$j"
  check_clean "$j"
  say "cleanup complete $(elapsed "$t0") s after scancel"
}

main
finish
