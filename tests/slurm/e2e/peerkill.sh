#!/usr/bin/env bash
# slurm_peerkill (2-node ports cluster): node1 reads ten of node2's files, then the job script kills
# node2's agent (SIGKILL): node1's agent and the agent step live on; node1 reads every file
# correctly, node2's from the dataset directory (fallback opens).
#
# Usage: peerkill.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR ports). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  need_cluster ports
  local ds src=$PFS/many jd j st stats n2files nfirst pid1 pid2 fb
  ds=$(many_dataset)
  jd=$(job_dir)
  expected_md5 "$src" >"$jd/expected"
  fstool placement "$ds" "$src" 2 1 >"$jd/placement" || { bad "fstool placement"; return; }
  # node2's files; the first ten are read through node1 while node2's agent is up.
  files_of "$jd/placement" 1 >"$jd/node2.files"
  md5_lines_of <(head -10 "$jd/node2.files") "$jd/expected" >"$jd/first"
  n2files=$(wc -l <"$jd/node2.files")
  nfirst=$(wc -l <"$jd/first")
  small_node1 "$jd/placement" || { bad "small node-local directory on node1"; return; }
  cat >"$jd/job.sh" <<'EOF'
#!/bin/bash
md5_on() { srun -N1 -w "$1" bash -c 'cd "$FANSTORE_MOUNT" && while read -r sum f; do md5sum "$f"; done' < "$2"; }
md5_on node1 "$JD/first" > "$JD/md5.first"
# From inside the job: node2's agent, from its status.json, killed with SIGKILL.
srun -N1 -w node2 bash -c 'p=$(sed -n "s/.*\"pid\":\([0-9]*\).*/\1/p" "${FANSTORE_SOCKET%/*}/status.json")
  kill -KILL "$p" && echo "killed $p"' > "$JD/killed"
sleep 0.5
md5_on node1 "$JD/expected" > "$JD/md5.after"
touch "$JD/read"
while [ ! -e "$JD/go" ]; do sleep 0.1; done
EOF
  chmod 0755 "$jd/job.sh"
  j=$(asu env JD="$jd" sbatch --parsable -N2 --chdir="$jd" -o "$jd/out.%j" --export=ALL --fanstore="$ds" \
        --fanstore-replicas=1 "$jd/job.sh" 2>&1) || { bad "sbatch: $j"; restore_local node1; return; }
  if wait_for "$j" "$jd/read" 90; then
    stats=$(agent_stats "$j" node1)
    pid1=$(jget "$(status_of "$j" node1)" "['pid']")
    pid2=$(sed -n 's/^killed //p' "$jd/killed")
    launch_log "$j" >"$jd/launch.log"
    asroot squeue -h -s -j "$j" -o %j >"$jd/steps"
  fi
  touch "$jd/go"
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "job $j completed" || bad "job $j ended $st"
  diff -q <(cat "$jd/first") "$jd/md5.first" >/dev/null && ok "node1 read $nfirst of node2's files while node2's agent was up" \
    || bad "the first reads on node1 failed"
  [[ -n $pid2 ]] && ! kill -0 "$pid2" 2>/dev/null && ok "the job script killed node2's agent (pid $pid2) with SIGKILL" \
    || bad "node2's agent was not killed (pid '$pid2')"
  # The agent step goes on without it: --kill-on-bad-exit must not take node1's agent down too.
  [[ -n $stats ]] && grep -qx fanstore-agent "$jd/steps" \
    && ok "node1's agent (pid $pid1) and the agent step lived on after node2's agent died" \
    || bad "node1's agent or the agent step ended with node2's agent"
  grep -q "this agent ended (status 137) after it was ready" "$jd/launch.log" \
    && ok "the agent step noted node2's death: $(grep -m1 'this agent ended' "$jd/launch.log")" \
    || bad "no note of node2's agent's death in the launch log"
  if [[ -s $jd/md5.after ]] && diff -q "$jd/expected" "$jd/md5.after" >/dev/null; then
    ok "node1: md5 of all $(wc -l <"$jd/expected") files matches the source after node2's agent died ($n2files of them held by node2 only)"
  else
    bad "node1: md5 mismatch after the kill:"$'\n'"$(diff -u "$jd/expected" "$jd/md5.after" 2>&1 | head -10)"
  fi
  [[ -n $stats ]] || { bad "no stats from node1's agent"; restore_local node1; check_clean "$j"; return; }
  say "node1 stats: opens $(jget "$stats" "['opens']") bytes $(jget "$stats" "['bytes']") cache $(jget "$stats" "['cache']") prefetch $(jget "$stats" "['prefetch']") peers $(jget "$stats" "['peers']")"
  (($(jget "$stats" "['cache']['capacity']") < $(jget "$(tail -1 "$jd/placement")" "['min_shard_raw']") && $(jget "$stats" "['prefetch']['files']") == 0)) \
    && ok "node1's cache ($(jget "$stats" "['cache']['capacity']") bytes) holds no shard: nothing was prefetched" \
    || bad "node1's cache is not tiny or it prefetched: $(jget "$stats" "['cache']") $(jget "$stats" "['prefetch']")"
  (($(jget "$stats" "['opens']['remote']") >= nfirst)) && ok "before the kill, node2's files came from its agent (remote opens $(jget "$stats" "['opens']['remote']"))" \
    || bad "remote opens $(jget "$stats" "['opens']['remote']") < $nfirst"
  fb=$(jget "$stats" "['opens']['fallback']")
  ((fb >= n2files - nfirst && $(jget "$stats" "['opens']['errors']") == 0)) \
    && ok "after the kill, node2's files came from the dataset directory: $fb fallback opens ($(jget "$stats" "['bytes']['fallback']") bytes) for $((n2files - nfirst)) files never read before; $(jget "$stats" "['opens']['cached']") from the cache; no error" \
    || bad "fallback opens $fb < $((n2files - nfirst)) or errors: $(jget "$stats" "['opens']")"
  # The first fetch after the kill fails on the dead connection; the peer is then marked down, and the
  # next opens skip it at once: one fetch error, one warning, every other open straight to fallback.
  grep -m1 "fetch .* from rank 1: " "$jd/launch.log" | sed 's/^/  agent: /'
  (($(jget "$stats" "['peers']['fetch_errors']") == 1)) && (($(grep -c "from rank 1: " "$jd/launch.log") == 1)) \
    && ok "the dead peer was noticed once, then skipped as down (1 fetch error, 1 warning, $fb fallback opens)" \
    || bad "fetch errors $(jget "$stats" "['peers']['fetch_errors']"), warnings $(grep -c "from rank 1: " "$jd/launch.log"): the dead peer was not skipped"
  check_clean "$j"
  restore_local node1
}

main
finish
