#!/usr/bin/env bash
# slurm_crash (2-node ports cluster): the agents run as the job user only (all four uids), under
# PMIx, without LD_PRELOAD; one killed with SIGKILL mid-job leaves its directories, and the epilog
# removes them.
#
# Usage: crash.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR ports). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  need_cluster ports
  local ds jd j st uid pid killed=0 deadline
  ds=$(md5_dataset)
  jd=$(job_dir)
  uid=$(uid_of)
  wait_job_script "$jd"
  j=$(asu sbatch --parsable -N2 -o "$jd/out.%j" --fanstore="$ds" "$jd/job.sh" 2>&1) || { bad "sbatch: $j"; return; }
  deadline=$((SECONDS + 60))
  while [[ ! -e $jd/started ]] && ((SECONDS < deadline)); do sleep 0.1; done
  # The agents: the job user's (real, effective, saved, fs ids), under PMIx, without the interceptor.
  local agents=0 env
  for pid in $(pgrep -u "$TUSER" -x fanstore-agent); do
    env=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ")
    grep -qx "SLURM_JOB_ID=$j" <<<"$env" || continue
    agents=$((agents + 1))
    [[ $(awk '/^Uid:/ { print $2 $3 $4 $5 }' "/proc/$pid/status") == "$uid$uid$uid$uid" ]] \
      && ! grep -q '^LD_PRELOAD=' <<<"$env" && grep -qx FANSTORE_DISABLE=1 <<<"$env" && grep -q '^PMIX_RANK=' <<<"$env" \
      || bad "agent $pid: not the job user's, or it has LD_PRELOAD, or no PMIx"
  done
  ((agents == 2)) && ok "2 agents run as $TUSER only, with PMIx, without LD_PRELOAD" || bad "found $agents agents of job $j"
  # SIGKILL node2's agent: it cannot clean up, so its directories stay until the epilog removes them.
  for pid in $(pgrep -u "$TUSER" -x fanstore-agent); do
    tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qx "SLURM_JOB_ID=$j" || continue
    tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qx "SLURMD_NODENAME=node2" || continue
    tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qx "FANSTORE_AGENT_STEP=1" || continue
    kill -KILL "$pid" && killed=1
  done
  ((killed)) && ok "killed node2's agent with SIGKILL" || bad "found no agent of job $j on node2"
  sleep 0.5
  [[ -d /dev/shm/fanstore.$uid.$j.node2 ]] && ok "the killed agent left its run directory behind" \
    || bad "node2's run directory is already gone"
  touch "$jd/go"
  st=$(wait_job "$j")
  say "job $j ended $st"
  check_clean "$j"
}

main
finish
