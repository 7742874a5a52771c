#!/usr/bin/env bash
# slurm_auth (2-node ports cluster): fsbob, with his own MUNGE credential, gets EACCES and no byte
# from an agent's peer port (also without a credential or with a forged one); the agent runs with
# the job's limits; fsbob cannot read the run directory or use the socket.
#
# Usage: auth.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR ports). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  need_cluster ports
  local ds src=$PFS/many jd j st ep out stats shard run pid
  ds=$(many_dataset)
  jd=$(job_dir)
  chmod 0755 "$jd"
  fstool placement "$ds" "$src" 2 1 >"$jd/placement" || { bad "fstool placement"; return; }
  shard=$(jget "$(sed -n 2p "$jd/placement")" "['shards'][0]")
  wait_job_script "$jd"
  # The peer protocol of agent/peer.h, as another user would speak it (tests/peer_probe.py).
  cp "$HERE/../peer_probe.py" "$jd/attack.py"
  # Submitted with a soft limit of 777 open files: the agents must run with the job's limits.
  j=$(asu bash -c 'ulimit -Sn 777 && exec "$@"' sh sbatch --parsable -N2 --chdir="$jd" -o "$jd/out.%j" --fanstore="$ds" \
        --fanstore-replicas=1 "$jd/job.sh" 2>&1) \
    || { bad "sbatch: $j"; return; }
  if wait_for "$j" "$jd/started" 60 && wait_ready "$j" node2; then
    run=$(run_dir_of "$j" node2)
    ep=$(jget "$(status_of "$j" node2)" "['endpoint']")
    say "node2's agent: endpoint $ep (read by root from $run/status.json); shard $shard is held there"
    pid=$(jget "$(status_of "$j" node2)" "['pid']")
    [[ $(awk '/Max open files/ {print $4}' "/proc/$pid/limits" 2>/dev/null) == 777 ]] \
      && ok "the agent runs with the job's limits (soft open files 777), not slurmstepd's" \
      || bad "the agent's open-file limit: $(grep 'Max open files' "/proc/$pid/limits" 2>&1)"
    out=$(runuser -u fsbob -- timeout 60 "$PY" "$jd/attack.py" "$ep" 1 "$shard" 2>&1)
    indent '  fsbob: ' <<<"$out"
    grep -q "decode the server's proof: exit [1-9]" <<<"$out" \
      && ok "fsbob cannot decode the agent's proof (a credential for the job's uid only)" || bad "fsbob decoded the agent's proof"
    grep -qx "own credential: status 13 bytes after 0" <<<"$out" \
      && ok "fsbob's own valid MUNGE credential is refused (EACCES) and nothing follows" || bad "fsbob's credential was not refused"
    grep -qx "no credential: bytes 0" <<<"$out" && ok "fsbob without a credential gets no byte" || bad "fsbob got data without a credential"
    grep -qx "forged credential: status 13 bytes after 0" <<<"$out" && ok "a forged credential is refused" || bad "a forged credential was not refused"
    grep -qx "4 GiB length: bytes 0" <<<"$out" && ok "a 4 GiB length is dropped (F2)" || bad "4 GiB length"
    grep -qx "slow connections: opened 200 closed by the agent 200" <<<"$out" \
      && ok "200 slow connections are closed at their deadline (F3, F10)" || bad "slow connections were not all closed"
    launch_log "$j" | grep -m1 "credential of uid $(id -u fsbob)" | sed 's/^/  agent: /'
    stats=$(agent_stats "$j" node2)
    (($(jget "$stats" "['peers']['refused_connections']") >= 3)) \
      && ok "node2's agent counted $(jget "$stats" "['peers']['refused_connections']") refused connections" \
      || bad "refused connections: $(jget "$stats" "['peers']")"
    expect_fail "fsbob cannot read node2's status.json" 1 "Permission denied" runuser -u fsbob -- cat "$run/status.json"
    expect_fail "fsbob cannot use node2's agent socket" 1 "Permission denied" \
      runuser -u fsbob -- "$PY" -c "import socket, sys
try: socket.socket(socket.AF_UNIX).connect('$run/agent.sock')
except OSError as e: sys.exit('connect $run/agent.sock: ' + e.strerror)"
    [[ $(stat -c '%a %U' "$run") == "700 $TUSER" && $(stat -c '%a %U' "$run/agent.sock") == "600 $TUSER" ]] \
      && ok "run directory 0700 and socket 0600, of $TUSER" || bad "run directory/socket modes: $(stat -c '%a %U %n' "$run" "$run/agent.sock")"
  else
    bad "the agents were not ready"
  fi
  touch "$jd/go"
  st=$(wait_job "$j")
  [[ $st == COMPLETED ]] && ok "job $j completed" || bad "job $j ended $st"
  check_clean "$j"
}

main
finish
