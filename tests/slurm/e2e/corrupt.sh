#!/usr/bin/env bash
# slurm_corrupt (2-node ports cluster): after stage-in, node2's agent is killed and a frame of one
# of its files is damaged on the dataset: reading it on node1 gives EIO (twice, no bytes); node2's
# other files read correctly. node1's local directory is a small tmpfs, so the prolog gives the job
# a tmpfs of its own there (local_fs=auto), which the epilog unmounts.
#
# Usage: corrupt.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR ports). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  need_cluster ports
  local good src=$PFS/many ds=$PFS/many-corrupt.fs jd j st stats jobfs victim vshard voff vlen vcodec pid2 others
  good=$(many_dataset)
  rm -rf "$ds"
  cp -r "$good" "$ds"
  chown -R "$TUSER:" "$ds"
  jd=$(job_dir)
  expected_md5 "$src" >"$jd/expected"
  fstool placement "$ds" "$src" 2 1 >"$jd/placement" || { bad "fstool placement"; return; }
  # The victim: an incompressible file held by node2 only; the other files of node2 must still read.
  read -r victim vshard voff vlen vcodec < <("$PY" -c "
import json, sys
f = [f for f in json.loads(sys.stdin.readline())['files'] if f['path'].startswith('x/')][0]
print(f['path'], f['file'], f['offset'], f['stored'], f['codec'])" < <(sed -n 2p "$jd/placement"))
  files_of "$jd/placement" 1 | grep -vx "./$victim" >"$jd/others.files"
  md5_lines_of "$jd/others.files" "$jd/expected" >"$jd/others"
  others=$(wc -l <"$jd/others")
  cat >"$jd/read.py" <<'PY'
import errno, hashlib, sys
# Reads one file as an application would; says what it got: the error, or the md5 of the bytes.
for attempt in (1, 2):
    try:
        with open(sys.argv[1], 'rb') as f:
            data = f.read()
        print("attempt %d: read %d bytes md5 %s" % (attempt, len(data), hashlib.md5(data).hexdigest()))
    except OSError as e:
        print("attempt %d: error %s" % (attempt, errno.errorcode.get(e.errno, e.errno)))
PY
  small_node1 "$jd/placement" || { bad "small node-local directory on node1"; return; }
  cat >"$jd/job.sh" <<EOF
#!/bin/bash
touch "$jd/started"
while [ ! -e "$jd/go" ]; do sleep 0.1; done
srun -N1 -w node1 bash -c 'cd "\$FANSTORE_MOUNT" && $PY $jd/read.py $victim > $jd/victim.out
  while read -r sum f; do md5sum "\$f"; done < $jd/others > $jd/md5.others'
touch "$jd/read"
while [ ! -e "$jd/go2" ]; do sleep 0.1; done
EOF
  chmod 0755 "$jd/job.sh"
  j=$(asu sbatch --parsable -N2 --chdir="$jd" -o "$jd/out.%j" --fanstore="$ds" --fanstore-replicas=1 "$jd/job.sh" 2>&1) \
    || { bad "sbatch: $j"; restore_local node1; return; }
  if wait_for "$j" "$jd/started" 60 && wait_ready "$j" node2; then
    ok "stage-in done on both nodes; victim $victim: $vshard at $voff, $vlen bytes ($vcodec), held by node2 only"
    # node1's local directory is on tmpfs: the prolog gave the job a tmpfs of its own there.
    jobfs=$(in_node_ns node1 findmnt -n -o FSTYPE,OPTIONS --mountpoint "$(node_local node1)/fanstore.$(uid_of).$j")
    [[ $jobfs == tmpfs* && $jobfs == *nosuid* && $jobfs == *nodev* && $jobfs == *mode=700* ]] \
      && ok "node1: the job's local directory is a tmpfs of its own ($jobfs)" || bad "node1: no job tmpfs: '$jobfs'"
    # node2's agent becomes unavailable, then a frame of its shard is damaged on the parallel file system.
    pid2=$(jget "$(status_of "$j" node2)" "['pid']")
    kill -KILL "$pid2"
    for _ in $(seq 50); do kill -0 "$pid2" 2>/dev/null || break; sleep 0.1; done
    ! kill -0 "$pid2" 2>/dev/null && ok "node2's agent (pid $pid2) killed" || bad "node2's agent $pid2 survived SIGKILL"
    printf '\xff\xfe' | dd of="$ds/$vshard" bs=1 seek=$((voff + vlen / 2)) conv=notrunc status=none
    cmp -s "$good/$vshard" "$ds/$vshard" && bad "the shard was not changed" || ok "2 bytes flipped in the middle of the frame of $victim in $vshard"
    touch "$jd/go"
    wait_for "$j" "$jd/read" 60 && stats=$(agent_stats "$j" node1)
    launch_log "$j" >"$jd/launch.log"
  fi
  touch "$jd/go" "$jd/go2"
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "job $j completed" || bad "job $j ended $st"
  sed 's/^/  node1: /' "$jd/victim.out" 2>/dev/null
  [[ $(grep -c "error EIO" "$jd/victim.out" 2>/dev/null) == 2 ]] && ! grep -q "bytes" "$jd/victim.out" \
    && ok "node1: reading $victim gives EIO, twice, never bytes" || bad "node1: $victim did not give EIO"
  grep -m1 "error: open $victim: " "$jd/launch.log" | sed 's/^/  agent: /'
  grep -q "error: open $victim: .*checksum mismatch" "$jd/launch.log" \
    && ok "node1's agent logged the checksum mismatch of the frame it read from $vshard" || bad "no checksum error in the agents' log"
  diff -q "$jd/others" "$jd/md5.others" >/dev/null 2>&1 \
    && ok "node1: the $others other files of node2 read correctly from the dataset directory" \
    || bad "node1: node2's other files:"$'\n'"$(diff -u "$jd/others" "$jd/md5.others" 2>&1 | head -10)"
  if [[ -n $stats ]]; then
    say "node1 stats: opens $(jget "$stats" "['opens']") prefetch $(jget "$stats" "['prefetch']") peers $(jget "$stats" "['peers']")"
    (($(jget "$stats" "['opens']['errors']") >= 1 && $(jget "$stats" "['opens']['fallback']") >= others && $(jget "$stats" "['prefetch']['files']") == 0)) \
      && ok "node1's agent counted the failed open ($(jget "$stats" "['opens']['errors']") errors) and $(jget "$stats" "['opens']['fallback']") fallback opens; nothing prefetched" \
      || bad "node1's stats: $(jget "$stats" "['opens']") $(jget "$stats" "['prefetch']")"
  else
    bad "no stats from node1's agent"
  fi
  check_clean "$j"
  in_node_ns node1 mountpoint -q "$(node_local node1)/fanstore.$(uid_of).$j" \
    && bad "node1: the job's tmpfs is still mounted" || ok "node1: the epilog unmounted the job's tmpfs"
  restore_local node1
  rm -rf "$ds"
}

main
finish
