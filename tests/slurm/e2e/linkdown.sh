#!/usr/bin/env bash
# slurm_linkdown (netns cluster; a 2-node job): node1 reads ten of node2's files, then node2's link goes
# down: node1 reads every file correctly, in bounded time; later, one open waits for the connect
# timeout; the link comes back before the job ends.
#
# Usage: linkdown.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR netns). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  need_cluster netns
  local ds src=$PFS/many jd j st stats veth=fslv2h hub=fsl-hub n2files total maxf slow ok_read=0
  ds=$(many_dataset)
  jd=$(job_dir)
  expected_md5 "$src" >"$jd/expected"
  fstool placement "$ds" "$src" 2 1 >"$jd/placement" || { bad "fstool placement"; return; }
  n2files=$(files_of "$jd/placement" 1 | wc -l)
  md5_lines_of <(files_of "$jd/placement" 1) "$jd/expected" >"$jd/node2"
  head -10 "$jd/node2" >"$jd/first"
  cat >"$jd/read.py" <<'PY'
import hashlib, sys, time
# md5 of every listed file, and how long each took.
with open(sys.argv[2], 'w') as out, open(sys.argv[3], 'w') as times:
    for line in open(sys.argv[1]):
        path = line.rstrip('\n').split('  ', 1)[1]
        t = time.monotonic()
        with open(path, 'rb') as f:
            data = f.read()
        times.write("%.3f %s\n" % (time.monotonic() - t, path))
        out.write("%s  %s\n" % (hashlib.md5(data).hexdigest(), path))
PY
  small_node1 "$jd/placement" || { bad "small node-local directory on node1"; return; }
  cat >"$jd/job.sh" <<EOF
#!/bin/bash
# Before: node1 reads ten of node2's files, so that it holds an open connection to node2's agent.
srun -N1 -w node1 bash -c 'cd "\$FANSTORE_MOUNT" && $PY $jd/read.py $jd/first $jd/md5.first $jd/times.first'
touch "$jd/started"
while [ ! -e "$jd/go" ]; do sleep 0.1; done
t0=\$(date +%s.%N)
srun -N1 -w node1 bash -c 'cd "\$FANSTORE_MOUNT" && $PY $jd/read.py $jd/expected $jd/md5.node1 $jd/times.node1'
t1=\$(date +%s.%N)
# Once node2 is no longer marked down (10 s), its files again: the agent tries to connect anew.
sleep 10.5
srun -N1 -w node1 bash -c 'cd "\$FANSTORE_MOUNT" && $PY $jd/read.py $jd/node2 $jd/md5.again $jd/times.again'
echo "\$t0 \$t1 \$(date +%s.%N)" > "$jd/read"
while [ ! -e "$jd/go2" ]; do sleep 0.1; done
EOF
  chmod 0755 "$jd/job.sh"
  j=$(asu sbatch --parsable -N2 -w node1,node2 --chdir="$jd" -o "$jd/out.%j" --fanstore="$ds" --fanstore-replicas=1 \
        "$jd/job.sh" 2>&1) || { bad "sbatch: $j"; restore_local node1; return; }
  if wait_for "$j" "$jd/started" 60 && wait_ready "$j" node2; then
    # node2 drops off the network: the hub side of its veth goes down.
    if ip -n "$hub" link set "$veth" down; then
      ok "node2 unreachable: ip -n $hub link set $veth down"
      ip netns exec fsl-node1 ping -c1 -W1 10.77.0.2 >/dev/null 2>&1 && bad "node1 still reaches node2" || ok "node1 no longer reaches 10.77.0.2"
    else
      bad "ip link set $veth down"
    fi
    touch "$jd/go"
    wait_for "$j" "$jd/read" 90 && ok_read=1
    stats=$(agent_stats "$j" node1)
    launch_log "$j" >"$jd/launch.log"
    ip -n "$hub" link set "$veth" up || bad "ip link set $veth up"
  fi
  ip -n "$hub" link set "$veth" up 2>/dev/null
  touch "$jd/go" "$jd/go2"
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "job $j completed (node2 back on the network before its end)" || bad "job $j ended $st"
  if [[ -s $jd/md5.node1 ]] && diff -q "$jd/expected" "$jd/md5.node1" >/dev/null; then
    ok "node1: md5 of all $(wc -l <"$jd/expected") files matches the source with node2 unreachable ($n2files held by node2 only)"
  else
    bad "node1: md5 mismatch:"$'\n'"$(diff -u "$jd/expected" "$jd/md5.node1" 2>&1 | head -10)"
  fi
  if ((ok_read)); then
    # With the connection that node1 had open to node2, the first request waits for the agent's I/O
    # timeout (3 s without progress); node2 is then marked down and skipped. After that, a new connection attempt costs
    # the connect timeout (3.5 s).
    total=$(awk '{ printf "%.2f", $2 - $1 }' "$jd/read")
    maxf=$(sort -rn "$jd/times.node1" | awk 'NR == 1 { print $1, $2 }')
    slow=$(awk '$1 > 1.0' "$jd/times.node1" | wc -l)
    say "all files, node2 just unreachable: $total s (srun step included); slowest: ${maxf%% *} s (${maxf#* }); files over 1 s: $slow"
    awk -v t="$total" -v m="${maxf%% *}" -v n="$slow" 'BEGIN { exit !(t < 15 && m < 5 && n == 1) }' \
      && ok "bounded: one open waited ${maxf%% *} s (the I/O timeout on the open connection), the other $(($(wc -l <"$jd/times.node1") - 1)) files no more than 1 s; all in $total s" \
      || bad "too slow: $total s in all, slowest file $maxf, $slow files over 1 s"
    total=$(awk '{ printf "%.2f", $3 - $2 }' "$jd/read")
    maxf=$(sort -rn "$jd/times.again" | awk 'NR == 1 { print $1, $2 }')
    slow=$(awk '$1 > 1.0' "$jd/times.again" | wc -l)
    say "node2's files again, 10.5 s later: slowest: ${maxf%% *} s (${maxf#* }); files over 1 s: $slow"
    awk -v m="${maxf%% *}" -v n="$slow" 'BEGIN { exit !(m < 5 && n == 1) }' \
      && ok "after node2's 10 s as down: one open waited ${maxf%% *} s (the connect timeout), then node2 was skipped again" \
      || bad "second round: slowest file $maxf, $slow files over 1 s"
    diff -q "$jd/node2" "$jd/md5.again" >/dev/null 2>&1 && ok "node1: node2's $n2files files read correctly again" \
      || bad "node1: second round md5 mismatch"
  else
    bad "node1's reads did not finish in 90 s"
  fi
  grep -E "fetch .* from rank 1" "$jd/launch.log" | head -3 | sed 's/^/  agent: /'
  if [[ -n $stats ]]; then
    say "node1 stats: opens $(jget "$stats" "['opens']") bytes $(jget "$stats" "['bytes']") prefetch $(jget "$stats" "['prefetch']") peers $(jget "$stats" "['peers']")"
    (($(jget "$stats" "['opens']['fallback']") >= n2files - 1 && $(jget "$stats" "['opens']['errors']") == 0 && $(jget "$stats" "['peers']['fetch_errors']") >= 1)) \
      && ok "node1 served node2's files from the dataset directory ($(jget "$stats" "['opens']['fallback']") fallback opens, $(jget "$stats" "['peers']['fetch_errors']") failed fetches, no error)" \
      || bad "node1's stats: $(jget "$stats" "['opens']") $(jget "$stats" "['peers']")"
  else
    bad "no stats from node1's agent"
  fi
  check_clean "$j"
  restore_local node1
}

main
finish
