#!/usr/bin/env bash
# slurm_md5 (2-node ports cluster): sbatch -N2 --fanstore: tasks on both nodes md5sum every file
# under the mount and match the source; find lists the same names; both agents save their counters
# at job end, and their step ends with the batch script instead of being cancelled; J1 (job start to
# the first read, against the stage-in).
#
# Usage: md5.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR ports). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

plugin_log_lines() { grep -h "fanstore: user_init: job $1 " "$BASE"/log/slurmd.*.log 2>/dev/null; }

main() {
  need_cluster ports
  local ds jd j st first stage
  ds=$(md5_dataset)
  jd=$(job_dir)
  expected_md5 "$PFS/tree" >"$jd/expected"
  (cd "$PFS/tree" && find . | LC_ALL=C sort) >"$jd/expected.names"
  cat >"$jd/job.sh" <<'EOF'
#!/bin/bash
#SBATCH --job-name=fanstore-md5
date +%s.%N > "$JD/first_read.$SLURM_JOB_ID"
head -c 1 "$FANSTORE_MOUNT/a/hello.txt" > /dev/null
date +%s.%N >> "$JD/first_read.$SLURM_JOB_ID"
echo "batch: $SLURMD_NODENAME mount=$FANSTORE_MOUNT"
srun -N2 --ntasks-per-node=1 bash -c '
  cd "$FANSTORE_MOUNT" || exit 1
  while read -r sum f; do md5sum "$f"; done < "$JD/expected" > "$JD/md5.$SLURMD_NODENAME"
  find . | LC_ALL=C sort > "$JD/names.$SLURMD_NODENAME"
  fanstore stats > "$JD/stats.$SLURMD_NODENAME" 2>&1
  grep -F " - erofs " /proc/self/mountinfo | cut -d" " -f5 | grep "/data$" > "$JD/erofs.$SLURMD_NODENAME"
  echo "task on $SLURMD_NODENAME: LD_PRELOAD=$LD_PRELOAD"'
EOF
  chmod 0755 "$jd/job.sh"
  # Submitted from $jd, so that the default --fanstore-stats file lands there.
  j=$(cd "$jd" && asu env JD="$jd" sbatch --parsable -N2 --chdir="$jd" -o "$jd/out.%j" --export=ALL \
        --fanstore="$ds" "$jd/job.sh" 2>&1) || { bad "sbatch failed: $j"; return; }
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "2-node job $j completed" || bad "job $j ended $st"
  # Job end: every node's agent appends its final counters to fanstore-JOB.stats.
  local sf="$jd/fanstore-$j.stats" sum
  for _ in $(seq 150); do [[ -f $sf && $(wc -l <"$sf") -ge 2 ]] && break; sleep 0.2; done
  if [[ -f $sf && $(wc -l <"$sf") -eq 2 ]] && sum=$("$FS_BIN/fanstore" stats "$sf" 2>&1) &&
     grep -q '^job total, 2 nodes' <<<"$sum" && [[ $(stat -c %U "$sf") == "$TUSER" ]]; then
    ok "job end: both agents saved their counters (owned by the job user); fanstore stats sums them: $(grep -A1 '^job total' <<<"$sum" | tail -1 | sed 's/^ *//')"
  else
    bad "job end: no summary of 2 nodes in $sf: $(head -3 "$sf" 2>&1) / $sum"
  fi
  local n start
  for n in node1 node2; do
    if [[ -s $jd/md5.$n ]] && diff -u "$jd/expected" "$jd/md5.$n" >/dev/null; then
      ok "$n: md5 of all $(wc -l <"$jd/expected") files under the mount match the source"
    else
      bad "$n: md5 mismatch or missing:"$'\n'"$(diff -u "$jd/expected" "$jd/md5.$n" 2>&1 | head -20)"
    fi
    # The local directory is on a disk (ext4 here): the share is an EROFS image (issue 31), mounted
    # by the plugin's mount service on the agent's data root.
    grep -q "as an EROFS image" "$jd/stats.$n" 2>/dev/null && [[ -s $jd/erofs.$n ]] \
      && ok "$n: the agent's share is an EROFS image, mounted at $(head -1 "$jd/erofs.$n")" \
      || bad "$n: no EROFS image: $(head -2 "$jd/stats.$n" 2>&1) / $(cat "$jd/erofs.$n" 2>&1)"
    if [[ -s $jd/names.$n ]] && diff -u "$jd/expected.names" "$jd/names.$n" >/dev/null; then
      ok "$n: find lists the same $(wc -l <"$jd/expected.names") names as the source"
    else
      bad "$n: find under the mount differs from the source:"$'\n'"$(diff -u "$jd/expected.names" "$jd/names.$n" 2>&1 | head -20)"
    fi
  done
  # J1: from job start (slurmctld allocates it) to the end of the batch script's first read, against
  # the batch step's wait for its agent, i.e. the stage-in. Goal: J1 <= stage-in + 1 s.
  start=$(job_start "$j")
  stage=$(plugin_log_lines "$j" | sed -n 's/.*step batch on node1: agent ready after \([0-9.]*\) s.*/\1/p' | head -1)
  if [[ -s $jd/first_read.$j && -n $start && -n $stage ]]; then
    first=$(awk -v t0="$(date -d "$start" +%s.%N)" 'NR == 2 { printf "%.3f", $1 - t0 }' "$jd/first_read.$j")
    say "J1: job start -> first read done: $first s; stage-in (batch step's wait for its agent): $stage s"
    echo "J1 job_start_to_first_read_s=$first stagein_s=$stage" >"$BASE/jobs/j1.txt"
    awk -v f="$first" -v s="$stage" 'BEGIN { exit !(f <= s + 1.0) }' \
      && ok "J1: first read $first s after job start <= stage-in $stage s + 1 s" \
      || bad "J1: first read $first s after job start > stage-in $stage s + 1 s"
  else
    bad "J1: could not measure (start '${start}', stage-in '${stage}', first read file $jd/first_read.$j)"
  fi
  plugin_log_lines "$j" | sed 's/^/  log: /'
  # Job end: the plugin stops the agents through their srun before Slurm kills it, so no step is
  # cancelled (a cancelled agent step keeps the epilog waiting 2.3 s while its slurmstepds retry
  # the dead srun).
  local cancelled ended
  cancelled=$(grep -h "\[$j\.[0-9]*\] error: \*\*\* STEP .* CANCELLED" "$BASE"/log/slurmd.*.log 2>/dev/null)
  ended=$(awk -v p="[$j.0] done with job" 'index($0, p) { n++ } END { print n + 0 }' "$BASE"/log/slurmd.*.log 2>/dev/null)
  [[ -z $cancelled && ${ended:-0} -eq 2 ]] && ok "job end: the agent step ended on both nodes with the batch script, not cancelled" \
    || bad "job end: agent step ended on ${ended:-0} of 2 nodes; cancelled: ${cancelled:-none}"
  check_clean "$j"
}

main
finish
